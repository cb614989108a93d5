"""`gpugov dev …`: a local Kubernetes cluster with gpugov (gpugov.k8s.devcluster)."""

from __future__ import annotations

from pathlib import Path

import typer

from gpugov.cli._app import app
from gpugov.cli._common import _fail, _positive_seconds

dev_app = typer.Typer(help="A local Kubernetes cluster with gpugov (real apiserver, kwok nodes).",
                      no_args_is_help=True)
app.add_typer(dev_app, name="dev")


@dev_app.command("build")
def dev_build_cmd(
    helm: bool = typer.Option(False, "--helm", help="also build helm"),
) -> None:
    """Build (once) kube-apiserver, controller-manager, scheduler, kubectl, etcd and kwok."""
    import json

    from gpugov.k8s.devcluster import build
    from gpugov.sim.progress import Steps

    try:
        build.ensure_cache_root()  # a bad XDG_CACHE_HOME: one line naming it, exit 2
        with Steps("dev build", "checking the binary cache") as steps:  # also in a pipe
            report = build.ensure_binaries(progress=steps.say, include_helm=helm)
    except build.BuildError as e:
        raise _fail(str(e)) from None
    except OSError as e:  # a folder of the cache it cannot write: name it, no traceback
        raise _fail(f"{e.filename or build.cache_root()}: {e.strerror or e}") from None
    typer.echo(json.dumps({"bin": str(build.bin_dir()), **report.as_dict()}, indent=1))


@dev_app.command("up")
def dev_up_cmd(
    nodes: Path | None = typer.Option(None, "--nodes", help="cluster.yaml or nodes CSV "
                                      "(default: the built-in mixed fleet)"),
    directory: Path | None = typer.Option(None, "--dir", help="work dir (state, logs, certs)"),
    dra_pool: list[str] = typer.Option([], "--dra-pool", metavar="POOL",
                                       help="serve this node pool's GPUs through DRA (label "
                                       "gpugov.io/dra=true; repeatable): turns on the DRA alpha "
                                       "gates and runs `gpugov dra publish --govern` and `gpugov "
                                       "dra governor` (docs/dra.md)"),
) -> None:
    """Start a local cluster with gpugov; the last line printed is `export KUBECONFIG=...`."""
    from rich.console import Console

    from gpugov.k8s.devcluster import build, dev
    from gpugov.k8s.devcluster.cluster_file import ClusterFileError, load_cluster_file
    from gpugov.k8s.devcluster.plane import StartError
    from gpugov.sim.progress import Steps

    console = Console(stderr=True)
    workdir = directory
    try:
        if nodes is not None:
            load_cluster_file(nodes)  # a bad --nodes: said before anything is created
        build.ensure_cache_root()  # a bad XDG_CACHE_HOME: one line naming it, exit 2
        workdir = directory or dev.default_dir()
        with Steps("dev up", "starting") as steps:  # in a pipe: a line per step, every 10 s
            plane = dev.up(workdir, nodes, say=steps.say, dra_pools=tuple(dra_pool))
    except (ClusterFileError, StartError, build.BuildError) as e:
        raise _fail(str(e)) from None
    except OSError as e:  # a folder it cannot create or write: name it, no traceback
        raise _fail(f"{e.filename or workdir}: {e.strerror or e}") from None
    console.print(f"gpugov dev cluster up in {plane.procs.extra.get('up_seconds')} s "
                  f"({plane.server}, nodes: {plane.procs.extra.get('nodes')}); stop it with: "
                  f"gpugov dev down --dir {plane.workdir}", soft_wrap=True)
    if plane.procs.extra.get("dra_nodes"):
        console.print(f"DRA (driver gpu.gpugov.io) serves: {plane.procs.extra['dra_nodes']}; "
                      "gates on: DRAConsumableCapacity, DRADeviceBindingConditions",
                      soft_wrap=True, highlight=False, markup=False)
    for line in dev.next_steps(plane.workdir):
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    typer.echo(f"export KUBECONFIG={plane.kubeconfig}")


@dev_app.command("kubectl", context_settings={"allow_extra_args": True,
                                               "ignore_unknown_options": True})
def dev_kubectl_cmd(
    ctx: typer.Context,
    directory: Path | None = typer.Option(None, "--dir", help="work dir given to `dev up`"),
) -> None:
    """Run the kubectl built for the dev cluster against it (`gpugov dev kubectl get pods -A`)."""
    import os

    from gpugov.k8s.devcluster import build, dev

    workdir = (directory or dev.default_dir()).resolve()
    kubectl = build.bin_dir() / "kubectl"
    if not kubectl.exists():
        try:
            build.ensure_cache_root()  # a bad XDG_CACHE_HOME is the real cause: say that
        except build.BuildError as e:
            raise _fail(str(e)) from None
        raise _fail(f"{kubectl}: not built; run `gpugov dev build`")
    if not dev.is_up(workdir):
        raise _fail(f"no dev cluster running in {workdir}; run `gpugov dev up`")
    os.execv(kubectl, [str(kubectl), f"--kubeconfig={workdir / 'kubeconfig'}", *ctx.args])


@dev_app.command("demo")
def dev_demo_cmd(
    directory: Path | None = typer.Option(None, "--dir", help="work dir given to `dev up`"),
    timeout: float = typer.Option(120.0, "--timeout", callback=_positive_seconds,
                                  help="seconds to wait for each step"),
) -> None:
    """Three teams on the dev cluster: borrowing, reclaim, a gang, preemption; then `top`
    and a summary of what the scheduler decided and why (read back from the API)."""
    from rich.console import Console

    from gpugov.k8s.devcluster import demo, dev

    workdir = (directory or dev.default_dir()).resolve()
    if not dev.is_up(workdir):
        raise _fail(f"no dev cluster running in {workdir}; run `gpugov dev up` first")
    console = Console()
    try:
        result = demo.run(workdir / "kubeconfig", timeout=timeout,
                          say=lambda m: console.print(m, markup=False, highlight=False))
    except demo.DemoError as e:
        raise _fail(str(e)) from None
    import asyncio

    from gpugov.observe import top

    console.print(top.render(asyncio.run(demo.top_snapshot(
        workdir / "kubeconfig", dev.prometheus_url(workdir))), width=console.width))
    for line in demo.summary(result):
        console.print(line, highlight=False, markup=False)


@dev_app.command("down")
def dev_down_cmd(
    directory: Path | None = typer.Option(None, "--dir", help="work dir given to `dev up`"),
) -> None:
    """Stop every process `gpugov dev up` started in that work dir."""
    from gpugov.k8s.devcluster import dev
    from gpugov.k8s.devcluster.processes import StateFileError
    from gpugov.sim.progress import Steps

    workdir = directory or dev.default_dir()
    try:  # a process slow to stop holds it for seconds: steps on stderr, in a pipe too
        with Steps("dev down", "reading the state") as steps:
            stopped = dev.down(workdir, say=steps.say)
    except StateFileError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"stopped: {', '.join(stopped)}" if stopped else
               f"stopped: nothing (no dev cluster in {workdir})")
