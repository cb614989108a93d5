"""The MPS control daemon of a node's GPUs in `mps` mode: started, configured and stopped by
the node agent, as NVIDIA's `mps-control-daemon` does it.

While some GPU of the inventory is in `mps` mode, one `nvidia-cuda-mps-control -d` runs with
`CUDA_VISIBLE_DEVICES` = those GPUs' UUIDs and its pipe, log and shm folders under `root`
(`<state dir>/mps`). After starting it, the agent sets the per-client defaults (what a client
gets when its own environment says nothing): `set_default_device_pinned_mem_limit <ordinal>
<card/clients>M` per GPU and `set_default_active_thread_percentage <100/clients>`. The device
plugin gives each client its own caps (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`,
`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`) and mounts the pipe and shm folders
(`deviceplugin.response`); it refuses MPS clients while no daemon answers.

A client can lower or raise its own limits by changing its environment before CUDA starts,
and every client shares the server's fault domain: MPS is isolation `none`, with memory and
SM limits for well-behaved clients. An agent restart adopts a running daemon (its clients keep
running); the daemon is stopped (`quit`) only when no GPU is in `mps` mode any more.

Compute mode: before starting the daemon, the agent sets each MPS GPU's compute mode to
EXCLUSIVE_PROCESS through NVML (`nvmlDeviceSetComputeMode`, as NVIDIA's `mps-control-daemon`
does with nvidia-smi), so only the MPS server opens a context there and no process bypasses
it; after stopping it, DEFAULT again. NVML refuses without root (NO_PERMISSION), on GPUs
without compute modes (NOT_SUPPORTED) and for a GPU in MIG mode; gpugov itself refuses to
switch a GPU on which processes already run (their contexts would keep running outside the
MPS server). Any refusal leaves the daemon stopped and is reported (a Warning Event), so the
device plugin refuses MPS clients rather than serving them unprotected.
"""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gpugov.k8s.annotations import Inventory
from gpugov.model.devices import DeviceMode

log = logging.getLogger(__name__)

CONTROL = "nvidia-cuda-mps-control"
#: nvmlComputeMode_t values
DEFAULT, EXCLUSIVE_PROCESS = 0, 3


class MpsError(RuntimeError):
    """The control daemon refused a command or could not be reached; the message says which."""


@dataclass(frozen=True, slots=True)
class MpsDevice:
    """One GPU the daemon serves: its UUID and the per-client defaults."""

    uuid: str
    pinned_mib: int  # card memory / clients
    thread_percent: int  # 100 / clients


