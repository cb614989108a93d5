"""Reader of the shared accounting region written by libgpugov.so.

The binary layout is defined once, in native/region_layout.h; this module parses
that header (a restricted grammar: #define constants and structs of fixed-width
fields) instead of restating offsets, so C and Python cannot drift apart. Reads
need no lock: each slot carries a seqlock and torn reads are retried.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from gpugov.node.native import layout_header_path

_SCALARS = {"uint8_t": "B", "uint32_t": "I", "uint64_t": "Q", "int32_t": "i", "int64_t": "q"}
_DEFINE = re.compile(r"^#define\s+(\w+)\s+(0x[0-9a-fA-F]+|\d+)\b", re.M)
_STRUCT = re.compile(r"struct\s+(\w+)\s*\{(.*?)\};", re.S)
_FIELD = re.compile(r"^\s*(struct\s+\w+|\w+)\s+(\w+)(?:\[(\w+)\])?\s*;", re.M)


class RegionError(ValueError):
    """The file is not a region this reader understands."""


@dataclass(frozen=True)
class Field:
    """One member of a struct: byte offset, element type and element count."""

    name: str
    type: str
    offset: int
    count: int
    size: int  # bytes of one element


@dataclass(frozen=True)
class Struct:
    name: str
    size: int
    align: int
    fields: dict[str, Field]


@dataclass(frozen=True)
class Layout:
    """Constants and structs parsed from region_layout.h."""

    constants: dict[str, int]
    structs: dict[str, Struct]


def parse_layout(text: str) -> Layout:
    """Parse the header text; offsets follow C natural alignment (the header forbids padding)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    constants = {name: int(value, 0) for name, value in _DEFINE.findall(text)}
    structs: dict[str, Struct] = {}
    for sname, body in _STRUCT.findall(text):
        offset, align, fields = 0, 1, {}
        for ftype, fname, dim in _FIELD.findall(body):
            ftype = " ".join(ftype.split())
            if ftype.startswith("struct "):
                inner = structs[ftype.split()[1]]
                esize, ealign = inner.size, inner.align
            elif ftype in _SCALARS:
                esize = ealign = struct.calcsize(_SCALARS[ftype])
            else:
                raise RegionError(f"{sname}.{fname}: unsupported type {ftype!r}")
            count = (int(dim) if dim.isdigit() else constants[dim]) if dim else 1
            offset = -(-offset // ealign) * ealign
            fields[fname] = Field(fname, ftype, offset, count, esize)
            offset += esize * count
            align = max(align, ealign)
        structs[sname] = Struct(sname, -(-offset // align) * align, align, fields)
    return Layout(constants, structs)


@cache
def layout() -> Layout:
    """The layout of the installed library's region."""
    return parse_layout(Path(layout_header_path()).read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Slot:
    """One registered process: its pids and device bytes charged to it."""

    index: int
    pid: int
    host_pid: int
    used: tuple[int, ...]
    launches: tuple[int, ...]


@dataclass(frozen=True)
class RegionSnapshot:
    """A consistent-per-slot view of one container's region."""

    version: int
    mem_limit: tuple[int, ...]
    core_limit: tuple[int, ...]
    used: tuple[int, ...]
    recoveries: int
    reaped: int
    slots: tuple[Slot, ...]
    # monotonic per-device counters (layout v3): device time charged by the compute throttle,
    # time launches waited for tokens (both ns), allocations refused at the memory cap
    device_ns: tuple[int, ...] = ()
    throttled_ns: tuple[int, ...] = ()
    refused: tuple[int, ...] = ()


def _get(buf: bytes, base: int, f: Field) -> tuple[int, ...]:
    fmt = "<" + _SCALARS[f.type] * f.count
    return struct.unpack_from(fmt, buf, base + f.offset)


def _read_slot(path: Path, lay: Layout, index: int, base: int, retries: int = 100) -> Slot | None:
    """Read one slot under its seqlock: retry while a writer is active or raced us."""
    s = lay.structs["gg_slot"]
    with path.open("rb") as fh:
        for _ in range(retries):
            fh.seek(base)
            raw = fh.read(s.size)
            (seq_before,) = _get(raw, 0, s.fields["seq"])
            fh.seek(base)
            again = fh.read(s.size)
            (seq_after,) = _get(again, 0, s.fields["seq"])
            if seq_before % 2 == 0 and seq_before == seq_after and raw == again:
                break
        else:
            raise RegionError(f"slot {index} of {path} kept changing; writer stuck?")
    if _get(raw, 0, s.fields["state"])[0] != lay.constants["GG_SLOT_ACTIVE"]:
        return None
    return Slot(index, _get(raw, 0, s.fields["pid"])[0], _get(raw, 0, s.fields["host_pid"])[0],
                _get(raw, 0, s.fields["used"]), _get(raw, 0, s.fields["launches"]))


def read_region(path: str | Path) -> RegionSnapshot:
    """Parse a region file; raises RegionError for foreign, truncated or other-version files."""
    path = Path(path)
    lay = layout()
    region, header = lay.structs["gg_region"], lay.structs["gg_header"]
    data = path.read_bytes()
    if len(data) != region.size:
        raise RegionError(f"{path}: {len(data)} bytes, layout v{lay.constants['GG_REGION_VERSION']}"
                          f" needs {region.size}")
    h = {name: _get(data, 0, f) for name, f in header.fields.items() if f.type != "uint8_t"}
    if h["magic"][0] != lay.constants["GG_REGION_MAGIC"]:
        raise RegionError(f"{path}: not a gpugov region (bad magic)")
    if h["version"][0] != lay.constants["GG_REGION_VERSION"]:
        raise RegionError(f"{path}: layout v{h['version'][0]}, this reader speaks "
                          f"v{lay.constants['GG_REGION_VERSION']}")
    slots_field = region.fields["slots"]
    slot_size = lay.structs["gg_slot"].size
    slots = []
    for i in range(slots_field.count):
        base = slots_field.offset + i * slot_size
        state = _get(data, base, lay.structs["gg_slot"].fields["state"])[0]
        if state == lay.constants["GG_SLOT_FREE"]:
            continue
        slot = _read_slot(path, lay, i, base)
        if slot is not None:
            slots.append(slot)
    return RegionSnapshot(h["version"][0], h["mem_limit"], h["core_limit"], h["used"],
                          h["recoveries"][0], h["reaped"][0], tuple(slots),
                          h["device_ns"], h["throttled_ns"], h["refused"])


def read_start_ticks(path: str | Path) -> dict[int, int]:
    """Slot index -> the process start time the library recorded (/proc/<pid>/stat field 22),
    for active slots. With the container PID it identifies the process on the host."""
    lay = layout()
    data = Path(path).read_bytes()
    region = lay.structs["gg_region"]
    if len(data) != region.size:
        raise RegionError(f"{path}: {len(data)} bytes, layout needs {region.size}")
    s = lay.structs["gg_slot"]
    state_at, start_at = s.fields["state"].offset, s.fields["start_ticks"].offset
    active = lay.constants["GG_SLOT_ACTIVE"]
    u32, u64 = struct.Struct("<I"), struct.Struct("<Q")
    out: dict[int, int] = {}
    base0 = region.fields["slots"].offset
    for i in range(region.fields["slots"].count):
        base = base0 + i * s.size
        if u32.unpack_from(data, base + state_at)[0] == active:
            out[i] = u64.unpack_from(data, base + start_at)[0]
    return out
