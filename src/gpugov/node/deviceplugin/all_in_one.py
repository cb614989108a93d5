"""`gpugov node run`: device plugin, node agent and exporter in one process per GPU node.

This is what the Helm chart's node DaemonSet runs (`--config` is the chart's node.yaml). The
three share one NVML session and one `NvmlDeviceSource`: the agent refreshes it every round
and publishes it as `gpugov.io/inventory`, the device plugin advertises exactly that inventory
to the kubelet, the exporter reads NVML at scrape time. Config problems raise
`NodeConfigError` naming the file, the field, the value and what is allowed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpugov.model.cluster_spec import MAX_REPLICAS
from gpugov.model.yaml_error import one_line
from gpugov.node.deviceplugin.run import (
    DEFAULT_STATE_DIR,
    NodeConfigError,
    listen_address,
    response_config,
)

log = logging.getLogger("gpugov.node")


class NodeFile(BaseModel):
    """The chart's node.yaml."""

    model_config = ConfigDict(extra="forbid")

    # how GPUs not in MIG mode are offered; GPUs in MIG mode are always served as MIG
    # ("mig" = leave non-MIG GPUs whole until the agent applies a MIG layout)
    defaultMode: Literal["exclusive", "soft", "timeslice", "mps", "mig"] = "exclusive"
    timesliceReplicas: int = Field(4, ge=2, le=MAX_REPLICAS)
    mpsReplicas: int = Field(4, ge=2, le=48)  # MPS clients per GPU (48: the per-GPU maximum)
    mpsControl: str = Field("nvidia-cuda-mps-control", min_length=1)  # the daemon's binary
    softSplit: int = Field(10, ge=1, le=MAX_REPLICAS)
    #: NVIDIA's MIG strategy: per-profile resources, or every instance as nvidia.com/gpu on a
    #: uniform node (`node/mig_strategy.py`); the NVIDIA config's flags.migStrategy also says
    migStrategy: Literal["mixed", "single"] = "mixed"
    #: the NVIDIA device plugin's own config (`version: v1`, `sharing.timeSlicing|mps`), as
    #: its ConfigMap holds it: sharing mode and replicas come from it (`node.nvidia_config`)
    nvidiaConfig: dict[str, Any] | None = None
    #: MIG GPUs take new instances in free slices when gpugov's scheduler asks (on-demand MIG,
    #: `node/mig_on_demand.py`); off: only the layout mig.config applies is served
    migOnDemand: bool = False

    def mig_replicas(self) -> tuple[tuple[str, int], ...]:
        """MIG profile -> replicas of its time-sliced instances (`nvidia.com/mig-<p>.shared`),
        from the NVIDIA config's time-slicing of `nvidia.com/mig-<p>`."""
        from gpugov.node.nvidia_config import parse

        return parse(self.nvidiaConfig, "nvidiaConfig").mig_replicas \
            if self.nvidiaConfig is not None else ()

    def mig_strategy(self) -> str:
        """`single` when node.yaml or the NVIDIA config's flags say so, else `mixed`."""
        from gpugov.node.nvidia_config import parse

        if self.migStrategy == "single" or self.nvidiaConfig is None:
            return self.migStrategy
        return parse(self.nvidiaConfig, "nvidiaConfig").mig_strategy

    def sharing(self) -> tuple[str, int, bool]:
        """(mode, replicas, whether replicas are served as nvidia.com/gpu too)."""
        from gpugov.node.nvidia_config import parse

        if self.nvidiaConfig is None:
            replicas = {"timeslice": self.timesliceReplicas, "mps": self.mpsReplicas}
            return self.defaultMode, replicas.get(self.defaultMode, 1), False
        nv = parse(self.nvidiaConfig, "nvidiaConfig")
        if nv.mode.value == "exclusive":
            return self.defaultMode, 1, False
        return nv.mode.value, nv.replicas, nv.serves_gpu_replicas
    devices: list[Any] = Field(default_factory=list, max_length=0)  # per-device: planned


