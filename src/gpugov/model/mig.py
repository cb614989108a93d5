"""MIG geometry: which profiles a GPU model offers and where each may be placed.

A MIG GPU is cut along its *memory-slice axis* (8 slices; the A30 has 4). A GPU instance of a
profile takes a contiguous run of memory slices starting at one of the profile's allowed start
indices, and some compute slices (7; A30: 4). A set of instances is valid exactly when every
instance sits at an allowed start, no two overlap, and the compute slices add up to at most the
GPU's total (NVIDIA MIG User Guide; `nvidia-smi mig -lgipp`). Tables below are from
../shared/notes/data-plane-facts.md §1.2/§1.3 (lgip/lgipp captures). H200 values are *inferred*
from H100 and marked unconfirmed; at run time the node agent must read them from NVML
(`nvmlDeviceGetGpuInstanceProfileInfo`, `...PossiblePlacements`) and these tables are defaults.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile as nvidia-smi names it (e.g. `3g.40gb`)."""

    name: str
    profile_id: int  # the ID nvidia-smi -cgi and placements use (not the NVML index constant)
    memory_slices: int  # = placement size on the memory-slice axis
    compute_slices: int
    memory_gib: float  # what nvidia-smi reports (~, changes slightly between drivers)
    sms: int
    starts: tuple[int, ...]  # allowed placement start indices
    max_count: int  # most instances of this profile on one GPU
    media_extensions: bool = False  # the `+me` variant: at most one per GPU
    confirmed: bool = True  # False: inferred, not read from a real -lgip/-lgipp capture
    # another flavour of a base profile on the same slices (`+gfx`, `-me` on RTX PRO
    # Blackwell): valid in layouts, left out of the planner's candidate profiles
    variant: bool = False

    @property
    def memory_mib(self) -> int:
        return int(self.memory_gib * 1024)


@dataclass(frozen=True, slots=True)
class MigGeometry:
    """All MIG profiles of one GPU model."""

    model: str
    memory_slices: int
    compute_slices: int
    profiles: tuple[MigProfile, ...]
    note: str = ""

    def profile(self, name: str) -> MigProfile:
        """Look a profile up by its nvidia-smi name; KeyError names the valid ones."""
        for p in self.profiles:
            if p.name == name:
                return p
        raise KeyError(
            f"{self.model} has no MIG profile {name!r}; valid: {', '.join(self.profile_names())}"
        )

    def profile_names(self, include_media: bool = True) -> list[str]:
        return [p.name for p in self.profiles
                if include_media or not (p.media_extensions or p.variant)]

    def base_profiles(self) -> tuple[MigProfile, ...]:
        """Profiles without `+me`/`+gfx`/`-me` variants: what layouts and planners work with."""
        return tuple(p for p in self.profiles if not (p.media_extensions or p.variant))

    @property
    def whole(self) -> MigProfile:
        """The profile that takes the whole GPU (7g, or 4g on the A30)."""
        return max(self.base_profiles(), key=lambda p: (p.memory_slices, p.compute_slices))


def _eight_slice(model: str, gb: tuple[int, int, int, int], gib: tuple[float, ...],
                 sms: tuple[int, ...], *, confirmed: bool = True,
                 note: str = "") -> MigGeometry:
    """Build the shared 8-memory/7-compute-slice geometry (A100, H100, H100 NVL, H200).

    gb = nominal GB in the names of (1g, 1g/2-slice & 2g, 3g & 4g, 7g); gib = reported GiB of
    (1 slice, 2 slices, 4 slices, 8 slices); sms = SMs of (1g, 1g/2-slice, 2g, 3g, 4g, 7g).
    The 1g-with-2-memory-slices profile (ID 15) is named after its memory: on the A100-40GB it is
    `1g.10gb`, the same memory as `2g.10gb`.
    """
    g1, g2, g4, g8 = gb
    m1, m2, m4, m8 = gib
    s1, s1b, s2, s3, s4, s7 = sms
    c = confirmed
    return MigGeometry(
        model=model, memory_slices=8, compute_slices=7, note=note,
        profiles=(
            MigProfile(f"1g.{g1}gb", 19, 1, 1, m1, s1, (0, 1, 2, 3, 4, 5, 6), 7, confirmed=c),
            MigProfile(f"1g.{g1}gb+me", 20, 1, 1, m1, s1, (0, 1, 2, 3, 4, 5, 6), 1,
                       media_extensions=True, confirmed=c),
            MigProfile(f"1g.{g2}gb", 15, 2, 1, m2, s1b, (0, 2, 4, 6), 4, confirmed=c),
            MigProfile(f"2g.{g2}gb", 14, 2, 2, m2, s2, (0, 2, 4), 3, confirmed=c),
            MigProfile(f"3g.{g4}gb", 9, 4, 3, m4, s3, (0, 4), 2, confirmed=c),
            MigProfile(f"4g.{g4}gb", 5, 4, 4, m4, s4, (0,), 1, confirmed=c),
            MigProfile(f"7g.{g8}gb", 0, 8, 7, m8, s7, (0,), 1, confirmed=c),
        ),
    )


