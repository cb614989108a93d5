"""gpugov's node affinity decisions against the real kube-scheduler's, on the same kwok nodes
and the same random affinities (seeded): for each affinity, gpugov's scheduler places a GPU
pod and kube-scheduler (its default profile, no extender) a CPU pod.

- gpugov binds ⇔ kube-scheduler binds (or keeps it Unschedulable);
- the node gpugov chose satisfies the affinity by kube-scheduler's own semantics: a second
  kube pod, the same affinity with every term pinned to that node (`matchFields`
  metadata.name), binds there.
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections import Counter
from pathlib import Path

import yaml

from gpugov.k8s.devcluster.processes import free_port
from gpugov.k8s.scheduler import names
from gpugov.k8s.scheduler.harness import TIMEOUT, condition, env, gpu_node, wait_until

KEYS = ("zone", "gen", "rack")
VALUES = {"zone": ["a", "b"], "gen": ["7", "8", "9", "x"], "rack": ["r1", "r2"]}
CASES = 12


def random_labels(rng: random.Random) -> dict[str, str]:
    return {k: rng.choice(VALUES[k]) for k in KEYS if rng.random() < 0.75}


def random_affinity(rng: random.Random) -> list[dict]:
    terms = []
    for _ in range(rng.randint(1, 2)):
        exprs = []
        for _ in range(rng.randint(1, 2)):
            key = rng.choice(KEYS)
            op = rng.choice(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"])
            e: dict = {"key": key, "operator": op}
            if op in ("In", "NotIn"):
                e["values"] = rng.sample(VALUES[key], rng.randint(1, 2))
            elif op in ("Gt", "Lt"):
                e["values"] = [rng.choice(["7", "8", "9"])]
            exprs.append(e)
        terms.append({"matchExpressions": exprs})
    return terms


def with_affinity(pod: dict, terms: list[dict]) -> dict:
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                                {"nodeSelectorTerms": terms}}}
    return pod


def kube_pod(name: str, ns: str, scheduler: str, label: dict, terms: list[dict]) -> dict:
    return with_affinity({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
        "spec": {"schedulerName": scheduler, "nodeSelector": dict(label),
                 "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "c", "image": "fake",
                                 "resources": {"requests": {"cpu": "10m"}}}]}}, terms)



def _start_kube_scheduler(plane, kubeconfig, e) -> str:  # type: ignore[no-untyped-def]
    """The real kube-scheduler with its own profile name, as a process of `e`."""
    profile = f"kube-{e.uid}"
    cfg = {"apiVersion": "kubescheduler.config.k8s.io/v1",
           "kind": "KubeSchedulerConfiguration",
           "clientConnection": {"kubeconfig": str(kubeconfig)},
           "leaderElection": {"leaderElect": False},
           "profiles": [{"schedulerName": profile}]}
    path = Path(plane.workdir) / f"kube-scheduler-{e.uid}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    kc = str(kubeconfig)
    proc = f"kube-scheduler-{e.uid}"
    plane.start_process(proc, [
        str(plane.bin / "kube-scheduler"), f"--config={path}",
        "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
        f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
        f"--cert-dir={plane.workdir / ('certs-' + e.uid)}"])
    e.procs.append(proc)
    return profile

def test_gpugov_node_affinity_decisions_equal_kube_schedulers(k8s_control_plane) -> None:
    plane = k8s_control_plane.plane
    rng = random.Random(20)

    async def main() -> None:
        async with env(k8s_control_plane) as e:
            made = [gpu_node(f"{e.uid}-n{i}", 16, {**e.label, **random_labels(rng)})
                    for i in range(4)]
            for n in made:
                e.nodes[n["metadata"]["name"]] = 16
            await e._create_nodes(made)
            labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in made}
            q = await e.queue("q")
            e.start_scheduler()
            profile = _start_kube_scheduler(plane, k8s_control_plane.kubeconfig, e)

            async def outcome(name: str) -> tuple[str, str] | None:
                _, p = await e.kube.request("GET", f"/api/v1/namespaces/{e.ns}/pods/{name}")
                if p["spec"].get("nodeName"):
                    return "bound", p["spec"]["nodeName"]
                c = condition(p)
                return ("pending", c[1]) if c else None

            seen = []
            for i in range(CASES):
                terms = random_affinity(rng)
                g = with_affinity(e.pod(f"g{i}", q, limits={names.GPU_RESOURCE: "1"}),
                                  copy.deepcopy(terms))
                k = kube_pod(f"k{i}", e.ns, profile, e.label, copy.deepcopy(terms))
                await e.pods([g, k])
                got_g = await wait_until(lambda n=f"g{i}": outcome(n), TIMEOUT, f"g{i}")
                got_k = await wait_until(lambda n=f"k{i}": outcome(n), TIMEOUT, f"k{i}")
                case = f"case {i}: {terms} on {labels}"
                assert got_g[0] == got_k[0], (case, got_g, got_k)
                seen.append(got_g[0])
                if got_g[0] == "pending":
                    assert "node-selector" in got_g[1], (case, got_g)
                    continue
                pinned = [{**t, "matchFields": [{"key": "metadata.name", "operator": "In",
                                                 "values": [got_g[1]]}]} for t in terms]
                await e.pods([kube_pod(f"p{i}", e.ns, profile, e.label, pinned)])
                got_p = await wait_until(lambda n=f"p{i}": outcome(n), TIMEOUT, f"p{i}")
                assert got_p == ("bound", got_g[1]), (case, got_g, got_p)
            assert {"bound", "pending"} <= set(seen), seen  # the seed tries both outcomes

    asyncio.run(main())


# -- pod affinity, anti-affinity and topology spread against the real kube-scheduler ---------

HOST = "kubernetes.io/hostname"
POD_CASES = 16


def random_interpod(rng: random.Random, case: str) -> tuple[str, dict]:
    """(kind, spec fields) of one required inter-pod constraint on `case`'s pods."""
    key = rng.choice([HOST, "zone", "rack"])
    sel = {"matchLabels": {"case": case, "app": rng.choice(["x", "y"])}}
    kind = rng.choice(["podAffinity", "podAntiAffinity", "spread"])
    if kind == "spread":
        return kind, {"topologySpreadConstraints": [
            {"maxSkew": rng.choice([1, 2]), "topologyKey": key,
             "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel}]}
    return kind, {"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": sel, "topologyKey": key}]}}}


