"""Pods/s created through gpugov's admission webhook vs the same pods without it.

Starts its own local control plane (etcd + kube-apiserver), installs the CRDs, the default
Queue/Tenant, the pod-ownership ValidatingAdmissionPolicy and the webhook (as its own
ServiceAccount, with the chart's RBAC), as `gpugov dev up` and the chart do, then, in
`--rounds` alternating rounds, creates N pods without GPU requests (they skip the webhook by
matchConditions) and N GPU pods (HAMi spelling) through the webhook. With
`--create-validation`, a third kind of round registers the separate validating CREATE call
too (the arrangement before the policy took it over; a chart with admissionPolicy disabled).
Prints pods/s of each, their ratio to plain pods (one run: all under the same load), the
median and p99 create latency seen by the client, the CPU per pod of each process (the
client is this process), the webhook's own review latency (p50/p99 from its
`gpugov_webhook_review_seconds` histogram: the bucket bound at or above the quantile) and how
many pods it resolved by a live read instead of its watch cache. Usage:

    python bench/webhook_admission.py [--pods 500] [--concurrency 32] [--rounds 2]
                                      [--create-validation] [--no-policy]
                                      [--no-policy-match] [--trivial-condition]
                                      [--pprof DIR]

With `--pprof DIR`, the first round of each kind also records kube-apiserver's CPU profile
(its /debug/pprof endpoint, `--pprof-seconds` long from the round's start) into
DIR/<kind>.pb.gz; read them with `go tool pprof -top -diff_base DIR/plain.pb.gz DIR/gpu.pb.gz`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import resource
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from kubernetes_asyncio import client

from gpugov.k8s.devcluster import build
from gpugov.k8s.devcluster.client import api_client
from gpugov.k8s.devcluster.dev import (
    apply_webhook_configurations,
    create_defaults,
    install_crds,
    start_webhook,
)
from gpugov.k8s.devcluster.plane import LocalControlPlane, probe
from gpugov.k8s.devcluster.rbac import apply_component_rbac
from gpugov.k8s.identities import SYSTEM_NAMESPACE
from gpugov.k8s.webhook import policy, registration


def pod(name: str, gpu: bool) -> dict:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000"} if gpu else {"cpu": "100m"}
    return {"metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "x",
                                     "resources": {"limits": limits}}]}}


async def create(kubeconfig: Path, ns: str, names: list[str], gpu: bool, conc: int
                 ) -> tuple[float, list]:
    lat: list[float] = []
    async with api_client(kubeconfig, pool_size=conc) as api:
        core = client.CoreV1Api(api)
        sem = asyncio.Semaphore(conc)

        async def one(name: str) -> None:
            async with sem:
                t = time.perf_counter()
                await core.create_namespaced_pod(ns, pod(name, gpu))
                lat.append(time.perf_counter() - t)
        t0 = time.perf_counter()
        await asyncio.gather(*(one(n) for n in names))
        return time.perf_counter() - t0, lat


def histogram(text: str, name: str, label: str) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of one Prometheus histogram series."""
    out = []
    for m in re.finditer(rf'^{name}_bucket{{le="([^"]+)",{label}}} (\S+)$', text, re.M):
        out.append((float(m.group(1)), float(m.group(2))))
    return sorted(out)


def quantile(buckets: list[tuple[float, float]], q: float) -> float:
    total = buckets[-1][1] if buckets else 0.0
    for bound, count in buckets:
        if total and count >= q * total:
            return bound
    return float("nan")


def cpu_seconds(plane: LocalControlPlane) -> dict[str, float]:
    """CPU seconds (user + system) each process of the plane has used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for name, proc in plane.procs.procs.items():
        try:
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[name] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return out


def client_cpu() -> float:
    """CPU seconds this process (the client) has used so far."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


#: a matchCondition that reads one map key (the bench's GPU pods name nvidia.com/gpu first),
#: to measure what the real GPU_POD_CONDITION costs the apiserver beside it
TRIVIAL_CONDITION = "'nvidia.com/gpu' in object.spec.containers[0].resources.limits"