def load_node_file(path: Path) -> NodeFile:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise NodeConfigError(f"--config: {path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise NodeConfigError(f"--config: {path}: not UTF-8 text (a YAML node file is "
                              "expected)") from None
    except (yaml.YAMLError, RecursionError) as exc:  # RecursionError: nested too deeply
        raise NodeConfigError(f"--config: {path}: not YAML ({one_line(exc)})") from None
    try:
        out = NodeFile.model_validate(data or {})
    except ValidationError as exc:
        problems = []
        for e in exc.errors():
            where = ".".join(str(p) for p in e["loc"]) or "(top level)"
            msg = e["msg"]
            if where == "devices":
                msg = "per-device modes are planned; leave devices empty"
            elif where == "migStrategy":
                msg = "allowed: mixed, single"
            problems.append(f"{where}: {e.get('input')!r}: {msg}")
        raise NodeConfigError(f"--config: {path}: " + "; ".join(problems)) from None
    from gpugov.node.nvidia_config import NvidiaConfigError

    try:
        mode, _, _ = out.sharing()
    except NvidiaConfigError as exc:
        raise NodeConfigError(f"--config: {path}: {exc}") from None
    if out.nvidiaConfig is not None and mode != out.defaultMode and \
            out.defaultMode not in ("exclusive", "mig"):
        raise NodeConfigError(f"--config: {path}: defaultMode: {out.defaultMode!r} contradicts "
                              f"nvidiaConfig ({mode}); set only one of them")
    return out


@dataclass(frozen=True)
class RunOptions:
    node_name: str
    config: NodeFile
    listen: str = "0.0.0.0:9400"
    state_dir: Path = DEFAULT_STATE_DIR
    plugin_dir: Path = Path("/var/lib/kubelet/device-plugins")
    kubeconfig: Path | None = None
    nvml_library: Path | None = None
    mig_config: Path | None = None
    interval_s: float = 10.0


async def serve_all(opts: RunOptions) -> None:
    """Run the three components until cancelled (SIGTERM cancels cleanly)."""
    from kubernetes_asyncio import client, config

    from gpugov.model.devices import DeviceMode
    from gpugov.node.agent import AgentConfig, NodeAgent
    from gpugov.node.deviceplugin.manager import DevicePluginManager
    from gpugov.node.deviceplugin.pods import ApiPodSource
    from gpugov.node.exporter import ExporterConfig, NodeCollector, serve
    from gpugov.node.mps import MpsDaemon, NvmlComputeModes
    from gpugov.node.nvml.health import HealthTracker
    from gpugov.node.nvml.library import Nvml
    from gpugov.node.nvml.source import NvmlDeviceSource, SharingPolicy

    cfg = opts.config
    mode_name, replicas, gpu_replicas = cfg.sharing()
    mode = DeviceMode.EXCLUSIVE if mode_name == "mig" else DeviceMode(mode_name)
    host, port = listen_address(opts.listen, "--listen")
    regions = opts.state_dir / "regions"
    regions.mkdir(parents=True, exist_ok=True)
    nv = Nvml(str(opts.nvml_library) if opts.nvml_library else None)
    try:
        source = NvmlDeviceSource(nv, HealthTracker(nv), SharingPolicy(
            mode, replicas, cfg.mig_replicas(), mig_on_demand=cfg.migOnDemand,
            mig_strategy=cfg.mig_strategy()))
        api_cfg = client.Configuration()
        if opts.kubeconfig is not None:
            await config.load_kube_config(config_file=str(opts.kubeconfig),
                                          client_configuration=api_cfg)
        else:
            config.load_incluster_config(client_configuration=api_cfg)
        async with client.ApiClient(api_cfg) as api:
            agent = NodeAgent(api, source, AgentConfig(
                opts.node_name, opts.mig_config, regions, opts.interval_s,
                mps=MpsDaemon(opts.state_dir / "mps", control=cfg.mpsControl,
                              modes=NvmlComputeModes()),
                shared_product=gpu_replicas))
            plugin = DevicePluginManager(
                opts.node_name, source, ApiPodSource(api), opts.plugin_dir,
                response_config(opts.state_dir, source),
                soft_replicas=cfg.softSplit, gpu_replicas=gpu_replicas,
                mig_single=cfg.mig_strategy() == "single")
            await plugin.start()
            me = asyncio.current_task()
            assert me is not None
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, me.cancel)
            tasks = [asyncio.create_task(agent.run()),
                     asyncio.create_task(serve(host, port, NodeCollector(
                         nv, ExporterConfig(regions=regions))))]
            try:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
                for t in done:
                    t.result()  # a component that died takes the process down, loudly
            finally:
                for t in tasks:
                    t.cancel()
                for t in tasks:
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await t
                await plugin.stop()
    finally:
        nv.close()


def run(opts: RunOptions) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        asyncio.run(serve_all(opts))