# A100-SXM4-40GB: lgip/lgipp captures + MIG guide (data-plane-facts §1.2). The 1g.5gb/1g.10gb
# split: 1g.10gb here is the 2-memory-slice 1g (ID 15).
_A100_40 = _eight_slice("A100-SXM4-40GB", (5, 10, 20, 40), (4.75, 9.62, 19.5, 39.25),
                        (14, 14, 28, 42, 56, 98))
# A100-SXM4-80GB: same geometry, memory doubled (§1.2; GiB ~).
_A100_80 = _eight_slice("A100-SXM4-80GB", (10, 20, 40, 80), (9.5, 19.5, 39.25, 78.75),
                        (14, 14, 28, 42, 56, 98))
# H100 80GB HBM3 (SXM5): lgip + lgipp capture (§1.2). SMs are not linear in slices.
_H100 = _eight_slice("H100-SXM5-80GB", (10, 20, 40, 80), (9.75, 19.62, 39.5, 79.25),
                     (16, 26, 32, 60, 64, 132))
# H100 NVL 94GB: lgip capture (3g.47gb at 0:4 and 4:4) + a published -lgipp listing (§1.2).
_H100_NVL = _eight_slice("H100-NVL", (12, 24, 47, 94), (10.62, 21.5, 46.12, 92.62),
                         (16, 26, 32, 60, 64, 132))
# H200 141GB: names, fractions and max counts confirmed (MIG guide table 8, mig-parted
# defaults); profile IDs, GiB, starts and the 26/32/64 SM counts are INFERRED from H100 (?).
_H200 = _eight_slice("H200", (18, 35, 71, 141), (16.5, 33.0, 70.0, 140.0),
                     (16, 26, 32, 60, 64, 132), confirmed=False,
                     note="IDs, GiB, starts and some SM counts inferred from H100 (unconfirmed)")
# A30-24GB: 4 memory and 4 compute slices; its profile IDs differ from A100/H100 (§1.2).
_A30 = MigGeometry(
    model="A30", memory_slices=4, compute_slices=4,
    profiles=(
        MigProfile("1g.6gb", 14, 1, 1, 5.81, 14, (0, 1, 2, 3), 4),
        MigProfile("1g.6gb+me", 21, 1, 1, 5.81, 14, (0, 1, 2, 3), 1, media_extensions=True),
        MigProfile("2g.12gb", 5, 2, 2, 11.69, 28, (0, 2), 2),
        # starts of 2g.12gb+me are unconfirmed (?) in the captures; assumed equal to 2g.12gb.
        MigProfile("2g.12gb+me", 6, 2, 2, 11.69, 28, (0, 2), 1, media_extensions=True,
                   confirmed=False),
        MigProfile("4g.24gb", 0, 4, 4, 23.44, 56, (0,), 1),
    ),
)

