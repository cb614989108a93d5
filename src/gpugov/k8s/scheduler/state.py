"""The scheduler's view of the API, fed to the one control plane; decisions out as a plan.

Pure (no I/O, `now` is an argument), so the whole decision path is unit-tested with plain
API dicts. The API objects are the only truth: `rebuild` makes a fresh `ControlPlane` from
them (bound pods' `gpugov.io/allocation` annotations are the durable record), which happens
at start and whenever nodes, Queues, Tenants, PriorityClasses or PodGroups change; pod
arrivals, bindings and departures are applied incrementally between rebuilds.

A cycle decides for every pending pod at once (`ControlPlane.cycle`) and returns a `Plan`:
bindings (with the allocation record), evictions, PodScheduled conditions and Queue
statuses. A preemptor is not bound in the cycle that evicts for it: it is held out of the
engine until its victims are gone, then scheduled normally. A victim whose eviction was
refused (a PodDisruptionBudget: HTTP 429) is protected from preemption for `pdb_backoff`
seconds, so the next cycle tries another victim or waits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpugov.control import reasons
from gpugov.control.config import RESOURCES, SCALE, ControlConfig
from gpugov.control.cycle import ControlPlane, new_control_plane
from gpugov.control.resources import demand_estimate
from gpugov.control.workload import PENDING, REJECTED, RUNNING, Job, placement_request
from gpugov.k8s.annotations import MIG_REQUESTS as ANN_MIG_REQUESTS
from gpugov.k8s.annotations import Allocation as AllocationRecord
from gpugov.k8s.dra.ledger import DRA_USAGE
from gpugov.k8s.power.tracker import PowerTracker, device_priorities
from gpugov.k8s.scheduler import dra_alloc, names
from gpugov.k8s.scheduler.dra_claims import ClaimBook, ledger_vector
from gpugov.k8s.scheduler.held import (
    allocation_record,
    close_nodes,
    hold_unknown,
    recorded_allocation,
)
from gpugov.k8s.scheduler.mig_on_demand import OnDemand
from gpugov.k8s.scheduler.pod_presence import PodPresence
from gpugov.k8s.scheduler.tenancy import Tenancy
from gpugov.k8s.scheduler.translate import (
    DEFAULT_CLASS,
    ConfigBuild,
    NodeInfo,
    PodInfo,
    build_config,
    declares_gpu,
    engine_request,
    node_info,
    pod_info,
    qos_priority,
)
from gpugov.model.cluster import ClusterState
from gpugov.model.devices import DeviceMode
from gpugov.model.isolation import IsolationLevel, TrustTier
from gpugov.model.request import Allocation, PodRequest

log = logging.getLogger("gpugov.scheduler")


#: reason codes of pods the engine never sees (beyond control/reasons.py's)
INVALID = "invalid-request"
NO_QUEUE = "no-queue"
PREEMPTING = "preempting"
NO_CONFIG = "no-queue-config"
NO_NODES = "no-nodes"
NO_QUEUES = "no-queue-objects"


@dataclass(frozen=True, slots=True)
class Bind:
    key: str
    namespace: str
    name: str
    uid: str
    node: str
    record: AllocationRecord
    #: said on the pod as a Warning Event after the bind ("" = nothing): e.g. an
    #: `nvidia.com/priority: 0` recorded as 1 (`translate.qos_priority`)
    warning: str = ""
    #: DRA claims gpugov allocated for the pod: (claim key, uid, status.allocation), written
    #: before the Binding (`dra_alloc.write_claims`)
    claims: tuple[tuple[str, str, dict[str, Any]], ...] = ()


@dataclass(frozen=True, slots=True)
class Evict:
    key: str
    namespace: str
    name: str
    preemptor: str
    kind: str  # "reclaim" or "preempt"


@dataclass(frozen=True, slots=True)
class Condition:
    key: str
    namespace: str
    name: str
    uid: str
    code: str
    message: str


@dataclass
class Plan:
    """The API writes one cycle decided."""

    binds: list[Bind] = field(default_factory=list)
    evictions: list[Evict] = field(default_factory=list)
    conditions: list[Condition] = field(default_factory=list)
    queue_status: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: PowerDomain name -> status to merge (written by the runner, k8s/power/writer.py)
    power_status: dict[str, dict[str, Any]] = field(default_factory=dict)
    considered: int = 0
    #: node -> annotations to merge (None removes): the on-demand MIG requests
    node_annotations: dict[str, dict[str, str | None]] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (self.binds or self.evictions or self.conditions or self.queue_status
                    or self.node_annotations)


_INSTEAD = ("give gpugov its own node pool (`gpugov scheduler --node-selector`), ask for GPU "
            "models with the gpugov.io/model annotation or an nvidia.com/gpu.product "
            "nodeSelector, or use extender mode (kube-scheduler evaluates them)")


def condition_message(code: str, detail: str) -> str:
    """The PodScheduled=False message: gpugov's reason code first, then the words."""
    return f"gpugov: {code}" + (f": {detail}" if detail else "")


@dataclass
class _JobRec:
    job: Job
    pods: list[str]