def mps_devices(inventory: Inventory) -> tuple[MpsDevice, ...]:
    """The GPUs of `inventory` in `mps` mode, in index order."""
    out = []
    for d in sorted(inventory.devices, key=lambda d: d.index):
        if d.mode == DeviceMode.MPS and d.uuid:
            reps = max(d.replicas, 1)
            out.append(MpsDevice(d.uuid, d.memory_mib // reps, max(1, 100 // reps)))
    return tuple(out)


class ComputeModes(Protocol):
    """Sets a GPU's compute mode (NVML); raises MpsError with the refusal."""

    def set(self, uuid: str, mode: int) -> None: ...


class NvmlComputeModes:
    """Compute modes through NVML, in the session the agent already holds."""

    def set(self, uuid: str, mode: int) -> None:
        import pynvml

        name = {DEFAULT: "DEFAULT", EXCLUSIVE_PROCESS: "EXCLUSIVE_PROCESS"}.get(mode, str(mode))
        try:
            h = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            if mode == EXCLUSIVE_PROCESS:
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                if procs:
                    pids = ", ".join(str(p.pid) for p in procs[:8])
                    raise MpsError(f"GPU {uuid}: {len(procs)} process(es) running (PIDs {pids})"
                                   f"; compute mode not set to {name} (their contexts would "
                                   "bypass the MPS server); the daemon starts once they end")
            if pynvml.nvmlDeviceGetComputeMode(h) != mode:
                pynvml.nvmlDeviceSetComputeMode(h, mode)
        except pynvml.NVMLError as exc:
            why = {pynvml.NVML_ERROR_NO_PERMISSION: "no permission (the node agent must run as "
                   "root, as the chart's privileged node container does)",
                   pynvml.NVML_ERROR_NOT_SUPPORTED: "this GPU has no compute modes",
                   pynvml.NVML_ERROR_INVALID_ARGUMENT: "refused (a GPU in MIG mode takes no "
                   "compute mode; MPS serves whole GPUs)"}.get(exc.value, str(exc))
            raise MpsError(f"GPU {uuid}: setting compute mode {name}: {why}") from None


@dataclass
class MpsDaemon:
    """The node's one MPS control daemon (see the module doc). `modes`: how the GPUs'
    compute mode is set (None: not set, e.g. the tests of the daemon alone)."""

    root: Path
    control: str = CONTROL
    timeout_s: float = 10.0
    modes: ComputeModes | None = None
    #: the GPUs it was started (or adopted) for; None = not running as far as we know
    serving: tuple[MpsDevice, ...] | None = field(default=None)

    @property
    def pipe_dir(self) -> Path:
        return self.root / "pipe"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def shm_dir(self) -> Path:
        return self.root / "shm"

    def env(self, devices: tuple[MpsDevice, ...] = ()) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir),
               "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir)}
        if devices:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(d.uuid for d in devices)
        return env

    def command(self, text: str) -> str:
        """Send one command (`echo text | nvidia-cuda-mps-control`); its output."""
        try:
            done = subprocess.run([self.control], input=text + "\n", capture_output=True,
                                  text=True, env=self.env(), timeout=self.timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise MpsError(f"{self.control} {text!r}: {exc}") from None
        if done.returncode != 0:
            why = (done.stderr or done.stdout).strip()[:300]
            raise MpsError(f"{self.control} {text!r} failed ({done.returncode}): {why}")
        return done.stdout

    def alive(self) -> bool:
        """True when a daemon answers on our pipe folder (NVIDIA's health check)."""
        try:
            self.command("get_default_active_thread_percentage")
        except MpsError:
            return False
        return True

    def _set_modes(self, devices: tuple[MpsDevice, ...], mode: int) -> None:
        if self.modes is None:
            return
        done: list[MpsDevice] = []
        try:
            for d in devices:
                self.modes.set(d.uuid, mode)
                done.append(d)
        except MpsError:
            if mode == EXCLUSIVE_PROCESS:  # all or none: put back what was switched
                for d in done:
                    try:
                        self.modes.set(d.uuid, DEFAULT)
                    except MpsError as exc:
                        log.warning("%s", exc)
            raise

    def start(self, devices: tuple[MpsDevice, ...]) -> None:
        for d in (self.pipe_dir, self.log_dir, self.shm_dir):
            d.mkdir(parents=True, exist_ok=True)
        self._set_modes(devices, EXCLUSIVE_PROCESS)
        try:
            done = subprocess.run([self.control, "-d"], capture_output=True, text=True,
                                  env=self.env(devices), timeout=self.timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self._set_modes(devices, DEFAULT)
            raise MpsError(f"{self.control} -d: {exc}") from None
        if done.returncode != 0:
            self._set_modes(devices, DEFAULT)
            raise MpsError(f"{self.control} -d failed ({done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[:300]}")
        self.configure(devices)

    def configure(self, devices: tuple[MpsDevice, ...]) -> None:
        """The per-client defaults (ordinals follow the daemon's CUDA_VISIBLE_DEVICES)."""
        for i, d in enumerate(devices):
            self.command(f"set_default_device_pinned_mem_limit {i} {d.pinned_mib}M")
        if devices:
            self.command("set_default_active_thread_percentage "
                         f"{min(d.thread_percent for d in devices)}")
        self.serving = devices

    def stop(self) -> None:
        self.command("quit")
        if self.serving:
            self._set_modes(self.serving, DEFAULT)
        self.serving = None

    def reconcile(self, inventory: Inventory) -> str:
        """Bring the daemon in line with the inventory; what was done (for logs and tests):
        `started`, `adopted`, `restarted`, `stopped` or `unchanged`."""
        want = mps_devices(inventory)
        if not want:
            if self.serving is None and not self.alive():
                return "unchanged"
            self.stop()
            return "stopped"
        if self.serving == want and self.alive():
            return "unchanged"
        if self.alive():
            if self.serving is None or {d.uuid for d in self.serving} == {d.uuid for d in want}:
                self.configure(want)  # an agent restart, or new per-client shares
                return "adopted"
            log.warning("MPS GPUs changed (%s -> %s): restarting the control daemon",
                        [d.uuid for d in self.serving], [d.uuid for d in want])
            self.stop()
            self.start(want)
            return "restarted"
        self.start(want)
        return "started"