# --- current data-centre GPUs (issue 19) -----------------------------------------------------
# Profile names, memory/compute fractions and instance counts: NVIDIA's MIG user guide
# ("Supported MIG Profiles": every Hopper and Blackwell data-centre GPU has the 8-memory /
# 7-compute-slice layout of the H100, 1/8 .. 8/8 of memory, 1/7 .. 7/7 of the SMs) and
# mig-parted's config-default.yaml (tests/model/upstream/mig-parted, unedited), whose
# per-model layouts name every profile below. Starts and profile IDs are the 8-slice ones
# every captured Hopper GPU reports; GiB are the names' GB (x 0.93, on the low side) and SM
# counts are not published per profile: both are marked unconfirmed, and a node with MIG on
# uses what its driver reports (gpugov.node.mig_apply.runtime_geometry) instead.
_GB = 0.93  # GB in a profile name -> GiB, rounded down


def _published(model: str, gb: tuple[int, int, int, int], sm_per_slice: int) -> MigGeometry:
    g1, g2, g4, g8 = gb
    sms = (sm_per_slice, sm_per_slice, 2 * sm_per_slice, 3 * sm_per_slice, 4 * sm_per_slice,
           7 * sm_per_slice)
    return _eight_slice(model, gb, (g1 * _GB, g2 * _GB, g4 * _GB, g8 * _GB), sms,
                        confirmed=False,
                        note="names, fractions and counts published (MIG user guide, "
                             "mig-parted); GiB and SM counts unconfirmed")


# H100 PCIe: mig-parted applies the H100-80GB layouts to it (device 0x233110DE); 114 SMs, so
# the SXM5's per-profile SM counts do not hold there.
_H100_PCIE = _published("H100-PCIE-80GB", (10, 20, 40, 80), 16)
# 96 GB Hopper parts share one table: H100-96GB, GH200 (96 GB HBM3) and H20
_H100_96 = _published("H100-96GB", (12, 24, 48, 96), 16)
_GH200 = _published("GH200", (12, 24, 48, 96), 16)
_H20 = _published("H20", (12, 24, 48, 96), 11)  # 78 SMs
_GH200_144 = _published("GH200-144GB", (18, 36, 72, 144), 16)
_H200_NVL = _published("H200-NVL", (18, 35, 71, 141), 16)
_B200 = _published("B200", (23, 45, 90, 180), 18)
_GB200 = _published("GB200", (23, 47, 93, 186), 18)
_B300 = _published("B300", (34, 67, 135, 269), 18)
_GB300 = _published("GB300", (35, 70, 139, 278), 18)


def _rtx_pro_6000() -> MigGeometry:
    """RTX PRO 6000 Blackwell Server Edition: 4 memory and 4 compute slices like the A30,
    each profile also as `+gfx` (graphics), `-me` (no media engines) and `+me.all` (all media
    engines, one per GPU); counts from mig-parted (1g.24gb x4, 2g.48gb x2, 4g.96gb x1)."""
    out = []
    for name, pid, sl, gib, starts, most in (("1g.24gb", 14, 1, 22.3, (0, 1, 2, 3), 4),
                                             ("2g.48gb", 5, 2, 44.6, (0, 2), 2),
                                             ("4g.96gb", 0, 4, 89.3, (0,), 1)):
        sms = 47 * sl  # 188 SMs / 4 (unconfirmed)
        out.append(MigProfile(name, pid, sl, sl, gib, sms, starts, most, confirmed=False))
        out.append(MigProfile(f"{name}+gfx", pid, sl, sl, gib, sms, starts, most,
                              confirmed=False, variant=True))
        if sl < 4:
            out.append(MigProfile(f"{name}-me", pid, sl, sl, gib, sms, starts, most,
                                  confirmed=False, variant=True))
            out.append(MigProfile(f"{name}+me.all", pid, sl, sl, gib, sms, starts, 1,
                                  media_extensions=True, confirmed=False))
    return MigGeometry("RTX-PRO-6000", memory_slices=4, compute_slices=4, profiles=tuple(out),
                       note="profile IDs, GiB and SM counts unconfirmed")


_RTX_PRO_6000 = _rtx_pro_6000()

MIG_GEOMETRIES: dict[str, MigGeometry] = {
    g.model: g for g in (_A100_40, _A100_80, _H100, _H100_NVL, _H200, _A30, _H100_PCIE,
                         _H100_96, _GH200, _H20, _GH200_144, _H200_NVL, _B200, _GB200, _B300,
                         _GB300, _RTX_PRO_6000)
}


