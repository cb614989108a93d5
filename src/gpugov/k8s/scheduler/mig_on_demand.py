"""On-demand MIG on Kubernetes, the scheduler's half: a MIG pod that no existing instance can
take asks a node agent for a new one.

The state places MIG pods on the instances the agents report (fixed layouts). When a MIG pod
is still pending after a cycle, `OnDemand.plan` looks for a GPU the agent runs on demand
(inventory `migOnDemand`) where the pod's instances fit in *free* memory and compute slices —
beside the instances there, in use or not, never over them, so nothing running is disturbed —
at the start that loses the least placeability (`placement.mig.start_loss_table`), and on the
device already most cut up (whole GPUs stay whole). It records the wanted instances in the
node's `gpugov.io/mig-requests` annotation; the agent creates them
(`gpugov.node.mig_on_demand`) and re-publishes its inventory, whose new instances the next
cycle places the pod on like any other. The pod's reason says what it waits for; an agent's
refusal (`gpugov.io/mig-requests-state`) becomes its reason, and that spot is not asked for
again for `refusal_backoff_s`. Wants live in memory: after a restart a pod that still waits
is planned again (the annotation is rewritten from the live wants).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpugov.k8s.annotations import MigRequest, encode_mig_requests
from gpugov.k8s.scheduler.translate import NodeInfo
from gpugov.model.cluster import ClusterState
from gpugov.model.devices import DeviceMode
from gpugov.model.mig_table import has_mig, mig_table
from gpugov.model.request import PodRequest
from gpugov.placement.mig import start_loss_table

#: reason codes on pods (PodScheduled=False)
CREATING = "mig-creating"
REFUSED = "mig-refused"


@dataclass(frozen=True, slots=True)
class Want:
    node: str
    requests: tuple[MigRequest, ...]


@dataclass
class OnDemand:
    """The instances asked for, per pending pod, and the agents' refusals."""

    refusal_backoff_s: float = 60.0
    wants: dict[str, Want] = field(default_factory=dict)
    #: (node, request key) -> until when it is not asked for again
    refused: dict[tuple[str, str], float] = field(default_factory=dict)
    #: what each pod was last told (so a refusal stays its reason while it waits)
    said: dict[str, tuple[str, str]] = field(default_factory=dict)

    def plan(self, state: ClusterState, infos: dict[str, NodeInfo], index: dict[str, int],
             pending: Iterable[tuple[str, PodRequest]], now: float
             ) -> tuple[dict[str, str | None], dict[str, tuple[str, str]]]:
        """(node -> new `gpugov.io/mig-requests` value, None = remove; pod key -> (reason
        code, detail)) for this cycle's pending pods."""
        pending = [(k, r) for k, r in pending if r.mode is DeviceMode.MIG]
        keys = {k for k, _ in pending}
        self.refused = {k: t for k, t in self.refused.items() if t > now}
        self.said = {k: v for k, v in self.said.items() if k in keys}
        out: dict[str, tuple[str, str]] = {}
        for key in list(self.wants):
            want = self.wants[key]
            info = infos.get(want.node)
            if key not in keys or info is None:
                del self.wants[key]
                continue
            results = dict(info.mig_results)
            refused = [(r, results[r.key]) for r in want.requests
                       if results.get(r.key, "").startswith("refused")]
            if refused:
                r, why = refused[0]
                for x in want.requests:
                    self.refused[(want.node, x.key)] = now + self.refusal_backoff_s
                del self.wants[key]
                self.said[key] = (REFUSED, f"the node agent of {want.node} refused to create "
                                           f"MIG instance {r.profile}@{r.start} on GPU {r.gpu}: "
                                           f"{why.removeprefix('refused: ')}")
                continue
            if all(info.mig_uuids.get((r.gpu, r.profile, r.start)) for r in want.requests):
                del self.wants[key]  # created: the next placement takes it
                continue
            out[key] = (CREATING, _waiting(want))
        for key, req in pending:
            if key in self.wants:
                continue
            want = self._find(state, infos, index, key, req)
            if want is None:
                if key in self.said:
                    out[key] = self.said[key]
                continue
            self.wants[key] = want
            before = self.said.pop(key, None)
            out[key] = (CREATING, _waiting(want) + (f"; before: {before[1]}" if before else ""))
        return self._annotations(infos), out

    def _annotations(self, infos: dict[str, NodeInfo]) -> dict[str, str | None]:
        by_node: dict[str, list[MigRequest]] = {}
        for w in self.wants.values():
            by_node.setdefault(w.node, []).extend(w.requests)
        out: dict[str, str | None] = {}
        for name, info in infos.items():
            if not info.mig_on_demand and name not in by_node:
                continue
            want = tuple(sorted(by_node.get(name, ())))
            if want != tuple(sorted(info.mig_requests)):
                out[name] = encode_mig_requests(want) if want else None
        return out

    def _find(self, state: ClusterState, infos: dict[str, NodeInfo], index: dict[str, int],
              key: str, req: PodRequest) -> Want | None:
        """A GPU where `req`'s instances fit in free slices, or None."""
        node_ok = state._node_mask(req)  # model, nodeSelector, affinity, taints
        taken: dict[tuple[str, int], list[tuple[str, int]]] = {}
        for w in self.wants.values():
            for r in w.requests:
                taken.setdefault((w.node, r.gpu), []).append((r.profile, r.start))
        best: tuple[tuple, Want] | None = None
        for name, info in infos.items():
            i = index.get(name)
            if i is None or not info.mig_on_demand or not info.schedulable \
                    or not node_ok[i] or not has_mig(info.spec.model):
                continue
            if state.cpu_free[i] < req.cpu_milli or state.mem_free[i] < req.memory_mib:
                continue
            table = mig_table(info.spec.model)
            if req.mig_profile not in table.by_profile:
                continue
            tid = state.tenant_id(req.tenant)
            for d in info.mig_on_demand:
                if d in info.blocked or not _tenant_ok(state, i, d, req, tid):
                    continue
                have = [(p, s) for (g, p, s) in info.mig_uuids if g == d]
                starts = _starts(info.spec.model, req.mig_profile, req.gpu_count,
                                 have + taken.get((name, d), []))
                if starts is None:
                    continue
                reqs = tuple(MigRequest(d, req.mig_profile, s, key) for s in starts)
                if any((name, r.key) in self.refused for r in reqs):
                    continue
                free = table.geometry.compute_slices - sum(
                    table.geometry.profile(p).compute_slices for p, _ in have)
                rank = (free, name, d)  # the most cut-up device first
                if best is None or rank < best[0]:
                    best = (rank, Want(name, reqs))
        return None if best is None else best[1]


