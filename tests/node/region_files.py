"""Write enforcement-region files the way libgpugov.so lays them out (native/region_layout.h),
for pods the tests invent; and start real processes to stand in for their containers."""

from __future__ import annotations

import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from gpugov.node.region import _SCALARS, Field, layout


def _put(buf: bytearray, base: int, f: Field, values: list[int] | int) -> None:
    vals = values if isinstance(values, list) else [values]
    vals = vals + [0] * (f.count - len(vals))
    struct.pack_into("<" + _SCALARS[f.type] * f.count, buf, base + f.offset, *vals)


@dataclass
class SlotSpec:
    pid: int
    start_ticks: int
    used: list[int] = field(default_factory=list)  # bytes per container ordinal


def write_region(path: Path, mem_limit: list[int], core_limit: list[int],
                 slots: list[SlotSpec]) -> Path:
    lay = layout()
    reg, hdr, slot = lay.structs["gg_region"], lay.structs["gg_header"], lay.structs["gg_slot"]
    buf = bytearray(reg.size)
    h = hdr.fields
    _put(buf, 0, h["magic"], lay.constants["GG_REGION_MAGIC"])
    _put(buf, 0, h["version"], lay.constants["GG_REGION_VERSION"])
    _put(buf, 0, h["header_bytes"], hdr.size)
    _put(buf, 0, h["slot_bytes"], slot.size)
    _put(buf, 0, h["max_slots"], lay.constants["GG_MAX_SLOTS"])
    _put(buf, 0, h["max_devices"], lay.constants["GG_MAX_DEVICES"])
    _put(buf, 0, h["initialized"], 1)
    _put(buf, 0, h["mem_limit"], mem_limit)
    _put(buf, 0, h["core_limit"], core_limit)
    total = [0] * lay.constants["GG_MAX_DEVICES"]
    for s in slots:
        for k, b in enumerate(s.used):
            total[k] += b
    _put(buf, 0, h["used"], total)
    base0 = reg.fields["slots"].offset
    for i, s in enumerate(slots):
        base = base0 + i * slot.size
        _put(buf, base, slot.fields["state"], lay.constants["GG_SLOT_ACTIVE"])
        _put(buf, base, slot.fields["pid"], s.pid)
        _put(buf, base, slot.fields["start_ticks"], s.start_ticks)
        _put(buf, base, slot.fields["used"], s.used)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(buf))
    return path


def start_ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[19])


class Sleepers:
    """Real processes standing in for container processes; all stopped by `stop()`."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self) -> int:
        p = subprocess.Popen(["sleep", "600"], start_new_session=True)
        self.procs.append(p)
        return p.pid

    def dead_pid(self) -> int:
        """A PID that existed a moment ago and is gone now."""
        p = subprocess.Popen(["true"])
        p.wait()
        return p.pid

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()
        self.procs.clear()