async def register(kubeconfig: Path, ca: bytes, url: str, create_validation: bool,
                   trivial: bool = False) -> None:
    """Replace the webhook configurations, then wait until the apiserver routes by them."""
    objs = registration.configurations(ca, url=url, create_validation=create_validation)
    if trivial:
        for obj in objs:
            for hook in obj["webhooks"]:
                if hook["name"].endswith(".pods.gpugov.io"):
                    hook["matchConditions"] = [{"name": "asks-for-gpu",
                                                "expression": TRIVIAL_CONDITION}]
    await apply_webhook_configurations(kubeconfig, objs)
    await asyncio.sleep(1.0)  # the apiserver's webhook informer is asynchronous


def reviews(plane: LocalControlPlane, url: str) -> dict[str, list[tuple[float, float]]]:
    """The webhook's review-latency histogram now, per webhook (mutate, validate)."""
    text = (probe(url + "/metrics", plane.ssl_context()) or b"").decode()
    return {hook: histogram(text, "gpugov_webhook_review_seconds", f'webhook="{hook}"')
            for hook in ("mutate", "validate")}


def profile(plane: LocalControlPlane, seconds: float, out: Path) -> threading.Thread:
    """Start recording kube-apiserver's CPU profile for `seconds` into `out` (a thread)."""
    def fetch() -> None:
        url = f"{plane.server}/debug/pprof/profile?seconds={max(1, round(seconds))}"
        with urllib.request.urlopen(url, timeout=seconds + 30,
                                    context=plane.ssl_context()) as resp:
            out.write_bytes(resp.read())
    thread = threading.Thread(target=fetch, daemon=True)
    thread.start()
    time.sleep(0.2)  # the profile starts when the request arrives
    return thread


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def namespace(kubeconfig: Path, name: str) -> None:
    async with api_client(kubeconfig) as api:
        await client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--create-validation", action="store_true",
                    help="also run GPU rounds with the separate validating CREATE call")
    ap.add_argument("--no-policy", action="store_true",
                    help="leave the pod policy out (as the bench did before it existed; every "
                         "pod then costs the apiserver less)")
    ap.add_argument("--no-policy-match", action="store_true",
                    help="the pod policy without its matchConditions (every pod evaluated, "
                         "as before they existed)")
    ap.add_argument("--trivial-condition", action="store_true",
                    help="the webhook's matchCondition replaced by one map lookup (what the "
                         "real condition costs)")
    ap.add_argument("--pprof", type=Path, default=None, metavar="DIR",
                    help="record kube-apiserver's CPU profile of each kind's first round here")
    ap.add_argument("--pprof-seconds", type=float, default=2.0)
    args = ap.parse_args()
    if args.pprof is not None:
        args.pprof.mkdir(parents=True, exist_ok=True)
    kinds = ["plain", "gpu"] + (["gpu+validate"] if args.create_validation else [])
    build.ensure_binaries(("etcd", "kube-apiserver"))
    with tempfile.TemporaryDirectory() as tmp:
        plane = LocalControlPlane(Path(tmp) / "plane", controller_manager=False, kwok=False,
                                  extra_args={"kube-apiserver": ["--max-requests-inflight=2000",
                                                                 "--enable-priority-and-fairness=false"]})
        plane.start()
        try:
            kc = plane.kubeconfig
            asyncio.run(install_crds(kc))
            asyncio.run(create_defaults(kc))
            hook_kc = asyncio.run(apply_component_rbac(kc, "webhook", SYSTEM_NAMESPACE,
                                                       Path(tmp) / "kubeconfig-webhook"))
            url = start_webhook(plane, kubeconfig=hook_kc)
            if not args.no_policy:
                objs = policy.pod_ownership_policies(SYSTEM_NAMESPACE)
                if args.no_policy_match:
                    objs[0]["spec"].pop("matchConditions", None)
                asyncio.run(policy.apply_policies(kc, objs))
            trivial = args.trivial_condition
            asyncio.run(register(kc, plane.ca.pair.cert, url, False, trivial))
            asyncio.run(namespace(kc, "bench"))
            for kind in kinds:  # warm-up, not counted: connections, caches, compiled CEL
                if args.create_validation and kind != "plain":
                    asyncio.run(register(kc, plane.ca.pair.cert, url, kind == "gpu+validate",
                                         trivial))
                asyncio.run(create(kc, "bench", [f"w{len(kind)}-{i}" for i in range(
                    args.concurrency)], kind != "plain", args.concurrency))
            secs = dict.fromkeys(kinds, 0.0)
            lats: dict[str, list[float]] = {k: [] for k in kinds}
            cpu: dict[str, dict[str, float]] = {k: {} for k in kinds}
            hist: dict[str, dict[str, list[tuple[float, float]]]] = {k: {} for k in kinds}
            for r in range(args.rounds):
                for kind in kinds:
                    if args.create_validation and kind != "plain":
                        asyncio.run(register(kc, plane.ca.pair.cert, url,
                                             kind == "gpu+validate", trivial))
                    names = [f"{kind[:3]}{len(kind)}-{r}-{i}" for i in range(args.pods)]
                    hist0 = reviews(plane, url)
                    rec = (profile(plane, args.pprof_seconds, args.pprof / f"{kind}.pb.gz")
                           if args.pprof is not None and r == 0 else None)
                    before, mine = cpu_seconds(plane), client_cpu()
                    took, lat = asyncio.run(create(kc, "bench", names, kind != "plain",
                                                   args.concurrency))
                    used_here = {**cpu_seconds(plane), "client": client_cpu()}
                    if rec is not None:
                        rec.join()
                    for proc, used in used_here.items():
                        start = mine if proc == "client" else before.get(proc, 0)
                        cpu[kind][proc] = cpu[kind].get(proc, 0.0) + used - start
                    secs[kind] += took
                    lats[kind] += lat
                    for hook, got in reviews(plane, url).items():  # this round's reviews
                        old = dict(hist0.get(hook, []))
                        mine_h = dict(hist[kind].get(hook, []))
                        hist[kind][hook] = [(b, mine_h.get(b, 0.0) + c - old.get(b, 0.0))
                                            for b, c in got]
            metrics = (probe(url + "/metrics", plane.ssl_context()) or b"").decode()
        finally:
            plane.stop()
    n = args.pods * args.rounds
    rate = {kind: n / secs[kind] for kind in kinds}
    names = {"plain": "plain pods (no webhook)", "gpu": "GPU pods (webhook)",
             "gpu+validate": "GPU pods (+CREATE call)"}
    print(f"pods={args.pods} x {args.rounds} rounds concurrency={args.concurrency}")
    for kind in kinds:
        print(f"{names[kind]:26s} {rate[kind]:8.1f} pods/s   create latency median "
              f"{statistics.median(lats[kind]) * 1000:6.1f} ms  p99 "
              f"{pct(lats[kind], 0.99) * 1000:6.1f} ms")
    for kind in kinds[1:]:
        print(f"ratio {kind}/plain{' ' * (20 - len(kind))}{rate[kind] / rate['plain']:8.2f}")
    for kind in kinds:
        print(f"CPU ms per {kind} pod: " + ", ".join(
            f"{proc} {used * 1000 / n:.2f}" for proc, used in sorted(cpu[kind].items())))
    for kind in kinds[1:]:
        for hook, buckets in sorted(hist[kind].items()):
            if buckets and buckets[-1][1]:
                within = dict(buckets).get(0.02, 0.0) / buckets[-1][1]
                print(f"inside the webhook, {kind} rounds ({hook}, {int(buckets[-1][1])} "
                      f"reviews): p50 <= {quantile(buckets, 0.5) * 1000:g} ms, p99 <= "
                      f"{quantile(buckets, 0.99) * 1000:g} ms, {within:.1%} within 20 ms")
    live = re.findall(r'^gpugov_webhook_tenancy_live_reads\{why="([^"]+)"\} (\S+)$', metrics,
                      re.M)
    print("tenancy read live instead of from the cache: "
          + (", ".join(f"{w} {float(c):g}" for w, c in live) or "none"))


if __name__ == "__main__":
    main()
