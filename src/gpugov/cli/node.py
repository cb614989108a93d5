"""`gpugov node …`: the node-side components (device plugin, agent, exporter, all in one)."""

from __future__ import annotations

from pathlib import Path

import typer

from gpugov.cli._app import app
from gpugov.cli._common import (
    _fail,
    _kubeconfig_file,
    _listen,
    _nonnegative_seconds,
    _positive_seconds,
)

node_app = typer.Typer(help="Node-side components: device plugin, node agent, exporter.",
                       no_args_is_help=True)
app.add_typer(node_app, name="node")


@node_app.command("exporter")
def node_exporter_cmd(
    listen: str = typer.Option("0.0.0.0:9400", "--listen", help="HOST:PORT to serve /metrics"),
    regions: Path | None = typer.Option(None, "--regions", help="the device plugin's regions "
                                        "folder (<state>/regions); omit: no per-pod metrics"),
    hostname: str = typer.Option("", "--hostname", help="Hostname label (default: $NODE_NAME, "
                                 "else this host)"),
    recovery_s: float = typer.Option(300.0, "--recovery-seconds", callback=_nonnegative_seconds,
                                     help="a GPU is healthy again this long after its last XID"),
    nvml_library: Path | None = typer.Option(None, "--nvml-library", help="libnvidia-ml.so.1 "
                                             "to load (default: the loader path)"),
    simulate: bool = typer.Option(False, "--simulate", help="dev clusters only: serve "
                                  "SIMULATED series for the kwok nodes, from their pods' "
                                  "allocations (no NVML; every series labelled simulated)"),
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig", help="with --simulate: the "
                                           "cluster to read (default: in-cluster)"),
) -> None:
    """GPU, pod and bypass/zombie metrics from NVML and the pod regions, read at scrape time."""
    import logging

    from gpugov.node.exporter import ExporterConfig, parse_listen, run
    from gpugov.node.nvml.library import NvmlUnavailable

    try:
        host, port = parse_listen(listen)
    except ValueError as e:
        raise _fail(str(e)) from None
    if kubeconfig is not None and not simulate:
        raise _fail("--kubeconfig is read only with --simulate (the exporter reads NVML)")
    if simulate:
        import asyncio
        import contextlib

        from gpugov.node.synthetic import serve

        if regions is not None or nvml_library is not None:
            raise _fail("--simulate reads no NVML and no regions; drop --regions and "
                        "--nvml-library")
        _kubeconfig_file(kubeconfig)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(host, port, kubeconfig))
        return
    if regions is not None and not regions.is_dir():
        raise _fail(f"--regions {regions}: not a folder")
    if recovery_s < 0:
        raise _fail(f"--recovery-seconds {recovery_s}: must be >= 0")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        run(listen, ExporterConfig(hostname, regions, recovery_s),
            str(nvml_library) if nvml_library else None)
    except NvmlUnavailable as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None


@node_app.command("device-plugin")
def node_device_plugin_cmd(
    devices: Path | None = typer.Option(None, "--devices", help="inventory JSON of this node "
                                        "(the gpugov.io/inventory format); default: NVML"),
    node_name: str | None = typer.Option(None, "--node-name",
                                         help="Kubernetes node name (default: $NODE_NAME)"),
    plugin_dir: Path = typer.Option(Path("/var/lib/kubelet/device-plugins"), "--plugin-dir",
                                    help="the kubelet's device plugin folder"),
    state_dir: Path = typer.Option(Path("/var/lib/gpugov"), "--state-dir",
                                   help="host folder for pod regions and ld.so.preload"),
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="default: the in-cluster service account"),
    device_specs: bool = typer.Option(True, "--device-specs/--no-device-specs",
                                      help="pass /dev/nvidia* nodes in Allocate"),
    cdi: bool = typer.Option(False, "--cdi", help="also name CDI devices (nvidia.com/gpu=UUID)"),
    mode: str = typer.Option("exclusive", "--mode", help="NVML: how non-MIG GPUs are offered "
                             "(exclusive, soft, timeslice; as `gpugov node agent --mode`)"),
    replicas: int = typer.Option(1, "--replicas", min=1, max=1024,
                                 help="NVML: replicas per GPU (timeslice)"),
    soft_replicas: int = typer.Option(10, "--soft-replicas", max=1024,
                                      help="soft-slice pods the kubelet admits per GPU"),
    refresh_s: float = typer.Option(5.0, "--refresh-seconds", callback=_positive_seconds,
                                    help="NVML: seconds between discovery/health rounds"),
    nvml_library: Path | None = typer.Option(None, "--nvml-library", help="libnvidia-ml.so.1 "
                                             "to load (default: the loader path)"),
    metrics_listen: str | None = typer.Option(None, "--metrics-listen", help="HOST:PORT to "
                                              "serve /metrics (allocation counters)"),
) -> None:
    """Serve the kubelet device plugins (whole GPUs, MIG, soft and time-sliced replicas)."""
    from gpugov.node.deviceplugin.run import NodeConfigError, NodeOptions, check, run
    from gpugov.node.nvml.library import NvmlUnavailable

    _kubeconfig_file(kubeconfig)
    opts = NodeOptions(node_name, devices, plugin_dir, state_dir, kubeconfig, device_specs, cdi,
                       nvml_library, mode, replicas, soft_replicas, refresh_s, metrics_listen)
    try:
        node, source = check(opts)
    except NodeConfigError as e:
        raise _fail(str(e)) from None
    except NvmlUnavailable as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    run(opts, node, source)


