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
            profile = f"kube-{e.uid}"
            cfg = {"apiVersion": "kubescheduler.config.k8s.io/v1",
                   "kind": "KubeSchedulerConfiguration",
                   "clientConnection": {"kubeconfig": str(k8s_control_plane.kubeconfig)},
                   "leaderElection": {"leaderElect": False},
                   "profiles": [{"schedulerName": profile}]}
            path = Path(plane.workdir) / f"kube-scheduler-{e.uid}.yaml"
            path.write_text(yaml.safe_dump(cfg))
            kc = str(k8s_control_plane.kubeconfig)
            proc = f"kube-scheduler-{e.uid}"
            plane.start_process(proc, [
                str(plane.bin / "kube-scheduler"), f"--config={path}",
                "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
                f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
                f"--cert-dir={plane.workdir / ('certs-' + e.uid)}"])
            e.procs.append(proc)

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