def get_geometry(model: str) -> MigGeometry:
    """MIG geometry of a model; KeyError names the MIG-capable models gpugov knows."""
    try:
        return MIG_GEOMETRIES[model]
    except KeyError:
        raise KeyError(
            f"no MIG geometry for GPU model {model!r}; known: {', '.join(MIG_GEOMETRIES)}"
        ) from None


def models_with_profile(profile: str) -> list[str]:
    """Names of the catalog models that offer a MIG profile of this name."""
    return [m for m, g in MIG_GEOMETRIES.items() if profile in g.profile_names()]


@dataclass(frozen=True, slots=True, order=True)
class MigInstance:
    """One GPU instance placed at a start index on the memory-slice axis.

    `replicas` > 1: the instance is time-sliced (NVIDIA's time-slicing of a
    `nvidia.com/mig-<profile>` resource): it is handed out as that many shared slots
    (`nvidia.com/mig-<profile>.shared`), never whole."""

    start: int
    profile: str
    replicas: int = 1

    def span(self, geometry: MigGeometry) -> range:
        return range(self.start, self.start + geometry.profile(self.profile).memory_slices)


def layout_errors(geometry: MigGeometry, instances: Iterable[MigInstance]) -> list[str]:
    """Why a concrete layout is invalid (empty list = valid)."""
    errors: list[str] = []
    used = [False] * geometry.memory_slices
    compute = 0
    media = 0
    for inst in sorted(instances):
        try:
            p = geometry.profile(inst.profile)
        except KeyError as e:
            errors.append(str(e.args[0]))
            continue
        if inst.start not in p.starts:
            errors.append(f"{p.name} cannot start at {inst.start}; allowed starts: "
                          f"{','.join(map(str, p.starts))}")
            continue
        for s in range(inst.start, inst.start + p.memory_slices):
            if used[s]:
                errors.append(f"{p.name}@{inst.start} overlaps memory slice {s}")
                break
            used[s] = True
        compute += p.compute_slices
        media += p.media_extensions
    if compute > geometry.compute_slices:
        errors.append(f"needs {compute} compute slices, the GPU has {geometry.compute_slices}")
    if media > 1:
        errors.append("at most one +me (media extensions) instance per GPU")
    return errors


def free_starts(geometry: MigGeometry, profile: MigProfile,
                occupied: Sequence[bool], compute_used: int) -> list[int]:
    """Allowed starts of `profile` whose slices are all free and whose compute still fits."""
    if compute_used + profile.compute_slices > geometry.compute_slices:
        return []
    n = profile.memory_slices
    return [s for s in profile.starts if not any(occupied[s:s + n])]


def occupancy(geometry: MigGeometry,
              instances: Iterable[MigInstance]) -> tuple[list[bool], int, int]:
    """(occupied memory slices, compute slices used, +me instances) of a layout."""
    occ = [False] * geometry.memory_slices
    compute = 0
    media = 0
    for inst in instances:
        p = geometry.profile(inst.profile)
        for s in range(inst.start, inst.start + p.memory_slices):
            occ[s] = True
        compute += p.compute_slices
        media += p.media_extensions
    return occ, compute, media


def find_placement(geometry: MigGeometry, profiles: Sequence[str],
                   existing: Sequence[MigInstance] = ()) -> tuple[MigInstance, ...] | None:
    """One valid placement of `profiles` (added to `existing`), or None if they cannot fit.

    Exhaustive backtracking, largest profile first (the order mig-parted creates them in);
    on 8 slices this is a few hundred steps at most. Deterministic: lowest start first.
    """
    ps = sorted((geometry.profile(n) for n in profiles),
                key=lambda p: (-p.memory_slices, -p.compute_slices, p.name))
    occ, compute, media = occupancy(geometry, existing)
    chosen: list[MigInstance] = []

    def go(i: int, compute: int, media: int) -> bool:
        if i == len(ps):
            return True
        p = ps[i]
        if p.media_extensions and media >= 1:
            return False
        # identical profiles are placed in increasing start order (no symmetric retries)
        floor = chosen[-1].start + 1 if chosen and chosen[-1].profile == p.name else 0
        for s in free_starts(geometry, p, occ, compute):
            if s < floor:
                continue
            for k in range(s, s + p.memory_slices):
                occ[k] = True
            chosen.append(MigInstance(s, p.name))
            if go(i + 1, compute + p.compute_slices, media + p.media_extensions):
                return True
            chosen.pop()
            for k in range(s, s + p.memory_slices):
                occ[k] = False
        return False

    if not go(0, compute, media):
        return None
    return tuple(sorted(chosen))