@node_app.command("run")
def node_run_cmd(
    config: Path = typer.Option(..., "--config", help="node.yaml: defaultMode, "
                                "timesliceReplicas, softSplit, migStrategy, devices"),
    node_name: str = typer.Option(..., "--node-name", envvar="NODE_NAME",
                                  help="this node's name (env NODE_NAME)"),
    listen: str = typer.Option("0.0.0.0:9400", "--listen", help="HOST:PORT of the exporter"),
    state_dir: Path = typer.Option(Path("/var/lib/gpugov"), "--state-dir",
                                   help="host folder for pod regions and the library"),
    plugin_dir: Path = typer.Option(Path("/var/lib/kubelet/device-plugins"), "--plugin-dir",
                                    help="the kubelet's device plugin folder"),
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="default: the in-cluster service account"),
    mig_config: Path | None = typer.Option(None, "--mig-config", help="mig-parted config file "
                                           "for the agent (`gpugov plan mig --out`)"),
    interval: float = typer.Option(10.0, "--interval", callback=_positive_seconds,
                                   help="seconds between agent rounds"),
    nvml_library: Path | None = typer.Option(None, "--nvml-library", help="libnvidia-ml.so.1 "
                                             "to load (default: the loader path)"),
) -> None:
    """Device plugin, node agent and exporter in one process (the chart's node DaemonSet)."""
    from gpugov.node.deviceplugin.all_in_one import RunOptions, load_node_file, run
    from gpugov.node.deviceplugin.run import NodeConfigError, listen_address
    from gpugov.node.mig_config import MigConfigError, load
    from gpugov.node.nvml.library import NvmlUnavailable

    try:
        cfg = load_node_file(config)
        listen_address(listen, "--listen")
    except NodeConfigError as e:
        raise _fail(str(e)) from None
    if mig_config is not None:  # read now, not when the agent first needs it
        try:
            load(mig_config)
        except MigConfigError as e:
            raise _fail(f"--mig-config {e}") from None
    _kubeconfig_file(kubeconfig)
    if interval <= 0:
        raise _fail(f"--interval {interval}: must be > 0")
    try:
        run(RunOptions(node_name, cfg, listen, state_dir, plugin_dir, kubeconfig, nvml_library,
                       mig_config, interval))
    except NvmlUnavailable as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None


