"""The tests' fake NVML: build it, describe a node, drive it.

The library is tests/fake_cuda/fake_nvml.c with the counters dcgm-exporter's default set reads
(tests/node/fake_nvml_counters.c, which includes it: GPM on Hopper+, field values, energy, PCIe,
remapped rows, each refused where the real NVML refuses it).
`FakeNode` writes the fake's config file (see the headers of both files for the grammar) and
appends to its events file, which the fake applies while the process under test runs: new
processes, XID errors, a GPU falling off the bus.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native"))
from native_build import WARN, compiler  # noqa: E402

A100_80 = ("0x20B210DE", 81920, "NVIDIA A100-SXM4-80GB")
H100_80 = ("0x233010DE", 81559, "NVIDIA H100 80GB HBM3")
A30 = ("0x20B710DE", 24576, "NVIDIA A30")
T4 = ("0x1EB810DE", 15360, "Tesla T4")
COUNTERS = Path(__file__).with_name("fake_nvml_counters.c")


@dataclass
class FakeLibs:
    """Folders holding a libnvidia-ml.so.1 each: a current driver and an older one."""

    current: Path
    legacy: Path


def build_fakes(out: Path) -> FakeLibs:
    """Compile only the fake NVML (native_build's compiler and warnings), as a current driver
    and as an older one (-DFAKE_NVML_LEGACY); the node tests need nothing else."""
    cc = compiler()
    assert cc, "no C compiler"
    dirs = FakeLibs(out / "current", out / "legacy")
    for d, defs in ((dirs.current, []), (dirs.legacy, ["-DFAKE_NVML_LEGACY"])):
        d.mkdir(parents=True, exist_ok=True)
        subprocess.run([cc, *WARN, "-O2", "-fPIC", "-shared", "-fvisibility=hidden", *defs,
                        "-o", str(d / "libnvidia-ml.so.1"), str(COUNTERS), "-ldl",
                        "-lpthread"], check=True, capture_output=True)
    return dirs


@dataclass
class FakeNode:
    """A node's GPUs for the fake NVML."""

    dir: Path
    lines: list[str] = field(default_factory=list)
    ndev: int = 0

    @property
    def config(self) -> Path:
        return self.dir / "nvml.conf"

    @property
    def events(self) -> Path:
        return self.dir / "nvml.events"

    def gpu(self, kind: tuple[str, int, str], *extra: str, uuid: str | None = None) -> int:
        pci, mib, name = kind
        i = self.ndev
        self.ndev += 1
        uuid = uuid or f"GPU-{i:08d}-1111-2222-3333-{i:012d}"
        self.lines.append(f"device {uuid} {pci} 00000000:{0x10 + i:02X}:00.0 {mib} {name}")
        self.lines.extend(f"{e.split()[0]} {i} {' '.join(e.split()[1:])}" for e in extra)
        return i

    def add(self, line: str) -> None:
        self.lines.append(line)

    def write(self) -> dict[str, str]:
        """Write the config; the environment that makes the fake read it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config.write_text("\n".join(["driver 550.107.02 12040", *self.lines]) + "\n")
        self.events.touch()
        return {"FAKE_NVML_CONFIG": str(self.config), "FAKE_NVML_EVENTS": str(self.events)}

    def event(self, line: str) -> None:
        """Apply a statement now (the fake reads appended lines on its next call)."""
        with self.events.open("a") as fh:
            fh.write(line + "\n")
