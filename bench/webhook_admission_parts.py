"""Where admission's CPU goes: the same plain and GPU pod rounds as `webhook_admission.py`,
with the apiserver's admission configuration varied between rounds of ONE control plane, so
the variants are compared under the same load (separate runs on a shared machine differ by
more than the effects measured).

Variants (each round runs every variant in turn, odd rounds in reverse order: a plain
round, then a GPU round; after each change of configuration 32 plain and 32 GPU pods are
created uncounted, so what the apiserver compiles for it is not charged to a variant):
  policy     the pod policy as shipped (with its matchConditions), the real webhook condition
  nomatch    the pod policy without its matchConditions (every pod evaluated by all rules)
  nopolicy   no pod policy
  trivial    the pod policy as shipped; the webhook's matchCondition replaced by one map lookup
  null       the pod policy as shipped; GPU pods go to `null_webhook.py` instead (answers the
             same patch without deciding anything: the floor of any Python webhook)
  null-nopolicy  the null webhook (with its patch) and no pod policy
  null-nopatch  no pod policy (it refuses untranslated GPU pods); the null webhook allows
             pods unchanged: what the call alone costs
  null-annotations, null-labels, null-scheduler  no pod policy; the null webhook's patch
             is only that part (its annotations, its label, spec.schedulerName): what a
             mutation costs the apiserver by what it changes

Prints, per variant: pods/s of plain and GPU pods and their ratio, and the CPU ms per pod of
kube-apiserver (plain, GPU) and of the webhook (GPU). Usage:

    python bench/webhook_admission_parts.py [--pods 200] [--rounds 4] [--concurrency 32]
                                            [--variants policy,nomatch,nopolicy,trivial]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import webhook_admission as wa  # noqa: E402
from gpugov.k8s.devcluster import build  # noqa: E402
from gpugov.k8s.devcluster.dev import create_defaults, install_crds, start_webhook  # noqa: E402
from gpugov.k8s.devcluster.plane import LocalControlPlane, probe  # noqa: E402
from gpugov.k8s.devcluster.processes import free_port  # noqa: E402
from gpugov.k8s.devcluster.rbac import apply_component_rbac  # noqa: E402
from gpugov.k8s.identities import SYSTEM_NAMESPACE  # noqa: E402
from gpugov.k8s.webhook import policy  # noqa: E402

VARIANTS = ("policy", "nomatch", "nopolicy", "trivial", "null", "null-nopolicy", "null-nopatch",
            "null-annotations", "null-labels", "null-scheduler")
DEFAULT_VARIANTS = ("policy", "nomatch", "nopolicy", "trivial")
#: the process answering GPU pods' reviews in each variant
HOOK_PROC = {"null": "null-webhook", "null-nopolicy": "null-webhook",
             "null-nopatch": "null-webhook-nopatch", "null-annotations": "null-webhook-ann",
             "null-labels": "null-webhook-labels", "null-scheduler": "null-webhook-scheduler"}
#: the null webhook's arguments per process
NULL_ARGS = {"null-webhook": [], "null-webhook-nopatch": ["--no-patch"],
             "null-webhook-ann": ["--parts", "annotations"],
             "null-webhook-labels": ["--parts", "labels"],
             "null-webhook-scheduler": ["--parts", "scheduler"]}
#: variants that run without the pod policy
NO_POLICY = ("nopolicy", "null-nopolicy", "null-nopatch", "null-annotations", "null-labels",
             "null-scheduler")


def start_null(plane: LocalControlPlane, name: str) -> str:
    """Start `null_webhook.py` as process `name` of the plane; its base URL."""
    assert plane.ca is not None
    pair = plane.ca.serving("gpugov-webhook")
    cert, key = plane.pki_dir / f"{name}.crt", plane.pki_dir / f"{name}.key"
    pair.write(cert, key)
    port = free_port()
    plane.start_process(name, [
        sys.executable, str(Path(__file__).resolve().parent / "null_webhook.py"), "--cert",
        str(cert), "--key", str(key), "--client-ca", str(plane.webhook_client_ca), "--listen",
        f"127.0.0.1:{port}", *NULL_ARGS[name]],
        ready=lambda: probe(f"https://127.0.0.1:{port}/healthz", plane.ssl_context()) == b"ok",
        timeout=30)
    return f"https://127.0.0.1:{port}"


async def configure(kc: Path, ca: bytes, url: str, variant: str) -> None:
    objs = policy.pod_ownership_policies(SYSTEM_NAMESPACE)
    if variant in NO_POLICY:  # (the policy refuses GPU pods the null webhook leaves untranslated)
        await policy.delete_policies(kc, objs)
    else:
        if variant == "nomatch":
            objs[0]["spec"].pop("matchConditions", None)
        await policy.apply_policies(kc, objs)
    await wa.register(kc, ca, url, False, variant == "trivial")
    await asyncio.sleep(2.0)  # the informers; then what a new configuration compiles is
    for gpu in (False, True):  # spent before the counted rounds
        await wa.create(kc, "bench", [f"c{variant}{int(gpu)}-{time.monotonic_ns()}-{i}"
                                      for i in range(32)], gpu, 32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                    help=f"comma-separated, of: {', '.join(VARIANTS)}")
    args = ap.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        ap.error(f"unknown variants {bad}; allowed: {', '.join(VARIANTS)}")
    build.ensure_binaries(("etcd", "kube-apiserver"))
    secs: dict[tuple[str, bool], float] = {}
    cpu: dict[tuple[str, bool], dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        plane = LocalControlPlane(Path(tmp) / "plane", controller_manager=False, kwok=False,
                                  extra_args={"kube-apiserver": [
                                      "--max-requests-inflight=2000",
                                      "--enable-priority-and-fairness=false"]})
        plane.start()
        try:
            kc, ca = plane.kubeconfig, plane.ca.pair.cert
            asyncio.run(install_crds(kc))
            asyncio.run(create_defaults(kc))
            hook_kc = asyncio.run(apply_component_rbac(kc, "webhook", SYSTEM_NAMESPACE,
                                                       Path(tmp) / "kubeconfig-webhook"))
            real = (start_webhook(plane, kubeconfig=hook_kc)
                    if any(v not in HOOK_PROC for v in variants) else "")
            started: dict[str, str] = {}
            for v in variants:
                proc = HOOK_PROC.get(v)
                if proc is not None and proc not in started:
                    started[proc] = start_null(plane, proc)
            urls = {v: started[HOOK_PROC[v]] if v in HOOK_PROC else real for v in variants}
            asyncio.run(wa.namespace(kc, "bench"))
            for r in range(-1, args.rounds):  # round -1: warm-up, not counted
                # odd rounds run the variants in reverse: no variant always follows another
                for v in (variants if r % 2 == 0 else variants[::-1]):
                    asyncio.run(configure(kc, ca, urls[v], v))
                    for gpu in (False, True):
                        n = args.concurrency if r < 0 else args.pods
                        names = [f"{v}{int(gpu)}-{r + 1}-{i}" for i in range(n)]
                        before = wa.cpu_seconds(plane)
                        took, _lat = asyncio.run(wa.create(kc, "bench", names, gpu,
                                                           args.concurrency))
                        if r < 0:
                            continue
                        after = wa.cpu_seconds(plane)
                        key = (v, gpu)
                        secs[key] = secs.get(key, 0.0) + took
                        mine = cpu.setdefault(key, {})
                        for proc, used in after.items():
                            mine[proc] = mine.get(proc, 0.0) + used - before.get(proc, 0.0)
        finally:
            plane.stop()
    n = args.pods * args.rounds
    print(f"pods={args.pods} x {args.rounds} rounds concurrency={args.concurrency}, variants "
          "alternated within one control plane")
    print(f"{'variant':10s} {'plain/s':>8s} {'GPU/s':>8s} {'ratio':>6s}   apiserver ms/pod "
          "plain, GPU   webhook ms/GPU pod")
    for v in variants:
        p, g = n / secs[(v, False)], n / secs[(v, True)]
        ap_p = cpu[(v, False)].get("kube-apiserver", 0.0) * 1000 / n
        ap_g = cpu[(v, True)].get("kube-apiserver", 0.0) * 1000 / n
        hook = cpu[(v, True)].get(HOOK_PROC.get(v, "gpugov-webhook"), 0.0) * 1000 / n
        print(f"{v:10s} {p:8.1f} {g:8.1f} {g / p:6.2f}   {ap_p:8.2f} {ap_g:8.2f}   {hook:10.2f}")


if __name__ == "__main__":
    main()