def why_not(geometry: MigGeometry, profiles: Sequence[str]) -> str:
    """A short human reason why `profiles` cannot share one GPU (call when placement failed)."""
    ps = [geometry.profile(n) for n in profiles]
    mem = sum(p.memory_slices for p in ps)
    comp = sum(p.compute_slices for p in ps)
    media = sum(p.media_extensions for p in ps)
    if comp > geometry.compute_slices:
        return f"they need {comp} compute slices; a {geometry.model} has {geometry.compute_slices}"
    if mem > geometry.memory_slices:
        return (f"they need {mem} memory slices (placement sizes "
                f"{'+'.join(str(p.memory_slices) for p in ps)}); a {geometry.model} has "
                f"{geometry.memory_slices}")
    if media > 1:
        return "at most one +me (media extensions) instance fits on a GPU"
    for p in ps:
        n = sum(q.name == p.name for q in ps)
        if n > p.max_count:
            return f"at most {p.max_count} × {p.name} fit on a GPU"
    return ("the slices add up, but no assignment of allowed start positions avoids overlap "
            "(e.g. a 4g takes slices 0-3, leaving only start 4 for 2g profiles)")


def _key(names: Iterable[str], geometry: MigGeometry) -> tuple[str, ...]:
    order = {p.name: i for i, p in enumerate(geometry.profiles)}
    return tuple(sorted(names, key=lambda n: (-geometry.profile(n).memory_slices,
                                              -geometry.profile(n).compute_slices, order[n])))


@cache
def feasible_layouts(model: str, include_media: bool = False) -> frozenset[tuple[str, ...]]:
    """Every non-empty multiset of profiles that fits on one GPU (as sorted name tuples)."""
    g = get_geometry(model)
    profiles = g.profiles if include_media else g.base_profiles()
    found: set[tuple[str, ...]] = set()

    def go(occ: list[bool], compute: int, media: int, names: list[str], min_idx: int) -> None:
        for i in range(min_idx, len(profiles)):
            p = profiles[i]
            if p.media_extensions and media:
                continue
            for s in free_starts(g, p, occ, compute):
                for k in range(s, s + p.memory_slices):
                    occ[k] = True
                names.append(p.name)
                found.add(_key(names, g))
                go(occ, compute + p.compute_slices, media + p.media_extensions, names, i)
                names.pop()
                for k in range(s, s + p.memory_slices):
                    occ[k] = False

    go([False] * g.memory_slices, 0, 0, [], 0)
    return frozenset(found)


@cache
def maximal_layouts(model: str, include_media: bool = False) -> tuple[tuple[str, ...], ...]:
    """Feasible profile multisets to which no further profile can be added.

    The planner's candidate set. Sorted largest-first for stable output. On the 8-slice models
    without `+me` profiles there are 28 (matches data-plane-facts §1.3); on the A30, 4.
    """
    g = get_geometry(model)
    feasible = feasible_layouts(model, include_media)
    names = g.profile_names(include_media)
    maximal = [
        lay for lay in feasible
        if not any(_key((*lay, n), g) in feasible for n in names)
    ]
    size = {p.name: (p.memory_slices, p.compute_slices) for p in g.profiles}
    return tuple(sorted(maximal, key=lambda lay: [tuple(-x for x in size[n]) for n in lay]))


def layout_label(layout: Sequence[str]) -> str:
    """`3g.40gb+2g.20gb+1g.10gb×2`-style label of a profile multiset."""
    parts: list[str] = []
    for name in dict.fromkeys(layout):
        n = sum(x == name for x in layout)
        parts.append(name if n == 1 else f"{name}×{n}")
    return "+".join(parts)
