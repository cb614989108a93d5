"""`gpugov scheduler`: wire the client, optional leader election, state, applier and runner.

Exit codes: 0 after SIGTERM/SIGINT (the Lease is released, so a standby takes over at
once), 1 when leadership was lost (like kube-scheduler: a replica that may no longer act
stops acting, and its supervisor restarts it as a standby).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from dataclasses import dataclass
from pathlib import Path

from gpugov.k8s.leader import LeaderElector, LeaseTiming
from gpugov.k8s.scheduler.apply import Applier
from gpugov.k8s.scheduler.kube import Kube
from gpugov.k8s.scheduler.runner import Runner
from gpugov.k8s.scheduler.state import SchedulerState

log = logging.getLogger("gpugov.scheduler")


@dataclass(frozen=True)
class SchedulerOptions:
    kubeconfig: Path
    policy: str = "gpugov"
    leader_elect: bool = False
    lease_name: str = "gpugov-scheduler"
    lease_namespace: str = "kube-system"
    identity: str = ""
    timing: LeaseTiming = LeaseTiming()
    concurrency: int = 64
    period: float = 1.0
    events: bool = True
    scheduler_name: str = ""
    node_selector: tuple[tuple[str, str], ...] = ()
    metrics: tuple[str, int] | None = None  # HOST, PORT of /metrics


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"


async def serve(opts: SchedulerOptions) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    kube = await Kube.from_kubeconfig(opts.kubeconfig, pool=max(opts.concurrency, 8) * 2)
    elector = None
    keeper = None
    code = 0
    parts: dict = {}
    if opts.metrics is not None:
        from gpugov.k8s.scheduler.metrics import SchedulerCollector, serve_metrics

        serve_metrics(*opts.metrics, SchedulerCollector(lambda: (
            parts.get("state"), parts.get("applier"), parts.get("runner"),
            "runner" in parts and (elector is None or not elector.lost.is_set()))))
    try:
        if opts.leader_elect:
            elector = LeaderElector(kube, opts.lease_namespace, opts.lease_name,
                                    opts.identity or default_identity(), opts.timing)
            log.info("waiting for lease %s/%s as %s", opts.lease_namespace, opts.lease_name,
                     elector.identity)
            acquire = asyncio.create_task(elector.acquire())
            stopped = asyncio.create_task(stop.wait())
            await asyncio.wait({acquire, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not acquire.done():
                acquire.cancel()
                return 0
            stopped.cancel()
            keeper = asyncio.create_task(elector.keep())
            lost = asyncio.create_task(elector.lost.wait())
            lost.add_done_callback(lambda _t: stop.set())
        name = opts.scheduler_name or _scheduler_name()
        log.info("leading: scheduling pods with schedulerName %s", name)
        state = SchedulerState(policy=opts.policy, scheduler_name=name,
                               node_selector=dict(opts.node_selector))
        applier = Applier(kube, state, opts.concurrency, opts.events)
        runner = Runner(kube, state, applier, period=opts.period)
        parts.update(state=state, applier=applier, runner=runner)
        await runner.run(stop)
        if elector is not None and elector.lost.is_set():
            code = 1
    finally:
        if keeper is not None:
            keeper.cancel()
        if elector is not None and not elector.lost.is_set():
            await elector.release()
        await kube.close()
    return code


def _scheduler_name() -> str:
    from gpugov.k8s.scheduler.names import SCHEDULER_NAME

    return SCHEDULER_NAME


def run(opts: SchedulerOptions) -> int:
    """Serve until stopped. With GPUGOV_PROFILE=FILE set, the run is profiled (cProfile) and
    the statistics written to FILE at a clean stop (bench/k8s_throughput.py --profile)."""
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    out = os.environ.get("GPUGOV_PROFILE")
    if not out:
        return asyncio.run(serve(opts))
    import cProfile

    prof = cProfile.Profile()
    try:
        return prof.runcall(asyncio.run, serve(opts))
    finally:
        prof.dump_stats(out)
