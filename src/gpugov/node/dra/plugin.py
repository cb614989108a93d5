"""The DRA kubelet plugin's gRPC servers: registration through the plugin watcher and
NodePrepareResources / NodeUnprepareResources (kubelet DRA API v1, advertised "v1.DRAPlugin").

Registration: a `pluginregistration.Registration` server on
`<registry dir>/gpu.gpugov.io-reg.sock` (the kubelet watches `/var/lib/kubelet/plugins_registry`
and calls GetInfo), naming the DRA socket `<plugin dir>/dra.sock`
(`/var/lib/kubelet/plugins/gpu.gpugov.io/`). The kubelet's watcher finds the socket again when
it restarts, so the plugin re-registers without doing anything.

Prepare is idempotent: a claim once prepared is remembered in `<state dir>/dra/<uid>.json`
(surviving plugin and kubelet restarts) and answered from there — the kubelet prepares again
after a restart that lost its checkpoint, and the same devices and CDI spec come back. The
record is written before the files it names, so whatever prepare left is named by a record.
Each claim fails alone: its error goes into its own entry of the answer.

What the kubelet never unprepares (a lost checkpoint, a claim force-deleted while the node was
down) is swept at start and every `sweep_s` seconds once the claim is gone from the API
(`sweep.py` says the rule), with the same removal steps as unprepare under the same per-claim
lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import grpc

from gpugov.k8s.annotations import Inventory
from gpugov.k8s.dra.slices import DRIVER, Features
from gpugov.node.dra.prepare import (
    CONTAINER_REGION_DIR,
    NodePaths,
    Prepared,
    PrepareError,
    build,
)
from gpugov.node.dra.records import (
    RecordError,
    own_boards,
    read_record,
    record_path,
    remove_claim_files,
)
from gpugov.node.dra.sweep import (
    MAX_READ_FAILURES,
    READ_TIMEOUT_S,
    SWEEP_S,
    SweepReport,
    SweepStats,
    Verdict,
    verdict,
)
from gpugov.node.proto import dra_v1_pb2 as pb
from gpugov.node.proto import dra_v1_pb2_grpc as pb_grpc
from gpugov.node.proto import pluginregistration_pb2 as reg_pb
from gpugov.node.proto import pluginregistration_pb2_grpc as reg_grpc

log = logging.getLogger(__name__)

SERVICE = "v1.DRAPlugin"
PLUGIN_TYPE = "DRAPlugin"


class ClaimSource(Protocol):
    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ResourceClaim object; None only when the API answers 404 (the sweep removes a
        claim's files on None), any other failure raises."""

    async def preemptible(self, claim: dict[str, Any]) -> bool | None:
        """Whether any pod the claim is reserved for has a preemptible priority class
        (gpugov's PriorityPolicy); None when that cannot be read (counts as preemptible)."""


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class Registration(reg_grpc.RegistrationServicer):
    """What the kubelet's plugin watcher asks: who we are and where the DRA service is."""

    def __init__(self, endpoint: Path) -> None:
        self.endpoint = endpoint
        self.status: tuple[bool, str] | None = None

    async def GetInfo(self, request: reg_pb.InfoRequest, context: Any) -> reg_pb.PluginInfo:
        return reg_pb.PluginInfo(type=PLUGIN_TYPE, name=DRIVER, endpoint=str(self.endpoint),
                                 supported_versions=[SERVICE])

    async def NotifyRegistrationStatus(self, request: reg_pb.RegistrationStatus, context: Any
                                       ) -> reg_pb.RegistrationStatusResponse:
        self.status = (request.plugin_registered, request.error)
        if not request.plugin_registered:
            log.error("the kubelet refused the DRA plugin: %s", request.error)
        return reg_pb.RegistrationStatusResponse()