@node_app.command("agent")
def node_agent_cmd(
    node_name: str = typer.Option(..., "--node-name", envvar="NODE_NAME",
                                  help="this node's name (env NODE_NAME)"),
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="kubeconfig file (default: in-cluster)"),
    mig_config: Path | None = typer.Option(None, "--mig-config", help="mig-parted config file "
                                           "(`gpugov plan mig --out`); the node label "
                                           "nvidia.com/mig.config picks the config"),
    regions: Path | None = typer.Option(None, "--regions", help="the device plugin's regions "
                                        "folder, for bypass/zombie events"),
    mode: str = typer.Option("exclusive", "--mode", help="how non-MIG GPUs are offered: "
                             "exclusive, soft, timeslice or mps"),
    replicas: int = typer.Option(1, "--replicas", min=1, max=1024,
                                 help="replicas per GPU (timeslice / mps)"),
    interval: float = typer.Option(10.0, "--interval", callback=_positive_seconds,
                                   help="seconds between rounds"),
    drain_grace: float = typer.Option(30.0, "--drain-grace", callback=_nonnegative_seconds,
                                      help="seconds between marking GPUs "
                                      "unschedulable and changing their MIG layout"),
    recovery_s: float = typer.Option(300.0, "--recovery-seconds", callback=_nonnegative_seconds,
                                     help="a GPU is healthy again this long after its last XID"),
    nvml_library: Path | None = typer.Option(None, "--nvml-library", help="libnvidia-ml.so.1 "
                                             "to load (default: the loader path)"),
    listen: str = typer.Option("0.0.0.0:9403", "--listen", help="HOST:PORT for the agent's "
                               "/metrics (gpugov_node_agent_errors_total); '' = off"),
    state_dir: Path = typer.Option(Path("/var/lib/gpugov"), "--state-dir",
                                   help="the node's state folder (the MPS daemon's pipe, log "
                                   "and shm folders go under <state>/mps)"),
    mps_control: str = typer.Option("nvidia-cuda-mps-control", "--mps-control",
                                    help="the MPS control binary (with --mode mps)"),
    nvidia_config: Path | None = typer.Option(None, "--nvidia-config", help="the NVIDIA "
                                              "device plugin's config file (version: v1); its "
                                              "sharing sets --mode/--replicas"),
) -> None:
    """Publish GFD labels and the gpugov.io/inventory annotation, apply MIG layouts to idle
    GPUs, run the MPS control daemon for GPUs in mps mode, report health and bypass/zombie
    memory as Events."""
    import asyncio
    import contextlib
    import logging

    from gpugov.model.devices import DeviceMode
    from gpugov.node.agent import AgentConfig, run_agent
    from gpugov.node.mig_config import MigConfigError, load
    from gpugov.node.nvml.library import NvmlUnavailable
    from gpugov.node.nvml.source import SharingPolicy

    shared_product = False
    if nvidia_config is not None:
        from gpugov.node.nvidia_config import NvidiaConfigError
        from gpugov.node.nvidia_config import load as load_nvidia

        if mode != "exclusive" or replicas != 1:
            raise _fail("--nvidia-config sets the mode and replicas; drop --mode/--replicas")
        try:
            nv = load_nvidia(nvidia_config)
        except NvidiaConfigError as e:
            raise _fail(f"--nvidia-config {e}") from None
        mode, replicas, shared_product = nv.mode.value, nv.replicas, nv.serves_gpu_replicas
    try:
        sharing_mode = DeviceMode(mode)
    except ValueError:
        raise _fail(f"--mode {mode!r}; allowed: exclusive, soft, timeslice, mps") from None
    if sharing_mode == DeviceMode.MIG:
        raise _fail("--mode mig: MIG GPUs are found by discovery; allowed: exclusive, soft, "
                    "timeslice, mps")
    if replicas < 1 or (replicas > 1 and sharing_mode not in (DeviceMode.TIMESLICE,
                                                              DeviceMode.MPS)):
        raise _fail(f"--replicas {replicas}: must be 1, or >= 2 with --mode timeslice/mps")
    _kubeconfig_file(kubeconfig)
    if regions is not None and not regions.is_dir():
        raise _fail(f"--regions {regions}: not a folder")
    metrics = _listen(listen) if listen else None
    if mig_config is not None:
        try:
            load(mig_config)
        except MigConfigError as e:
            raise _fail(f"--mig-config {e}") from None
    for name, value in (("--interval", interval), ("--drain-grace", drain_grace),
                        ("--recovery-seconds", recovery_s)):
        if value < 0:
            raise _fail(f"{name} {value}: must be >= 0")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cfg = AgentConfig(node_name, mig_config, regions, interval, drain_grace,
                      shared_product=shared_product)
    if sharing_mode is DeviceMode.MPS:  # the control daemon, as `gpugov node run` runs it
        from gpugov.node.mps import MpsDaemon, NvmlComputeModes

        cfg.mps = MpsDaemon(state_dir / "mps", control=mps_control, modes=NvmlComputeModes())
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(run_agent(cfg, str(nvml_library) if nvml_library else None, kubeconfig,
                                  SharingPolicy(sharing_mode, replicas), recovery_s, metrics))
    except NvmlUnavailable as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None


