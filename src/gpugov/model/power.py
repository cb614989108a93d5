"""Power domains (racks, rows, PDUs) and the expected draw of a GPU under a pod.

A power domain is a set of nodes fed by one panel: its budget is `ratio` (default 0.80, the
usual continuous-load derating of a breaker) times the panel's rating. The engine admits a
pod only if the domain's expected draw stays within that budget (`ClusterState`, filter
step `power`).

Expected draw of one device (the catalog's power model, no measurement involved):
    idle_w + (peak_w - idle_w) * charged_milli / 1000
where `peak_w` is the model's TDP, or the power limit the node agent set on the device when
that is lower, and `idle_w` is `IDLE_SHARE` of the TDP. A domain's admitted draw is the sum
over its devices: every device's idle draw (a powered GPU draws it whether or not a pod runs)
plus the share each allocation charges. Watts are held as integer milliwatts, so the
invariant "admitted <= budget" is checked exactly, without rounding drift.

`IDLE_SHARE` is an assumption, not a measurement: NVIDIA does not publish idle draw per
model; 10 % of TDP is the order of what `nvidia-smi` shows on idle datacenter GPUs (e.g.
60-90 W on a 700 W H100 SXM). The node agent's measured draw (node/power.py) is what the
capping loop acts on; this model only decides admission.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpugov.model.catalog import MILLI_PER_GPU, get_model

#: default share of a panel's rating that admitted draw may reach (continuous-load derating)
DEFAULT_RATIO = 0.80
#: idle draw of a powered GPU as a share of its TDP (an assumption; see module doc)
IDLE_SHARE = 0.10
#: default node label naming a node's rack (power domain)
DEFAULT_LABEL = "gpugov.io/rack"
#: largest panel rating accepted (1 GW: far above any rack, row or hall)
MAX_PANEL_W = 1e9
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class PowerDomain:
    """One panel: `name` (e.g. a rack), its rating in watts and the admission ratio."""

    name: str
    panel_w: float
    ratio: float = DEFAULT_RATIO

    def __post_init__(self) -> None:
        problems = domain_problems(self.name, self.panel_w, self.ratio)
        if problems:
            raise ValueError(f"power domain {self.name!r}: " + "; ".join(problems))

    @property
    def budget_w(self) -> float:
        """What admitted draw may reach: ratio × panel."""
        return self.panel_w * self.ratio

    @property
    def budget_mw(self) -> int:
        return math.floor(self.panel_w * self.ratio * 1000)


def domain_problems(name: object, panel_w: object, ratio: object) -> list[str]:
    """Every problem of a domain's fields, each naming field, value and what is allowed."""
    problems = []
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > 253:
        problems.append(f"name: {name!r} is not a valid name (lower-case letters, digits, "
                        "'-' and '.')")
    if isinstance(panel_w, bool) or not isinstance(panel_w, int | float) or \
            not math.isfinite(panel_w) or not 0 < panel_w <= MAX_PANEL_W:
        problems.append(f"panelWatts: {panel_w!r} is not allowed; a finite number of watts "
                        f"> 0 and <= {MAX_PANEL_W:g}")
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or \
            not math.isfinite(ratio) or not 0 < ratio <= 1:
        problems.append(f"ratio: {ratio!r} is not allowed; a number in (0, 1]")
    return problems


def device_power_mw(model: str, cap_w: float | None = None) -> tuple[int, int]:
    """(idle, full-load) milliwatts of one device of `model`: TDP, lowered to `cap_w` (the
    limit the agent set) when that is lower. (0, 0) when the catalog knows no TDP: such a
    device cannot be budgeted (cluster files refuse it in a domain)."""
    tdp = get_model(model).tdp_w if model else None
    if not tdp:
        return 0, 0
    idle = round(tdp * IDLE_SHARE * 1000)
    peak = round(tdp * 1000)
    if cap_w is not None and math.isfinite(cap_w) and cap_w > 0:
        peak = max(min(peak, round(cap_w * 1000)), idle)
    return idle, peak


def share_mw(span_mw, milli):
    """Draw above idle that `milli` of compute adds on a device whose full-load draw is
    `span_mw` above idle (rounded up, so the sum of shares never undercounts). Works on
    numpy arrays and ints alike."""
    return -((-span_mw * milli) // MILLI_PER_GPU)


def resolve_domains(nodes: Iterable[tuple[str, Mapping[str, str]]],
                    domains: Sequence[PowerDomain], label: str = DEFAULT_LABEL,
                    members: Mapping[str, Sequence[str]] | None = None
                    ) -> tuple[dict[str, PowerDomain], list[str]]:
    """Which domain each node is in: listed in `members[domain]` (a cluster file), else the
    domain named by the node's `label`. Returns (node -> domain, problems); a problem names
    a domain with no nodes, a node in two domains, or a label naming an unknown domain."""
    by_name = {d.name: d for d in domains}
    problems: list[str] = []
    out: dict[str, PowerDomain] = {}
    node_list = list(nodes)
    known = {n for n, _ in node_list}
    for dname, names in (members or {}).items():
        for n in names:
            if n not in known:
                problems.append(f"powerDomains.{dname}.nodes: no node {n!r}")
            elif n in out and out[n].name != dname:
                problems.append(f"powerDomains.{dname}.nodes: node {n!r} is already in "
                                f"domain {out[n].name!r}; a node is in one domain")
            else:
                out[n] = by_name[dname]
    for n, labels in node_list:
        value = labels.get(label)
        if value is None:
            continue
        if value not in by_name:
            problems.append(f"node {n}: label {label}={value!r} names no power domain; "
                            f"known: {', '.join(sorted(by_name)) or '(none)'}")
        elif n in out and out[n].name != value:
            problems.append(f"node {n}: in domain {out[n].name!r} and labelled {label}="
                            f"{value!r}; a node is in one domain")
        else:
            out[n] = by_name[value]
    used = {d.name for d in out.values()}
    for d in domains:
        if d.name not in used:
            problems.append(f"powerDomains.{d.name}: has no nodes (no node is labelled "
                            f"{label}={d.name} or listed in its nodes)")
    return out, problems


def watts_text(mw: float, kilo: bool) -> str:
    """Milliwatts as '27.1 kW' (`kilo`) or '850 W'."""
    return f"{mw / 1e6:.1f} kW" if kilo else f"{mw / 1000:.0f} W"


def over_budget_message(domain: PowerDomain, would_mw: int) -> str:
    """'power domain r3 would draw 27.1 kW of 26.4 kW allowed (80 % of 33.0 kW)' (watts for
    panels below 10 kW)."""
    kilo = domain.panel_w >= 10_000
    return (f"power domain {domain.name} would draw {watts_text(would_mw, kilo)} of "
            f"{watts_text(domain.budget_mw, kilo)} allowed ({domain.ratio * 100:g} % of "
            f"{watts_text(domain.panel_w * 1000, kilo)})")