def _tenant_ok(state: ClusterState, i: int, d: int, req: PodRequest, tid: int) -> bool:
    """A sealed (untrusted) pod takes a GPU only alone or with its own tenant; nobody else
    joins a GPU a sealed pod holds."""
    pods, owner = int(state.dev_pods[i, d]), int(state.dev_owner[i, d])
    if req.sealed and pods and owner != tid:
        return False
    return not (state.dev_sealed[i, d] > 0 and owner != tid)


def _starts(model: str, profile: str, count: int, have: list[tuple[str, int]]
            ) -> tuple[int, ...] | None:
    """Starts for `count` new `profile` instances beside the instances `have` (profile,
    start), each where it loses the least placeability; None when they do not all fit."""
    table = mig_table(model)
    g = table.geometry
    occ, compute = 0, g.compute_slices
    for p, s in have:
        try:
            pl = table.placements[table.number(p, s)]
        except KeyError:
            return None  # an instance the model does not know: leave the GPU alone
        occ |= pl.bits
        compute -= pl.compute_slices
    _, start_of = start_loss_table(model, profile)
    out = []
    for _ in range(count):
        if compute < 0:
            return None
        s = int(start_of[occ, compute])
        if s < 0:
            return None
        pl = table.placements[table.number(profile, s)]
        occ |= pl.bits
        compute -= pl.compute_slices
        out.append(s)
    return tuple(sorted(out))


def _waiting(want: Want) -> str:
    what = ", ".join(f"{r.profile}@{r.start}" for r in want.requests)
    return (f"waiting for the node agent of {want.node} to create MIG instance(s) {what} on "
            f"GPU {want.requests[0].gpu} (free slices; nothing running is touched)")