class DraPlugin(pb_grpc.DRAPluginServicer):
    """The node's `gpu.gpugov.io` kubelet plugin."""

    def __init__(self, node: str, inventory: Callable[[], Inventory], features: Features,
                 paths: NodePaths, claims: ClaimSource, plugin_dir: Path,
                 registry_dir: Path, sweep_s: float | None = SWEEP_S,
                 read_timeout_s: float = READ_TIMEOUT_S) -> None:
        """`sweep_s`: seconds between sweeps of gone claims' files (the first at start);
        None: no sweeping task (`sweep()` can still be called)."""
        self.node, self.inventory, self.features = node, inventory, features
        self.paths, self.claims = paths, claims
        self.socket = plugin_dir / "dra.sock"
        self.reg_socket = registry_dir / f"{DRIVER}-reg.sock"
        self.registration = Registration(self.socket)
        self._servers: list[grpc.aio.Server] = []
        self._locks: dict[str, asyncio.Lock] = {}
        self.state = paths.state_dir / "dra"
        self.sweep_s, self.read_timeout_s = sweep_s, read_timeout_s
        self.sweep_stats = SweepStats()
        self._sweeper: asyncio.Task | None = None
        self._bad_seen: set[tuple[str, int, int]] = set()

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Serve the DRA API, then the registration socket (the kubelet dials it at once)."""
        self.state.mkdir(parents=True, exist_ok=True)
        self.paths.cdi_dir.mkdir(parents=True, exist_ok=True)
        if self.paths.library is not None:
            _atomic_write(self.paths.preload_file, "/usr/local/gpugov/lib/libgpugov.so\n")
        for path, add in ((self.socket, lambda s: pb_grpc.add_DRAPluginServicer_to_server(
                self, s)), (self.reg_socket, lambda s: reg_grpc.add_RegistrationServicer_to_server(
                self.registration, s))):
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            server = grpc.aio.server()
            add(server)
            server.add_insecure_port(f"unix://{path}")
            await server.start()
            self._servers.append(server)
        if self.sweep_s is not None:
            self._sweeper = asyncio.create_task(self._sweep_loop())

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        for server in reversed(self._servers):
            await server.stop(grace=1)
        self._servers.clear()
        for path in (self.reg_socket, self.socket):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    # ---------------------------------------------------------------- prepare
    def _record(self, uid: str) -> Path:
        return record_path(self.state, uid)

    async def _prepare_one(self, claim: pb.Claim) -> pb.NodePrepareResourceResponse:
        lock = self._locks.setdefault(claim.uid, asyncio.Lock())
        async with lock:
            record = self._record(claim.uid)
            if record.exists():
                try:
                    prepared = read_record(record)
                except RecordError as e:  # derived state: built again from the claim
                    log.warning("prepare %s/%s: %s; preparing it again", claim.namespace,
                                claim.name, e)
                else:
                    self._materialize(prepared)  # the runtime's folder may have been cleaned
                    return self._answer(prepared)
            obj = await self.claims.get_claim(claim.namespace, claim.name)
            if obj is None:
                raise PrepareError(f"ResourceClaim {claim.namespace}/{claim.name} not found")
            uid = (obj.get("metadata") or {}).get("uid")
            if uid != claim.uid:
                raise PrepareError(f"ResourceClaim {claim.namespace}/{claim.name} has UID "
                                   f"{uid}, not {claim.uid} (deleted and created again)")
            ask = getattr(self.claims, "preemptible", None)  # None: counts as preemptible
            prepared = build(obj, self.node, self.inventory(), self.features, self.paths,
                             await ask(obj) if ask is not None else None)
            # the record first: a prepare that fails half-way leaves only files a record
            # names (the sweep and unprepare remove them; a retry writes them again)
            _atomic_write(record, prepared.to_json())
            self._materialize(prepared)
            return self._answer(prepared)

    def _materialize(self, prepared: Prepared) -> None:
        """Write the claim's region files, board files and CDI spec (again: idempotent)."""
        edits = prepared.spec.get("devices", [{}])[0].get("containerEdits", {})
        if any(m.get("containerPath") == CONTAINER_REGION_DIR
               for m in edits.get("mounts", [])):
            region = self.paths.region_dir(prepared.namespace, prepared.name, prepared.uid)
            region.mkdir(parents=True, exist_ok=True)
            _atomic_write(region / "devices", "".join(u + "\n" for u in prepared.uuids))
            # the exporter's attribution: which pods use the claim (name, UID per line)
            _atomic_write(region / "pods", "".join(f"{n} {u}\n" for n, u in prepared.pods))
        _touch(own_boards(self.paths, prepared)[0])
        _atomic_write(self.paths.spec_file(prepared.uid), _json(prepared.spec))

    @staticmethod
    def _answer(prepared: Prepared) -> pb.NodePrepareResourceResponse:
        return pb.NodePrepareResourceResponse(devices=[
            pb.Device(request_names=[d["request"]], pool_name=d["pool"],
                      device_name=d["device"], cdi_device_ids=d["cdi"])
            for d in prepared.devices])

    async def NodePrepareResources(self, request: pb.NodePrepareResourcesRequest,
                                   context: Any) -> pb.NodePrepareResourcesResponse:
        out = pb.NodePrepareResourcesResponse()
        for claim in request.claims:
            try:
                out.claims[claim.uid].CopyFrom(await self._prepare_one(claim))
            except PrepareError as e:
                log.warning("prepare %s/%s: %s", claim.namespace, claim.name, e)
                out.claims[claim.uid].CopyFrom(pb.NodePrepareResourceResponse(
                    error=f"gpugov: {e}"))
            except Exception as e:  # noqa: BLE001 - one claim's failure never ends the call
                log.exception("prepare %s/%s", claim.namespace, claim.name)
                out.claims[claim.uid].CopyFrom(pb.NodePrepareResourceResponse(
                    error=f"gpugov: internal error: {type(e).__name__}: {e}"))
        return out

    async def NodeUnprepareResources(self, request: pb.NodeUnprepareResourcesRequest,
                                     context: Any) -> pb.NodeUnprepareResourcesResponse:
        out = pb.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            try:
                async with self._locks.setdefault(claim.uid, asyncio.Lock()):
                    self._remove(claim.namespace, claim.name, claim.uid)
                self._locks.pop(claim.uid, None)
                out.claims[claim.uid].CopyFrom(pb.NodeUnprepareResourceResponse())
            except OSError as e:
                out.claims[claim.uid].CopyFrom(pb.NodeUnprepareResourceResponse(
                    error=f"gpugov: {e}"))
        return out

    # ---------------------------------------------------------------- removal and sweep
    def _remove(self, namespace: str, name: str, uid: str) -> None:
        """Unprepare's steps, shared with the sweep; the caller holds the claim's lock. A
        record that cannot be read still lets the spec, region and record go (its board
        files cannot be known: logged)."""
        record = self._record(uid)
        prepared: Prepared | None = None
        if record.exists() or record.is_symlink():
            try:
                prepared = read_record(record)
            except RecordError as e:
                log.warning("claim %s/%s (uid %s): %s; its board files, if any, stay",
                            namespace, name, uid, e)
        left = remove_claim_files(self.paths, record, namespace, name, uid, prepared)
        if left:
            log.warning("claim %s/%s (uid %s): its record names board paths that are not "
                        "its own, left in place: %s", namespace, name, uid, left[:8])

    async def sweep(self) -> SweepReport:
        """One pass over the records: remove the files of each claim the API says is gone
        (`sweep.verdict`), keep the rest; a record that cannot be read is skipped alone."""
        report = SweepReport()
        try:
            entries = sorted(p for p in self.state.iterdir()
                             if p.suffix == ".json" and not p.name.startswith("."))
        except FileNotFoundError:
            entries = []
        failures = 0  # API reads failed in a row: past MAX_READ_FAILURES, stop asking
        for path in entries:
            try:
                prepared = read_record(path)
            except RecordError as e:
                report.bad.append((str(path), str(e)))
                self._report_bad(path, e)
                continue
            if failures >= MAX_READ_FAILURES:
                report.unknown.append((prepared.namespace, prepared.name, prepared.uid))
                continue
            failures = failures + 1 if not await self._sweep_one(path, prepared, report) \
                else 0
        if failures >= MAX_READ_FAILURES:
            log.warning("sweep: %d API reads failed in a row: the other claims were not "
                        "asked this pass (all kept)", failures)
        self.sweep_stats.add(report)
        if report.swept or report.unknown or report.bad:
            log.info("sweep of gone claims: %d swept, %d kept, %d not decided (API), %d "
                     "unreadable record(s)", len(report.swept), len(report.kept),
                     len(report.unknown), len(report.bad))
        return report

    async def _sweep_one(self, path: Path, prepared: Prepared, report: SweepReport) -> bool:
        """False when the API could not be read (the claim is kept)."""
        ns, name, uid = prepared.namespace, prepared.name, prepared.uid
        key = (ns, name, uid)
        lock = self._locks.setdefault(uid, asyncio.Lock())
        async with lock:
            if not path.exists():  # unprepared meanwhile
                return True
            try:
                obj = await asyncio.wait_for(self.claims.get_claim(ns, name),
                                             self.read_timeout_s)
            except Exception as e:  # noqa: BLE001 - any failure to read keeps the files
                report.unknown.append(key)
                log.warning("sweep: claim %s/%s (uid %s) kept: the API read failed: %s",
                            ns, name, uid, _why(e))
                return False
            v, why = verdict(obj, uid)
            if v is Verdict.LIVE:
                report.kept.append(key)
                return True
            if v is Verdict.UNKNOWN:
                report.unknown.append(key)
                log.warning("sweep: claim %s/%s (uid %s) kept: %s", ns, name, uid, why)
                return True
            try:
                self._remove(ns, name, uid)
            except OSError as e:
                self.sweep_stats.failed += 1
                log.warning("sweep: claim %s/%s (uid %s) is gone (%s) but its files could "
                            "not all be removed: %s", ns, name, uid, why, e)
                return True
            report.swept.append(key)
            log.info("sweep: claim %s/%s (uid %s) is gone (%s): removed its record, CDI "
                     "spec, region folder and QoS board files", ns, name, uid, why)
        self._locks.pop(uid, None)
        return True

    def _report_bad(self, path: Path, e: RecordError) -> None:
        """Warn once per unreadable record file (as long as it does not change)."""
        try:
            st = path.lstat()
            key = (path.name, st.st_size, st.st_mtime_ns)
        except OSError:
            key = (path.name, -1, -1)
        if key in self._bad_seen:
            log.debug("sweep: skipped %s", e)
            return
        if len(self._bad_seen) < 4096:
            self._bad_seen.add(key)
        log.warning("sweep: skipped (left in place, nothing of it removed): %s", e)

    async def _sweep_loop(self) -> None:
        assert self.sweep_s is not None
        while True:
            try:
                await self.sweep()
            except Exception:  # noqa: BLE001 - the next pass tries again
                log.exception("sweep of gone claims failed; the next in %s s", self.sweep_s)
            await asyncio.sleep(self.sweep_s)


def _why(e: BaseException) -> str:
    if isinstance(e, TimeoutError):
        return "timed out"
    status = getattr(e, "status", None)
    text = f"{type(e).__name__}" + (f" (HTTP {status})" if status is not None else "")
    detail = str(getattr(e, "reason", "") or e)[:200]
    return f"{text}: {detail}" if detail else text


def _touch(boards: list[Path]) -> None:
    """Create the claim's QoS board files (empty: the library fills its entries)."""
    for board in boards:
        board.parent.mkdir(parents=True, exist_ok=True)
        board.touch()


def _json(obj: Any) -> str:
    import json

    return json.dumps(obj, indent=1, sort_keys=True) + "\n"