@node_app.command("dra-plugin")
def node_dra_plugin_cmd(
    node_name: str | None = typer.Option(None, "--node-name",
                                         help="Kubernetes node name (default: $NODE_NAME)"),
    devices: Path | None = typer.Option(None, "--devices", help="inventory JSON of this node "
                                        "(the gpugov.io/inventory format); default: the "
                                        "node's gpugov.io/inventory annotation"),
    plugins_dir: Path = typer.Option(Path("/var/lib/kubelet/plugins"), "--plugins-dir",
                                     help="the kubelet's plugin folder (the socket goes in "
                                     "<it>/gpu.gpugov.io/dra.sock)"),
    registry_dir: Path = typer.Option(Path("/var/lib/kubelet/plugins_registry"),
                                      "--registry-dir", help="the kubelet's plugin watcher "
                                      "folder"),
    cdi_dir: Path = typer.Option(Path("/var/run/cdi"), "--cdi-dir",
                                 help="where the container runtime reads CDI specs"),
    state_dir: Path = typer.Option(Path("/var/lib/gpugov"), "--state-dir",
                                   help="host folder for claim regions, ld.so.preload and "
                                   "the plugin's prepared claims"),
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig",
                                           help="default: the in-cluster service account"),
    publish: bool = typer.Option(True, "--publish/--no-publish",
                                 help="publish this node's ResourceSlices (driver "
                                 "gpu.gpugov.io) from the inventory"),
    interval: float = typer.Option(5.0, "--interval", callback=_positive_seconds,
                                   help="seconds between slice checks"),
    sweep_interval: float = typer.Option(60.0, "--sweep-interval",
                                         callback=_positive_seconds,
                                         help="seconds between sweeps of the files of "
                                         "prepared claims gone from the API (the first "
                                         "at start)"),
    govern: bool = typer.Option(False, "--govern", help="devices carry gpugov's binding "
                                "conditions: kube-scheduler binds a claim only once `gpugov "
                                "dra governor` admits it (needs DRADeviceBindingConditions)"),
) -> None:
    """Serve the DRA kubelet plugin of driver gpu.gpugov.io and publish the node's slices."""
    import asyncio
    import logging
    import os

    from gpugov.k8s.annotations import AnnotationError
    from gpugov.node.deviceplugin.run import install_library
    from gpugov.node.dra.run import DraOptions, serve
    from gpugov.node.dra.source import static_inventory

    _kubeconfig_file(kubeconfig)
    node = node_name or os.environ.get("NODE_NAME", "")
    if not node:
        raise _fail("--node-name: missing (and $NODE_NAME is not set)")
    fixed = None
    if devices is not None:
        try:
            fixed = static_inventory(devices)
        except UnicodeDecodeError:
            raise _fail(f"--devices {devices}: not UTF-8 text") from None
        except (OSError, AnnotationError) as e:
            raise _fail(f"--devices {devices}: {e}") from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    async def main() -> None:
        from gpugov.k8s.dra.publisher import SlicePublisher, probe_features
        from gpugov.k8s.scheduler.kube import Kube

        if kubeconfig is not None:
            kube = await Kube.from_kubeconfig(kubeconfig)
        else:
            from kubernetes_asyncio import client, config

            config.load_incluster_config()
            kube = Kube(client.ApiClient())
        try:
            features = await probe_features(kube, govern, node)
            opts = DraOptions(node, devices, plugins_dir, registry_dir, cdi_dir, state_dir,
                              kubeconfig, features.consumable_capacity, sweep_interval)

            async def publisher(_api: object, stop: asyncio.Event) -> None:
                if publish:
                    await SlicePublisher(kube, features).run_node(
                        node, stop, interval, (lambda: fixed) if fixed is not None else None)

            await serve(opts, install_library(state_dir), publisher)
        finally:
            await kube.close()

    asyncio.run(main())