class SchedulerState:
    """API objects by key, the control plane built from them, and the bookkeeping between."""

    def __init__(self, policy: str = "gpugov", seed: int = 0, pdb_backoff: float = 30.0,
                 scheduler_name: str = names.SCHEDULER_NAME,
                 node_selector: dict[str, str] | None = None):
        self.policy, self.seed, self.pdb_backoff = policy, seed, pdb_backoff
        #: pods with this schedulerName are ours; only nodes with these labels are used
        self.scheduler_name = scheduler_name
        self.node_selector = dict(node_selector or {})
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodInfo] = {}
        self.queue_objs: dict[str, dict[str, Any]] = {}
        self.tenant_objs: dict[str, dict[str, Any]] = {}
        self.pc_objs: dict[str, dict[str, Any]] = {}
        self.policy_objs: dict[str, dict[str, Any]] = {}
        self.podgroups: dict[str, int] = {}  # ns/name -> minMember
        #: Tenants and namespace labels: a pod's queue and trust tier (never its annotations)
        self.tenants = Tenancy()
        self.dirty = True
        self.cp: ControlPlane | None = None
        self.build = ConfigBuild(None, ["not built yet"], {})
        self.jobs: dict[str, _JobRec] = {}
        self.job_of: dict[str, str] = {}
        self.node_index: dict[str, int] = {}
        self.card_mib = 0
        self.inflight: dict[str, AllocationRecord] = {}  # bound by us, watch not caught up
        self.waiting: dict[str, set[str]] = {}  # preemptor pod -> victim pods still there
        self.protected: dict[str, float] = {}  # pod -> until when eviction is not tried
        self.written: dict[str, str] = {}  # pod -> last PodScheduled message we wrote
        self.queue_written: dict[str, dict[str, Any]] = {}
        self.errors: Counter[str] = Counter()  # bad input seen, by kind (for the metric)
        self.orphans: set[str] = set()  # bound pods counted in the state but in no queue
        #: bound pods whose devices gpugov does not know (a conflicting or missing record):
        #: pod -> what is held for it and why (until it leaves); `gpugov explain` shows it
        self.held: dict[str, str] = {}
        #: pods whose translation or decision raised: pod -> (uid, why); not retried until
        #: the pod changes (so one poisoned pod costs one try, not one per cycle)
        self.poisoned: dict[str, tuple[str, str]] = {}
        self._said: set[str] = set()  # problems already logged and counted
        #: what `_hold` held for a pod last time ((uid, node), devices): kept across rebuilds
        self._held_devices: dict[str, tuple[tuple[str, str], tuple[int, ...]]] = {}
        self.rebuilds = 0
        self._job_seq = 0
        self.version = 0  # bumped by every node or pod event (readers cache on it)
        self._preq: dict[str, tuple[PodInfo, tuple[Any, ...], PodRequest]] = {}
        self.taints = False  # some node has a taint (then tolerations are evaluated)
        #: every live pod for pod affinity, anti-affinity and spread (`pod_presence.py`)
        self.presence = PodPresence()
        #: PowerDomains, the nodes' measured draw, the caps (docs/power.md)
        self.power = PowerTracker()
        #: MIG instances asked of node agents for pending pods (`mig_on_demand.py`)
        self.on_demand = OnDemand()
        #: allocated DRA claims of gpugov's driver, charged to their queues (`dra_claims.py`)
        self.claims = ClaimBook()
        #: queue -> why it takes no new pod: a claim of it cannot be valued
        self.claim_holds: dict[str, str] = {}
        self.claim_usage: np.ndarray | None = None  # [queue, resource]: claims' part of usage
        #: claim pods, every claim and DeviceClass: gpugov allocating claims (`dra_alloc.py`)
        self.dra = dra_alloc.DraPods()
        self._dra_nodes: tuple[Any, dict[str, list[dict[str, Any]]]] = (None, {})

    # -- watch events ------------------------------------------------------------------------
    def set_node(self, obj: dict[str, Any]) -> None:
        self.version += 1
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if any(labels.get(k) != v for k, v in self.node_selector.items()):
            self.delete_node((obj.get("metadata") or {}).get("name", ""))
            return
        info = node_info(obj)
        self.power.set_node(info.name, (obj.get("metadata") or {}).get("annotations"))
        old = self.nodes.get(info.name)
        if info.error and (old is None or old.error != info.error):
            self._bad("node", info.error)  # once per problem, not once per heartbeat
        self.nodes[info.name] = info
        if old is None or old.signature() != info.signature():
            self.dirty = True

    def delete_node(self, name: str) -> None:
        self.version += 1
        self.power.delete_node(name)
        if self.nodes.pop(name, None) is not None:
            self.dirty = True

    def set_object(self, kind: str, obj: dict[str, Any]) -> None:
        """A Queue, Tenant, PriorityClass or PodGroup was added or changed."""
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        if kind in ("podgroup", "vcpodgroup"):  # scheduler-plugins' or Volcano's
            key = f"{meta.get('namespace', '')}/{name}"
            spec = obj.get("spec") or {}
            try:
                n = max(1, int(spec.get("minMember") or 1))
            except (TypeError, ValueError):
                self._bad("podgroup", f"PodGroup {key}: spec.minMember {spec.get('minMember')!r}"
                          " is not an integer")
                n = 1
            if self.podgroups.get(key) != n:
                self.podgroups[key] = n
            return  # groups are read at submission time; no rebuild needed
        if kind == "namespace":
            self.set_namespace(name, meta.get("labels") or {})
            return
        if kind == "powerdomain":
            if self.power.set_object(obj):
                self.dirty = True
            return
        if kind == "deviceclass":
            self.dra.set_class(obj)
            return
        if kind in ("resourceclaim", "resourceslice"):
            if kind == "resourceclaim":
                self.dra.set_claim(obj)
            if (self.claims.set_claim if kind == "resourceclaim" else self.claims.set_slice)(obj) \
                    and not (kind == "resourceclaim" and self._ours(obj)):
                self.dirty = True  # the claims' charges are counted again
            return
        store = self._store(kind)
        old = store.get(name)
        store[name] = obj
        if old is None or _relevant(kind, old) != _relevant(kind, obj):
            self.dirty = True
            if kind == "tenant":
                self._retenant()

    def delete_object(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if kind in ("podgroup", "vcpodgroup"):
            self.podgroups.pop(f"{meta.get('namespace', '')}/{meta.get('name', '')}", None)
            return
        if kind == "namespace":
            self.set_namespace(meta.get("name", ""), None)
            return
        if kind == "powerdomain":
            if self.power.delete_object(meta.get("name", "")):
                self.dirty = True
            return
        if kind == "deviceclass":
            self.dra.delete_class(obj)
            return
        if kind in ("resourceclaim", "resourceslice"):
            if kind == "resourceclaim":
                self.dra.delete_claim(obj)
            if (self.claims.delete_claim if kind == "resourceclaim"
                    else self.claims.delete_slice)(obj):
                self.dirty = True
            return
        if self._store(kind).pop(meta.get("name", ""), None) is not None:
            self.dirty = True
            if kind == "tenant":
                self._retenant()

    def set_namespace(self, name: str, labels: dict[str, str] | None) -> None:
        """A namespace's labels (None: it was deleted): Tenant selectors read them. When
        they change which Tenant owns it, its pods are charged again (a rebuild)."""
        if not self.tenants.set_namespace(name, labels):
            return
        if name in self.claims.namespaces():
            self.dirty = True  # its claims are charged elsewhere now
        for info in self.pods.values():
            if info.namespace == name:
                before = (info.queue, info.trust, info.oversubscribe)
                info.resolve(self.tenants)
                if (info.queue, info.trust, info.oversubscribe) != before:
                    self._preq.pop(info.key, None)
                    self.version += 1
                    self.dirty = True  # charged elsewhere now: a rebuild recounts

    def _retenant(self) -> None:
        """The Tenants changed: every pod's queue and trust tier are resolved again."""
        self.version += 1
        self.tenants.set_tenants(list(self.tenant_objs.values()))
        for info in self.pods.values():
            info.resolve(self.tenants)
        self._preq.clear()

    def _store(self, kind: str) -> dict[str, dict[str, Any]]:
        return {"queue": self.queue_objs, "tenant": self.tenant_objs,
                "priorityclass": self.pc_objs, "prioritypolicy": self.policy_objs}[kind]

    def set_pod(self, obj: dict[str, Any]) -> None:
        self.version += 1
        meta = _mapping(obj.get("metadata"))
        spec = _mapping(obj.get("spec"))
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        if self.presence.set_pod(key, obj):
            self.dirty = True  # inter-pod constraints appeared or left: requests change
        if spec.get("schedulerName") == self.scheduler_name:
            self.dra.set_pod(key, obj)
            phase = _mapping(obj.get("status")).get("phase")
            if phase in ("Succeeded", "Failed"):
                self.dra.delete_pod(key, str(meta.get("uid") or ""))
        if spec.get("schedulerName") != self.scheduler_name and \
                names.ANN_ALLOCATION not in _mapping(meta.get("annotations")) and \
                not (spec.get("nodeName") and declares_gpu(spec)):
            if key in self.pods:
                self.delete_pod(key)
            return  # neither ours nor holding a device: not our business
        old = self.pods.get(key)
        prev_error = old.error if old is not None else None
        info = pod_info(obj, self.tenants, old)
        if old is not None and old.uid != info.uid:
            self.delete_pod(key)  # same name, new pod
            old = None
        elif old is not None and info is not old:
            self.poisoned.pop(key, None)  # changed: it gets another try
            if not info.node and key in self.job_of:
                self.dirty = True  # a pending pod's request changed (e.g. a toleration added)
        self.pods[key] = info
        if info.error and prev_error != info.error:
            self._bad("pod", f"pod {key}: {info.error}")
        if info.node:
            self.inflight.pop(key, None)
        if self.dirty or self.cp is None:
            return
        jname = self.job_of.get(key)
        if info.done:
            if key in self.orphans:
                self.dirty = True
            elif jname is not None:
                self._leave(key)
            return
        if info.node:
            if jname is not None and self.jobs[jname].job.status == RUNNING:
                return  # our own binding, confirmed
            if jname is not None:  # bound elsewhere while pending here: start over
                self.dirty = True
                return
            if key in self.orphans or info.node not in self.node_index:
                return  # counted already, or on a node gpugov does not manage
            if info.allocation is not None and not info.error and \
                    info.allocation.node == info.node:
                with self.cp.state.counting_running():
                    if self._adopt(info, info.created):
                        return
            if info.allocation is not None or info.gpu_declared:
                self.dirty = True  # devices unknown or contested: a rebuild holds them
            return
        if jname is not None and self.jobs[jname].job.status == RUNNING \
                and key not in self.inflight:
            self.dirty = True  # the engine thinks it runs, the API says pending

    def delete_pod(self, key: str) -> None:
        self.version += 1
        self._preq.pop(key, None)
        gone = self.pods.get(key)
        self.dra.delete_pod(key, gone.uid if gone is not None else "")
        if self.presence.delete(key):
            self.dirty = True
        self.poisoned.pop(key, None)
        self._held_devices.pop(key, None)
        self.pods.pop(key, None)
        self.inflight.pop(key, None)
        self.written.pop(key, None)
        self.protected.pop(key, None)
        self.waiting.pop(key, None)
        for victims in self.waiting.values():
            victims.discard(key)
        if key in self.orphans:
            self.dirty = True
        elif key in self.job_of and not self.dirty and self.cp is not None:
            self._leave(key)

    def _leave(self, key: str) -> None:
        """A pod of a job left: a single-pod job finishes; a gang member forces a rebuild."""
        jname = self.job_of[key]
        rec = self.jobs[jname]
        if len(rec.pods) > 1 and rec.job.status == RUNNING:
            self.dirty = True
            return
        assert self.cp is not None
        if rec.job.status == RUNNING and any(
                not self.nodes[self.cp.state.names[a.node]].schedulable
                or self.nodes[self.cp.state.names[a.node]].blocked
                for a in rec.job.allocations if self.cp.state.names[a.node] in self.nodes):
            self.dirty = True  # freeing room on a node that takes no new pods: rebuild
            return
        self.cp.finish(rec.job)
        self._forget(jname)

    def _drop_job(self, job: Job) -> None:
        """Take a job that was (perhaps half) submitted out of the control plane again."""
        cp = self.cp
        assert cp is not None
        if job.status == PENDING and any(j is job for j in cp.backlog[job.leaf]):
            cp.finish(job)
        cp.jobs.pop(job.name, None)

    def _forget(self, jname: str) -> None:
        rec = self.jobs.pop(jname)
        for k in rec.pods:
            if self.job_of.get(k) == jname:
                del self.job_of[k]
        if self.cp is not None:
            self.cp.jobs.pop(jname, None)

    def bind_result(self, bind: Bind, ok: bool) -> None:
        """The outcome of a Binding the runner issued."""
        if ok:
            info = self.pods.get(bind.key)
            if info is None or not info.node:
                self.inflight[bind.key] = bind.record
        else:
            self.inflight.pop(bind.key, None)
            self.dirty = True  # the engine placed it; the API refused: start from the API

    def eviction_result(self, ev: Evict, status: int, now: float) -> None:
        """429 = a PodDisruptionBudget refused: protect the victim for a while, release its
        preemptor so the next cycle tries another victim or waits."""
        if status == 429:
            self.protected[ev.key] = now + self.pdb_backoff
            for p in [p for p, victims in self.waiting.items() if ev.key in victims]:
                del self.waiting[p]  # every pod of the preemptor (a gang) tries again
            self.dirty = True
        elif status == 404:
            for victims in self.waiting.values():
                victims.discard(ev.key)
        elif status >= 300:
            self.waiting.pop(ev.preemptor, None)
            self.dirty = True

    def _bad(self, kind: str, message: str) -> None:
        self.errors[kind] += 1
        log.warning("%s", message)

    # -- rebuilding the engine from the API objects ------------------------------------------
    def rebuild(self, now: float) -> None:
        """A fresh control plane from the stored API objects (what a restart does)."""
        self.rebuilds += 1
        self.dirty = False
        self.jobs.clear()
        self.job_of.clear()
        self.orphans.clear()
        self.held.clear()
        before = set(self.build.problems)
        self.build = build_config(list(self.queue_objs.values()), list(self.pc_objs.values()),
                                  list(self.policy_objs.values()))
        for p in self.build.problems:
            if p not in before:  # each problem is logged and counted once, not every cycle
                self._bad("queue", p)
        infos = [self.nodes[n] for n in sorted(self.nodes)]
        self.node_index = {n.name: i for i, n in enumerate(infos)}
        self.card_mib = max((n.card_memory_mib for n in infos), default=0)
        self.taints = any(n.spec.taints for n in infos)
        cfg: ControlConfig | None = self.build.config
        if cfg is None or not infos:
            self.cp = None
            return
        self.cp = new_control_plane(cfg, self.power.apply([n.spec for n in infos]),
                                    self.policy, self.seed)
        self.protected = {k: t for k, t in self.protected.items() if t > now}
        with self.cp.state.counting_running():  # what runs is counted, even over a budget
            self._count_bound(infos)
            problems = close_nodes(self.cp.state, infos)
        self._charge_claims()
        for problem in problems:
            self._bad("node", problem)

    def _count_bound(self, infos: list[NodeInfo]) -> None:
        """Put every bound pod on a managed node into the state, earliest-created first.

        A record is adopted only when it names the node the pod is bound to and does not
        conflict with what is counted already: so the earlier pod wins a contested device,
        and a later edit of a record cannot take a device from a neighbour. A pod whose
        devices are unknown (its record conflicts, names another node, cannot be read, or
        it has none: bound by another scheduler or created with spec.nodeName) holds what
        it may be using (`held.hold_unknown`) until it leaves: a device is never given to
        a new pod while another live pod may be on it."""
        assert self.cp is not None
        bound = []
        for key, info in self.pods.items():
            record = info.allocation if info.node else self.inflight.get(key)
            node = info.node or (record.node if record is not None else "")
            if info.done or not node or node not in self.node_index:
                continue
            bound.append((info.created, key, info, node, record))
        gangs: dict[str, list[tuple[PodInfo, AllocationRecord]]] = {}
        for _, _key, info, node, record in bound:
            if info.group and record is not None and record.node == node and not info.error:
                gangs.setdefault(f"{info.namespace}/{info.group}", []).append((info, record))
        adopted = set()
        for members in gangs.values():  # a gang stays one job: it is evicted whole
            if len(members) > 1 and self._adopt_gang(members):
                adopted |= {m.key for m, _ in members}
        for _, key, info, node, record in sorted(bound, key=lambda b: b[:2]):
            if key in adopted:
                continue
            start = float("inf") if key in self.protected else info.created
            if record is not None and record.node == node and not info.error and \
                    self._adopt(info, start, record):
                continue
            if record is None and info.allocation_text is None and not info.gpu_declared:
                continue  # no GPU and no record: nothing of gpugov's to count
            self._hold(info, node, record)

    def _hold(self, info: PodInfo, node: str, record: AllocationRecord | None) -> None:
        """Hold what a pod with unknown devices may be using on `node` (an orphan: when
        it leaves, a rebuild frees it)."""
        assert self.cp is not None
        i = self.node_index[node]
        named = tuple(d.index for d in record.devices) if record is not None and \
            record.node == node else ()
        before = self._held_devices.get(info.key)
        if before is not None and before[0] == (info.uid, node):
            named += before[1]  # the same devices as last time, while they are untouched
        count = info.request.count if info.request is not None and not info.error else None
        if record is not None and record.node != node:
            why = f"its allocation record names node {record.node}, it is bound to {node}"
        elif record is not None:
            why = "its allocation record conflicts with an earlier pod's or with the node"
        elif info.allocation_text is not None:
            why = "its allocation record cannot be read"
        else:
            why = ("it was bound without gpugov's allocation record (another scheduler, or "
                   "spec.nodeName set at creation)")
        try:
            held = hold_unknown(self.cp.state, i, named, count)
        except Exception as e:  # noqa: BLE001 - holding must never stop the rebuild
            held = ()
            why += f"; its devices could not be held ({e})"
        self.orphans.add(info.key)
        self._held_devices[info.key] = ((info.uid, node), held)
        what = (f"device(s) {', '.join(map(str, held))} of node {node} held until it leaves"
                if held else f"nothing left to hold on node {node}")
        queue = self._charge_held(info)
        if queue:
            what += f", charged to queue {queue}"
        self.held[info.key] = f"{why}: {what}"
        self._say("allocation", f"pod {info.key}: {self.held[info.key]}")

    def _charge_claims(self) -> None:
        """Charge every allocated gpugov DRA claim to its namespace's Tenant's queue, as
        running usage (`dra_claims.py`); a claim that cannot be valued holds its queue."""
        cp = self.cp
        assert cp is not None
        self.claim_holds = {}
        self.claim_usage = np.zeros_like(cp.ledger.usage)
        tree = cp.tree
        self.dra.forget_left()
        for pool, device in self.claims.devices_of(skip=self._ours):
            i, d = self.node_index.get(pool), dra_alloc.device_index_of(device)
            if i is not None and d is not None and d < int(cp.state.gpu_count[i]):
                with contextlib.suppress(ValueError):  # kube-scheduler's: held whole
                    dra_alloc.hold_device(cp.state, i, d)
        for c in self.claims.charges(skip=self._ours):
            owner = self.tenants.of(c.namespace)
            queue = owner.queue
            if queue is None or queue not in tree.names or \
                    not tree.is_leaf[tree.names.index(queue)]:
                why = (owner.why or f"namespace {c.namespace} has no Tenant") if queue is None \
                    else f"queue {queue!r} is not a leaf queue of the Queue objects"
                self._say("claim", f"ResourceClaim {c.key}: not charged to any queue: {why}")
                continue
            if c.charge is None:
                self.claim_holds.setdefault(queue, (
                    f"queue {queue}'s use is unknown: ResourceClaim {c.key} holds gpugov "
                    f"devices that cannot be valued ({c.error}); new pods of the queue wait "
                    "until the claim is fixed or deleted"))
                self._say("claim", f"ResourceClaim {c.key}: {c.error}")
                continue
            leaf = tree.names.index(queue)
            vec = ledger_vector(tree.resources, c.charge)
            cp.ledger.add(leaf, vec, False)
            for a in tree.paths[leaf]:
                self.claim_usage[a] += vec

    def _charge_held(self, info: PodInfo) -> str:
        """Charge a held pod's request to its Tenant's queue (what it may be using counts
        against its quota, as if gpugov had placed it); the queue's name, or "" when it has
        no usable queue or request."""
        cp = self.cp
        assert cp is not None
        if info.request is None or info.error:
            return ""
        try:
            leaf, _, _ = self._leaf(info)
            if leaf is None:
                return ""
            req = placement_request(self.pod_request(info), info.trust, info.namespace)
            demand = demand_estimate(cp.tree.resources, req, 1, cp.card_mib)
            cp.ledger.add(leaf, demand, not self._pclass(cp.cfg, info).preemptible)
        except Exception:  # noqa: BLE001 - the hold stands; only the charge is skipped
            return ""
        return cp.tree.names[leaf]

    def _say(self, kind: str, message: str) -> None:
        """`_bad`, once per distinct message (rebuilds repeat them)."""
        if message not in self._said:
            self._said.add(message)
            self._bad(kind, message)

    def _pclass(self, cfg: ControlConfig, info: PodInfo):
        try:
            return cfg.priority_class(info.priority_class or DEFAULT_CLASS)
        except KeyError:
            return cfg.priority_class(DEFAULT_CLASS)

    def _leaf(self, info: PodInfo) -> tuple[int | None, str, str]:
        """(leaf index, reason code, detail) for a pod's queue."""
        assert self.cp is not None
        if info.queue is None:
            return None, NO_QUEUE, info.tenancy_why or f"namespace {info.namespace} has no Tenant"
        if info.queue in self.build.excluded:
            return None, NO_QUEUE, self.build.excluded[info.queue]
        tree = self.cp.tree
        if info.queue not in tree.names:
            leaves = [n for n, leaf in zip(tree.names, tree.is_leaf, strict=True) if leaf]
            return None, NO_QUEUE, (f"queue {info.queue!r} does not exist; leaf queues: "
                                    f"{', '.join(leaves)}")
        q = tree.names.index(info.queue)
        if not tree.is_leaf[q]:
            return None, NO_QUEUE, f"queue {info.queue!r} has child queues; only leaves take pods"
        return q, "", ""

    def pod_request(self, info: PodInfo) -> PodRequest:
        """The engine's request (`translate.engine_request`): GPU memory per device, a
        compute share, the slice mode, isolation floor, tenant seal and node constraints; a
        memory-only slice's share, and a `memoryPercent`'s MiB, are taken of the largest card
        in the cluster. Tolerations count only while some node has a taint. ValueError: the
        pod asks for something gpugov's scheduler does not place."""
        cached = self._preq.get(info.key)
        terms = self.presence.request_terms(info.key)
        tr = self._dra_attach(info)  # a claim pod: its claims' request (ValueError: why not)
        if cached is not None and cached[0] is info and cached[1] == (self.card_mib,
                                                                     self.taints, terms, tr):
            return cached[2]
        preq = dra_alloc.constrain(engine_request(info, self.card_mib, self.taints, terms), tr)
        self._preq[info.key] = (info, (self.card_mib, self.taints, terms, tr), preq)
        return preq

    def _dra_attach(self, info: PodInfo) -> dra_alloc.Translation | None:
        """A claim pod's request from its claims (`dra_alloc.py`), set as its request; None
        for other pods. ClaimProblem (a ValueError): why it cannot be placed yet."""
        if info.key not in self.dra.pods:
            return None
        version = (self.claims.version, self.rebuilds)  # devices of the nodes it manages
        if self._dra_nodes[0] != version:
            self._dra_nodes = (version, {n: d for n, d in self.claims.by_node().items()
                                         if n in self.node_index})
        tr = self.dra.translation(info.key, self._dra_nodes[1], version)
        if tr is not None and info.request != tr.request:
            info.request, info.gpu_declared = tr.request, True
        return tr

    def _ours(self, claim: dict[str, Any]) -> bool:
        return dra_alloc.ours(claim, self.pods, self.scheduler_name, self.dra.left)

    def _unplaceable(self, info: PodInfo) -> str:
        """Why a pending pod cannot be given to the engine ("" = it can)."""
        try:
            self.pod_request(info)
        except ValueError as e:
            return str(e)
        return ""

    def _new_job(self, name: str, info: PodInfo, pods: int) -> Job | None:
        assert self.cp is not None
        leaf, _, _ = self._leaf(info)
        if leaf is None:
            return None
        return Job(name, leaf, self._pclass(self.cp.cfg, info), info.created, pods,
                   self.pod_request(info), info.trust)

    def _adopt(self, info: PodInfo, start: float, record: AllocationRecord | None = None) -> bool:
        """Count a bound pod (its recorded allocation) in the state and its queue's usage.

        A pod whose queue is unknown, or whose job the ledger refuses (its queue's caps were
        lowered below what already runs), still holds its devices: it is an orphan, counted
        in the cluster state only.
        """
        cp = self.cp
        assert cp is not None
        record = record or info.allocation
        if record is None or info.error:
            return False
        node = self.node_index.get(record.node)
        if node is None or (info.node and info.node != record.node):
            return False
        self._job_seq += 1
        name = f"{info.key}#{self._job_seq}"
        job = None
        try:
            job = self._new_job(name, info, 1)
            if job is not None:
                cp.submit(job)
                if job.status == REJECTED:
                    cp.jobs.pop(name, None)
                    job = None
            req = job.request if job is not None else placement_request(
                self.pod_request(info), info.trust)
            alloc = recorded_allocation(cp.state, req, node, record)
            cp.state.allocate(req, alloc)
        except Exception:  # noqa: BLE001 - a record that cannot be this pod's: not adopted
            if job is not None:
                self._drop_job(job)
            return False
        if job is None:
            self.orphans.add(info.key)
            return True
        cp._start(job, [alloc], start)  # the control plane's own bookkeeping of a start
        self.jobs[name] = _JobRec(job, [info.key])
        self.job_of[info.key] = name
        return True

    def _adopt_gang(self, members: list[tuple[PodInfo, AllocationRecord]]) -> bool:
        """Count the bound pods of one PodGroup as the one job they were placed as, so that
        preemption and reclaim evict the gang whole (a pod-per-job rebuild once evicted half
        a gang). False, with nothing changed, when they cannot be one job (pods that differ,
        a record that does not fit): each is then adopted alone."""
        cp = self.cp
        assert cp is not None
        infos = sorted((m for m, _ in members), key=lambda m: (m.created, m.key))
        records = {m.key: r for m, r in members}
        try:
            shapes = {dataclasses.replace(self.pod_request(m), name="", pods=None)
                      for m in infos}
        except ValueError:
            return False
        if len(shapes) > 1 or len({m.queue for m in infos}) > 1:
            return False
        snap = cp.state.snapshot()
        self._job_seq += 1
        gkey = f"{infos[0].namespace}/{infos[0].group}"
        jname = f"group:{gkey}#{self._job_seq}"
        job = None
        try:
            job = self._new_job(jname, infos[0], len(infos))
            if job is None:
                return False
            cp.submit(job)
            if job.status == REJECTED:
                self._drop_job(job)
                return False
            allocs = []
            for m in infos:
                rec = records[m.key]
                alloc = recorded_allocation(cp.state, job.request, self.node_index[rec.node],
                                            rec)
                cp.state.allocate(job.request, alloc)
                allocs.append(alloc)
        except Exception:  # noqa: BLE001 - not one job after all: adopt each alone
            cp.state.restore(snap)
            if job is not None:
                self._drop_job(job)
            return False
        protected = any(m.key in self.protected for m in infos)
        cp._start(job, allocs, float("inf") if protected else infos[0].created)
        keys = [m.key for m in infos]
        self.jobs[jname] = _JobRec(job, keys)
        for k in keys:
            self.job_of[k] = jname
        return True

    # -- the cycle ------------------------------------------------------------------------------
    def cycle(self, now: float) -> Plan:
        """Decide for every pending pod; return the API writes."""
        if self.dirty or self.cp is None and self.nodes and self.queue_objs:
            self.rebuild(now)
        plan = Plan()
        if self.cp is None:
            code, why = self._why_no_engine()
            for info in self._pending_pods():
                self._condition(plan, info, code, why)
            return plan
        self._submit_pending(plan)
        cp = self.cp
        try:
            with self.presence.attached(cp.state, self.node_index, self.inflight,
                                        self.tenants.labels or {}, self._term_owner):
                result = cp.cycle(now)
        except Exception as e:  # noqa: BLE001 - never one pod for everyone
            log.exception("cycle failed; rebuilding from the API objects")
            self.errors["cycle"] += 1
            self._quarantine(plan, e)
            return plan
        plan.considered = result.considered
        preemptors = {ev.preemptor for ev in result.preempted}
        for ev in result.preempted:
            for victim in self.jobs[ev.victim].pods:
                v = self.pods[victim]
                for p in self.jobs[ev.preemptor].pods:
                    self.waiting.setdefault(p, set()).add(victim)
                plan.evictions.append(Evict(victim, v.namespace, v.name,
                                            self.jobs[ev.preemptor].pods[0], ev.kind))
        if preemptors:
            self.dirty = True  # victims still hold their devices until they are gone
        for job in result.started:
            if job.name in preemptors:
                continue
            rec = self.jobs[job.name]
            try:
                records = [self.allocation_record(self.pods[key], alloc)
                           for key, alloc in zip(rec.pods, job.allocations, strict=True)]
                claims = [self._dra_claims(self.pods[key], alloc, r.node)
                          for key, alloc, r in zip(rec.pods, job.allocations, records,
                                                   strict=True)]
            except Exception as e:  # noqa: BLE001 - not bound; the engine starts over
                self._poison(plan, [self.pods[k] for k in rec.pods], e)
                self.dirty = True
                continue
            for key, record, writes in zip(rec.pods, records, claims, strict=True):
                info = self.pods[key]
                plan.binds.append(Bind(key, info.namespace, info.name, info.uid,
                                       record.node, record, self.qos_class(info)[1], writes))
                self.inflight[key] = record
        demand = self._on_demand(plan, now)
        for rec in self.jobs.values():
            if rec.job.status in (PENDING, REJECTED):
                code, detail = self.presence.reason(rec.job)  # inter-pod: names the term
                if rec.job.reason in (reasons.NO_NODE, reasons.REJECTED) and \
                        self.pods[rec.pods[0]].gpu_declared and \
                        not any(n.spec.gpu_count for n in self.nodes.values()):
                    detail = (f"no GPU nodes: none of the {len(self.nodes)} node(s) has a GPU "
                              "in gpugov's inventory; add GPU nodes (each runs gpugov's node "
                              f"agent) — {detail}")
                if rec.job.blocked_by == "power":  # which rack, in watts
                    watts = cp.state.power_message(rec.job.request)
                    detail = f"{detail} ({watts})" if watts else detail
                for key in rec.pods:
                    if key in self.waiting:
                        continue
                    self._condition(plan, self.pods[key], *demand.get(key, (code, detail)))
        plan.queue_status = self._queue_status()
        plan.power_status = self.power.statuses(cp.state, device_priorities(self.pods.values()),
                                                partial=bool(self.node_selector))
        return plan

    def _dra_claims(self, info: PodInfo, alloc: Allocation, node: str
                    ) -> tuple[tuple[str, str, dict[str, Any]], ...]:
        """A claim pod's claims' allocations for its placement (`dra_alloc.py`)."""
        tr = self._dra_attach(info)
        if tr is None:
            return ()
        return self.dra.claim_writes(tr, info.key, info.uid, node, alloc.devices,
                                     alloc.instances, self.claims.published(node))

    def _on_demand(self, plan: Plan, now: float) -> dict[str, tuple[str, str]]:
        """Ask node agents for the MIG instances pending MIG pods need (`mig_on_demand.py`):
        the node annotations to write, and each such pod's reason."""
        assert self.cp is not None
        pending = [(k, rec.job.request) for rec in self.jobs.values()  # no instance to take
                   if rec.job.status in (PENDING, REJECTED) and rec.job.blocked_by == "mig-slice"
                   for k in rec.pods if k not in self.waiting]
        patches, said = self.on_demand.plan(self.cp.state, self.nodes, self.node_index,
                                            pending, now)
        for node, value in patches.items():
            plan.node_annotations[node] = {ANN_MIG_REQUESTS: value}
        return said

    def _term_owner(self, namespace: str) -> tuple[str | None, bool]:
        """(Tenant, untrusted) of a namespace, for the reach of inter-pod terms."""
        owner = self.tenants.of(namespace)
        return owner.tenant or None, owner.trust is TrustTier.UNTRUSTED

    def _why_no_engine(self) -> tuple[str, str]:
        """Why nothing can be placed yet, named by its real cause, and what to do."""
        if not self.nodes:
            return NO_NODES, ("no nodes: the cluster has no nodes; add GPU nodes (a dev "
                              "cluster: `gpugov dev up` without --nodes starts a built-in fleet)")
        if not self.queue_objs:
            return NO_QUEUES, ("no Queue objects: create a Queue (gpugov.io/v1alpha1) and a "
                               "Tenant sending this namespace to it, or `gpugov crd convert` "
                               "your queues config")
        why = "; ".join(self.build.problems[:3]) or "no valid Queue objects"
        return NO_CONFIG, f"{why}; fix the Queue objects (`kubectl get queues -o yaml`)"

    def _quarantine(self, plan: Plan, e: Exception) -> None:
        """The control cycle raised: find the pending jobs whose own arithmetic raises (a
        pod's numbers, probed alone: quota check, node fit, scores) and poison their pods,
        so the next cycle runs without them. The engine is rebuilt from the API either way.
        """
        cp = self.cp
        assert cp is not None
        self.dirty = True
        bad: list[PodInfo] = []
        for rec in list(self.jobs.values()):
            job = rec.job
            if job.status not in (PENDING, REJECTED):
                continue
            try:
                cp.ledger.check(job.leaf, job.demand, job.pinned)
                ok = cp.state.feasible(job.request)
                nodes = np.flatnonzero(ok)
                if len(nodes):
                    cp.placer.scores(job.request, nodes)
            except Exception:  # noqa: BLE001 - this job's own numbers raise
                bad += [self.pods[k] for k in rec.pods if k in self.pods]
        if bad:
            self._poison(plan, bad, e)

    def _pending_pods(self) -> list[PodInfo]:
        return [p for p in self.pods.values()
                if p.scheduler == self.scheduler_name and not p.node and not p.done
                and not p.terminating
                and p.key not in self.inflight]

    def _submit_pending(self, plan: Plan) -> None:
        """Give the engine every pending pod it does not hold yet (gangs as one job)."""
        cp = self.cp
        assert cp is not None
        groups: dict[str, list[PodInfo]] = {}
        for info in self._pending_pods():
            key = info.key
            if self.waiting.get(key):
                self._condition(plan, info, PREEMPTING,
                                f"waiting for {len(self.waiting[key])} evicted pod(s) to leave")
                continue
            self.waiting.pop(key, None)
            if key in self.dra.pods and not info.error:
                try:
                    self._dra_attach(info)
                except dra_alloc.ClaimProblem as e:
                    self._condition(plan, info, e.code, str(e))
                    continue
            if info.error:
                self._condition(plan, info, INVALID, info.error)
                continue
            poisoned = self.poisoned.get(key)
            if poisoned is not None and poisoned[0] == info.uid:
                self._condition(plan, info, INVALID, poisoned[1])
                continue
            try:  # each pod in its own error boundary: one pod never stops the cycle
                self._submit_one(plan, info, groups)
            except Exception as e:  # noqa: BLE001
                self._poison(plan, [info], e)
        running = self._group_running() if groups else {}
        for gkey, members in sorted(groups.items()):
            ordered = sorted(members, key=lambda p: (p.created, p.key))
            try:
                self._submit_group(plan, gkey, ordered, running.get(gkey, 0))
            except Exception as e:  # noqa: BLE001
                self._poison(plan, ordered, e)

    def _submit_one(self, plan: Plan, info: PodInfo, groups: dict[str, list[PodInfo]]) -> None:
        cp = self.cp
        assert cp is not None
        key = info.key
        why = info.node_affinity and f"{info.node_affinity}; {_INSTEAD}" \
            or self._unplaceable(info)
        if why:
            self._condition(plan, info, INVALID, why)
            return
        leaf, code, detail = self._leaf(info)
        if leaf is None:
            self._condition(plan, info, code, detail)
            return
        if info.queue in self.claim_holds:
            self._condition(plan, info, reasons.OVER_QUOTA, self.claim_holds[info.queue])
            return
        if info.group:
            groups.setdefault(f"{info.namespace}/{info.group}", []).append(info)
        elif key not in self.job_of:
            job = self._new_job(key, info, 1)
            assert job is not None
            try:
                cp.submit(job)
            except BaseException:
                self._drop_job(job)
                raise
            self.jobs[key] = _JobRec(job, [key])
            self.job_of[key] = key

    def _poison(self, plan: Plan, pods: list[PodInfo], e: BaseException) -> None:
        """Pods whose translation or decision raised: a condition, an Event and the metric;
        not tried again until the pod changes."""
        why = (f"gpugov could not decide for this pod ({type(e).__name__}: {e}); fix or "
               "recreate the pod")[:800]
        log.warning("pod %s: %s", ", ".join(p.key for p in pods), why, exc_info=e)
        for info in pods:
            self.errors["pod"] += 1
            self.poisoned[info.key] = (info.uid, why)
            jname = self.job_of.pop(info.key, None)
            rec = self.jobs.get(jname) if jname is not None else None
            if rec is not None and rec.job.status in (PENDING, REJECTED):
                with contextlib.suppress(Exception):
                    self._drop_job(rec.job)
                self.jobs.pop(jname, None)
            self._condition(plan, info, INVALID, why)

    def _group_running(self) -> dict[str, int]:
        """Each PodGroup's members already placed (bound or being bound), counted in one pass
        over the pods (per group it was a pass each: quadratic with many gangs)."""
        out: dict[str, int] = {}
        for p in self.pods.values():
            if p.group and (p.node or p.key in self.inflight) and not p.done:
                gkey = f"{p.namespace}/{p.group}"
                out[gkey] = out.get(gkey, 0) + 1
        return out

    def _submit_group(self, plan: Plan, gkey: str, members: list[PodInfo],
                      bound: int) -> None:
        cp = self.cp
        assert cp is not None
        keys = [m.key for m in members]
        current = {self.job_of.get(k) for k in keys}
        if len(current) == 1 and None not in current:
            jname = current.pop()
            assert jname is not None
            if self.jobs[jname].pods == keys:
                return
        for jname in {j for j in current if j is not None}:  # membership changed: resubmit
            if self.jobs[jname].job.status == PENDING:
                cp.finish(self.jobs[jname].job)
                self._forget(jname)
        need = self.podgroups.get(gkey)
        if need is None:
            for m in members:
                self._condition(plan, m, reasons.GANG, f"PodGroup {gkey} does not exist")
            return
        if bound + len(members) < need:
            for m in members:
                self._condition(plan, m, reasons.GANG,
                                f"{bound + len(members)} of PodGroup {gkey}'s minMember "
                                f"{need} pods exist")
            return
        # inter-pod terms: the gang is placed with its first member's (labels may differ)
        shapes = {dataclasses.replace(self.pod_request(m), name="", pods=None)
                  for m in members}
        if len(shapes) > 1 or len({m.queue for m in members}) > 1:
            for m in members:
                self._condition(plan, m, INVALID, f"the pods of PodGroup {gkey} differ in "
                                "request or queue; a gang needs identical pods in one queue")
            return
        self._job_seq += 1
        jname = f"group:{gkey}#{self._job_seq}"
        job = self._new_job(jname, members[0], len(members))
        assert job is not None
        try:
            cp.submit(job)
        except BaseException:
            self._drop_job(job)
            raise
        self.jobs[jname] = _JobRec(job, keys)
        for k in keys:
            self.job_of[k] = jname

    def _condition(self, plan: Plan, info: PodInfo, code: str, detail: str) -> None:
        msg = condition_message(code or reasons.NOT_TRIED, detail)
        if self.written.get(info.key) == msg:
            return
        self.written[info.key] = msg
        current = info.conditions.get("PodScheduled")
        if current is not None and current[1] == msg:
            return  # already on the pod (written before a restart)
        plan.conditions.append(Condition(info.key, info.namespace, info.name, info.uid,
                                         code, msg))

    # -- what is written back -------------------------------------------------------------------
    def allocation_record(self, info: PodInfo, alloc: Allocation) -> AllocationRecord:
        """The durable record for a placement (docs/contracts.md, `gpugov.io/allocation`):
        what the state charged (`held.allocation_record`)."""
        assert self.cp is not None
        return self.allocation_record_on(info, alloc, self.cp.state.names[alloc.node],
                                         self.cp.state)

    def allocation_record_on(self, info: PodInfo, alloc: Allocation, node_name: str,
                             state: ClusterState | None = None) -> AllocationRecord:
        """`allocation_record` given the node by name and the state it was placed in (the
        extender has no control plane)."""
        node = self.nodes[node_name]
        if info.request is None or not alloc.devices:
            return AllocationRecord(node.name, IsolationLevel.NONE, ())
        req = self.pod_request(info)
        return allocation_record(node, state, alloc.node, req, req.gpu_milli, alloc,
                                 info.request.mode,
                                 compute_stated=info.request.milli is not None,
                                 priority=self.qos_class(info)[0])

    def qos_class(self, info: PodInfo) -> tuple[int | None, str]:
        """The record's in-GPU priority and a warning (`translate.qos_priority`), from the
        pod's priority class as the queue config resolves it (`_pclass`). Derived only where
        the library shares a device between pods (soft slices, time-slice replicas of GPUs or
        MIG instances); elsewhere only an explicit `nvidia.com/priority` is recorded."""
        if info.request is None:
            return None, ""
        explicit = info.request.priority
        cfg = self.build.config
        preemptible = None if cfg is None else self._pclass(cfg, info).preemptible
        try:
            req = self.pod_request(info)
            shared = req.slice_mode in (DeviceMode.SOFT, DeviceMode.TIMESLICE) or \
                req.mig_shared
        except ValueError:
            shared = False
        if explicit is None and not shared:
            return None, ""
        return qos_priority(explicit, preemptible, info.trust)

    def _queue_status(self) -> dict[str, dict[str, Any]]:
        """Per Queue: usage, fair share (config units), pending and admitted pods — only the
        queues whose status changed since it was last written."""
        cp = self.cp
        assert cp is not None and self.claim_usage is not None
        out = {}
        pending = Counter()
        admitted = Counter()
        for rec in self.jobs.values():
            if rec.job.status in (PENDING, REJECTED):
                pending[rec.job.leaf] += len(rec.pods)
            elif rec.job.status == RUNNING:
                admitted[rec.job.leaf] += len(rec.pods)
        for q, name in enumerate(cp.tree.names):
            leaves = [q] if cp.tree.is_leaf[q] else [i for i in range(len(cp.tree))
                                                      if q in cp.tree.paths[i][1:]]
            status = {
                "usage": _amounts(cp.ledger.usage[q]),
                DRA_USAGE: _amounts(self.claim_usage[q]),  # set by the rebuild
                "fairShare": _amounts(cp.fair[q]),
                "pending": int(sum(pending[i] for i in leaves)),
                "admitted": int(sum(admitted[i] for i in leaves)),
            }
            if self.queue_written.get(name) != status:
                out[name] = status
        return out

    def queue_status_written(self, name: str, status: dict[str, Any]) -> None:
        self.queue_written[name] = status

    # -- reading ------------------------------------------------------------------------------
    def position(self, key: str) -> tuple[int, int] | None:
        """(position, depth) of a pending pod's job in its queue, 1-based."""
        jname = self.job_of.get(key)
        if jname is None or self.cp is None:
            return None
        job = self.jobs[jname].job
        if job.status != PENDING:
            return None
        order = [j for j in self.cp.pending(job.leaf) if j.status == PENDING]
        return order.index(job) + 1, len(order)

    def job_for(self, key: str) -> Job | None:
        jname = self.job_of.get(key)
        return self.jobs[jname].job if jname else None


def _amounts(vec: np.ndarray) -> dict[str, float]:
    """Internal units -> the config's (GPUs, cores, GiB)."""
    return {r: round(float(vec[i]) / SCALE[i], 3) for i, r in enumerate(RESOURCES)}


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _relevant(kind: str, obj: dict[str, Any]) -> Any:
    """The part of an object that changes decisions (our own status writes do not)."""
    meta = obj.get("metadata") or {}
    if kind == "priorityclass":
        return (meta.get("name"), obj.get("value"))
    return obj.get("spec")