def cpu_pod(name: str, ns: str, labels: dict, spec: dict, scheduler: str = "",
            node: str = "", node_selector: dict | None = None) -> dict:
    out = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns, "labels": labels},
           "spec": {**copy.deepcopy(spec), "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "c", "image": "fake",
                                    "resources": {"requests": {"cpu": "10m"}}}]}}
    if scheduler:
        out["spec"]["schedulerName"] = scheduler
    if node:
        out["spec"]["nodeName"] = node
    if node_selector:
        out["spec"]["nodeSelector"] = dict(node_selector)
    return out


def test_gpugov_pod_affinity_and_spread_decisions_equal_kube_schedulers(
        k8s_control_plane) -> None:
    """Seeded cases: per case, existing pods (bound by nodeName, some with their own
    anti-affinity) and one required inter-pod constraint; gpugov places a GPU pod with it,
    the pod is removed, kube-scheduler places a CPU pod with the same labels and
    constraint: both bind or both wait, and when gpugov bound, the same constraint pinned to
    gpugov's node binds there under kube-scheduler (gpugov chose a node kube-scheduler
    allows; for spread, the same skew outcome)."""
    plane = k8s_control_plane.plane
    rng = random.Random(34)

    async def main() -> None:
        async with env(k8s_control_plane) as e:
            made = []
            for i in range(4):
                labels = {**e.label, HOST: f"{e.uid}-n{i}"}
                if rng.random() < 0.8:
                    labels["zone"] = rng.choice(["a", "b"])
                if rng.random() < 0.6:
                    labels["rack"] = rng.choice(["r1", "r2"])
                made.append(gpu_node(f"{e.uid}-n{i}", 16, labels))
            for n in made:
                e.nodes[n["metadata"]["name"]] = 16
            await e._create_nodes(made)
            labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in made}
            q = await e.queue("q")
            e.start_scheduler()
            profile = _start_kube_scheduler(plane, k8s_control_plane.kubeconfig, e)
            base = f"/api/v1/namespaces/{e.ns}/pods"

            async def outcome(name: str) -> tuple[str, str] | None:
                _, p = await e.kube.request("GET", f"{base}/{name}")
                if p["spec"].get("nodeName"):
                    return "bound", p["spec"]["nodeName"]
                c = condition(p)
                return ("pending", c[1]) if c else None

            async def remove(name: str) -> None:
                await e.kube.request("DELETE", f"{base}/{name}", {"gracePeriodSeconds": 0})

                async def gone() -> bool:
                    status, _ = await e.kube.request("GET", f"{base}/{name}")
                    return status == 404

                await wait_until(gone, TIMEOUT, f"{name} deleted")

            seen = []
            for i in range(POD_CASES):
                case = f"c{i}"
                existing = []
                for j in range(rng.randint(0, 4)):
                    spec = {}
                    if rng.random() < 0.3:
                        spec = {"affinity": {"podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {"labelSelector": {"matchLabels": {
                                    "case": case, "app": rng.choice(["x", "y"])}},
                                 "topologyKey": rng.choice([HOST, "zone"])}]}}}
                    existing.append(cpu_pod(f"{case}-e{j}", e.ns,
                                            {"case": case, "app": rng.choice(["x", "y"])},
                                            spec, node=rng.choice(list(labels))))
                await e.pods(existing)
                kind, spec = random_interpod(rng, case)
                own = {"case": case, "app": rng.choice(["x", "y"])}
                g = e.pod(f"{case}-g", q, limits={names.GPU_RESOURCE: "1"}, labels=own)
                g["spec"].update(copy.deepcopy(spec))
                await e.pods([g])
                got_g = await wait_until(lambda n=f"{case}-g": outcome(n), TIMEOUT, case)
                await remove(f"{case}-g")
                k = cpu_pod(f"{case}-k", e.ns, own, spec, profile, node_selector=e.label)
                await e.pods([k])
                got_k = await wait_until(lambda n=f"{case}-k": outcome(n), TIMEOUT, case)
                what = f"{case}: {kind} {spec} own {own} existing " \
                       f"{[(x['spec']['nodeName'], x['metadata']['labels']) for x in existing]}" \
                       f" on {labels}"
                assert got_g[0] == got_k[0], (what, got_g, got_k)
                seen.append((kind, got_g[0]))
                if got_g[0] == "pending":
                    assert ("pod-affinity" if kind == "podAffinity" else "pod-anti-affinity"
                            if kind == "podAntiAffinity" else "topology-spread") in got_g[1], \
                        (what, got_g)
                    continue
                await remove(f"{case}-k")
                pinned = cpu_pod(f"{case}-p", e.ns, own, spec, profile, node_selector=e.label)
                pinned["spec"].setdefault("affinity", {})["nodeAffinity"] = {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In",
                                          "values": [got_g[1]]}]}]}}
                await e.pods([pinned])
                got_p = await wait_until(lambda n=f"{case}-p": outcome(n), TIMEOUT, case)
                assert got_p == ("bound", got_g[1]), (what, got_g, got_p)
                await remove(f"{case}-p")
            print("inter-pod cases (kind, outcome):", Counter(seen))
            outcomes = {o for _, o in seen}
            assert {"bound", "pending"} <= outcomes, seen  # the seed tries both outcomes

    asyncio.run(main())
