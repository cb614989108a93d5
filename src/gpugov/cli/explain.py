"""`gpugov explain`: why a job (replay) or a pod (live cluster) is pending."""

from __future__ import annotations

from pathlib import Path

import typer

from gpugov.cli._app import app
from gpugov.cli._common import _fail, _kubeconfig_file


@app.command("explain")
def explain_cmd(
    job: str = typer.Argument(..., metavar="JOB", help="job name, or `pod` followed by "
                              "NS/NAME"),
    pod: str | None = typer.Argument(None, metavar="NS/NAME", help="with `pod`: "
                                     "NAMESPACE/NAME"),
    run: Path | None = typer.Option(None, "--run",
                                    help="a replay output folder (has snapshot.json)"),
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="with `pod`: the cluster to ask"),
    scheduler_name: str = typer.Option("", "--scheduler-name",
                                       help="with `pod`: the scheduler's --scheduler-name"),
) -> None:
    """Why is JOB pending (from a replay's --run), or `explain pod NS/NAME --kubeconfig K`
    (live): reason, position in its queue, its queue's share."""
    import json

    from gpugov.control.explain import explain

    if job == "pod" and pod is not None:
        _explain_pod(pod, kubeconfig, scheduler_name)
        return
    if run is None:
        raise _fail("give --run DIR (a replay's output), or `explain pod NS/NAME --kubeconfig K`")
    if not (run / "snapshot.json").is_file():
        raise _fail(f"--run {run}: not a replay output folder (no snapshot.json; write one "
                    "with `gpugov replay --out DIR`)")
    try:
        snap = json.loads((run / "snapshot.json").read_text(encoding="utf-8"))
        lines = explain(snap, job)
    except (OSError, ValueError, RecursionError) as e:
        raise _fail(f"--run {run}: cannot read snapshot.json ({e})") from None
    except KeyError as e:
        raise _fail(str(e.args[0])) from None
    typer.echo("\n".join(lines))


def _explain_pod(target: str, kubeconfig: Path | None, scheduler_name: str = "") -> None:
    import asyncio

    from gpugov.k8s.scheduler.explain import ExplainError, explain_pod

    ns, _, name = target.partition("/")
    if not ns or not name:
        raise _fail(f"pod {target!r}: expected NAMESPACE/NAME")
    if kubeconfig is None:
        raise _fail("explain pod needs --kubeconfig")
    from gpugov.sim.progress import Steps

    extra = {"scheduler_name": scheduler_name} if scheduler_name else {}
    try:  # a large cluster: seconds of lists, shown on stderr
        with Steps("explain pod", "connecting") as steps:
            lines = asyncio.run(explain_pod(_kubeconfig_file(kubeconfig), ns, name,
                                            say=steps.say, **extra))
    except ExplainError as e:
        raise _fail(str(e)) from None
    except (OSError, TimeoutError) as e:  # aiohttp's connection errors are OSErrors
        raise _fail(f"--kubeconfig {kubeconfig}: the API server cannot be reached "
                    f"({e or type(e).__name__})") from None
    typer.echo("\n".join(lines))
