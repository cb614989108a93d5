"""`gpugov dra …`: Dynamic Resource Allocation (driver gpu.gpugov.io, docs/dra.md) — the
cluster-side parts; the node's kubelet plugin is `gpugov node dra-plugin`."""

from __future__ import annotations

from pathlib import Path

import typer

from gpugov.cli._app import app
from gpugov.cli._common import _kubeconfig_file, _positive_seconds

dra_app = typer.Typer(help="DRA driver gpu.gpugov.io: slices, device classes, governance.",
                      no_args_is_help=True)
app.add_typer(dra_app, name="dra")


async def _kube(kubeconfig: Path | None):  # noqa: ANN202 - Kube, imported lazily
    from gpugov.k8s.scheduler.kube import Kube

    if kubeconfig is not None:
        return await Kube.from_kubeconfig(kubeconfig)
    from kubernetes_asyncio import client, config

    config.load_incluster_config()
    return Kube(client.ApiClient())


def _serve(kubeconfig: Path | None, body) -> None:  # noqa: ANN001
    """Run `body(kube, stop)` until SIGTERM/SIGINT; an API refusal is one line, exit 1."""
    import asyncio
    import logging
    import signal

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    async def main() -> None:
        kube = await _kube(kubeconfig)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await body(kube, stop)
        finally:
            await kube.close()

    try:
        asyncio.run(main())
    except RuntimeError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None


@dra_app.command("publish")
def dra_publish_cmd(
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="default: the in-cluster service account"),
    govern: bool = typer.Option(False, "--govern", help="devices carry gpugov's binding "
                                "conditions: kube-scheduler binds a claim only once `gpugov "
                                "dra governor` admits it (needs DRADeviceBindingConditions)"),
) -> None:
    """Publish every gpugov.io/dra=true node's ResourceSlices and the DeviceClasses."""
    _kubeconfig_file(kubeconfig)

    async def body(kube, stop) -> None:  # noqa: ANN001
        from gpugov.k8s.dra.publisher import SlicePublisher, probe_features

        await SlicePublisher(kube, await probe_features(kube, govern)).run(stop)

    _serve(kubeconfig, body)


@dra_app.command("governor")
def dra_governor_cmd(
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="default: the in-cluster service account"),
    interval: float = typer.Option(1.0, "--interval", callback=_positive_seconds,
                                   help="seconds between rounds"),
    reclaim: bool = typer.Option(True, "--reclaim/--no-reclaim", help="evict lower-priority "
                                 "DRA pods of queues over their guarantee for pending ones "
                                 "of queues under it"),
) -> None:
    """Admit or refuse each claim kube-scheduler allocated on gpugov devices, by queue."""
    _kubeconfig_file(kubeconfig)

    async def body(kube, stop) -> None:  # noqa: ANN001
        from gpugov.k8s.dra.governor import Governor

        await Governor(kube, interval, reclaim).run(stop)

    _serve(kubeconfig, body)


@dra_app.command("classes")
def dra_classes_cmd(
    consumable_capacity: bool = typer.Option(False, "--consumable-capacity",
                                             help="include gpu-slice.gpugov.io (the API "
                                             "server has DRAConsumableCapacity)"),
) -> None:
    """Print gpugov's DeviceClasses as YAML (for `kubectl apply -f -`)."""
    import yaml

    from gpugov.k8s.dra.slices import Features, device_classes

    typer.echo(yaml.safe_dump_all(device_classes(Features(consumable_capacity)),
                                  sort_keys=False), nl=False)
