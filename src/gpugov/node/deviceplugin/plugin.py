"""One device plugin gRPC server per extended resource (kubelet device plugin API v1beta1).

Serves `DevicePlugin` on `<plugin dir>/gpugov-<name>.sock`, registers it on the kubelet's
`kubelet.sock`, streams the device list (with health) on ListAndWatch, answers
GetPreferredAllocation and Allocate through `handshake`. Bad input (a corrupt annotation, an
allocation for another node, a pod missing) fails that one Allocate with a message the kubelet
shows in the pod's UnexpectedAdmissionError; it is logged and counted, and the server goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import grpc
from prometheus_client import Counter, Histogram

from gpugov.k8s.annotations import ALLOCATED, ContainerClaim, Inventory, encode_allocated
from gpugov.model.devices import DeviceMode
from gpugov.node.deviceplugin.handshake import (
    Candidate,
    candidates,
    fits_next,
    held_keys,
    matching,
    next_step,
    preferred_ids,
    repeated,
)
from gpugov.node.deviceplugin.pods import PodSource
from gpugov.node.deviceplugin.resources import PluginDevice, socket_name
from gpugov.node.deviceplugin.response import ResponseConfig, container_response
from gpugov.node.proto import deviceplugin_pb2 as pb
from gpugov.node.proto import deviceplugin_pb2_grpc as pb_grpc

log = logging.getLogger("gpugov.deviceplugin")

VERSION = "v1beta1"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
CLAIM_ATTEMPTS = 8  # re-lists after conflicts before an Allocate gives up

ALLOCATIONS = Counter("gpugov_deviceplugin_allocations_total",
                      "Allocate calls by resource and outcome (ok, reclaimed, no_match, "
                      "unknown_device, conflict, error)", ["resource", "outcome"])

CONFLICTS = Counter("gpugov_deviceplugin_claim_conflicts_total",
                    "Claims refused for a stale resourceVersion (another Allocate won the pod)",
                    ["resource"])
SCRUBS = Counter("gpugov_deviceplugin_scrubs_total",
                 "Whole GPUs / MIG instances zeroed before another tenant got them, by outcome",
                 ["resource", "outcome"])
SCRUB_SECONDS = Histogram("gpugov_deviceplugin_scrub_seconds",
                          "Time to zero a device's free memory before a handover", ["resource"],
                          buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 300))


class AllocateError(Exception):
    """An Allocate that cannot be served; the message reaches the pod's admission error."""

    def __init__(self, outcome: str, message: str) -> None:
        self.outcome = outcome
        super().__init__(message)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ResourcePlugin(pb_grpc.DevicePluginServicer):
    """The device plugin of one resource (e.g. `nvidia.com/gpu`) on one node."""

    def __init__(self, resource: str, node: str, plugin_dir: Path, pods: PodSource,
                 inventory: Callable[[], Inventory], cfg: ResponseConfig) -> None:
        self.resource, self.node, self.plugin_dir = resource, node, plugin_dir
        self.pods, self.inventory, self.cfg = pods, inventory, cfg
        self.devices: dict[str, PluginDevice] = {}
        self._version = 0
        self._changed = asyncio.Event()
        self._server: grpc.aio.Server | None = None

    @property
    def socket(self) -> Path:
        return self.plugin_dir / socket_name(self.resource)

    # ------------------------------------------------------------------ lifecycle
    def set_devices(self, devices: list[PluginDevice]) -> None:
        """New device list or health; open ListAndWatch streams send it at once."""
        new = {d.id: d for d in devices}
        if [(d.id, d.healthy) for d in new.values()] == [
                (d.id, d.healthy) for d in self.devices.values()]:
            self.devices = new
            return
        self.devices = new
        self._version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def start(self) -> None:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        server = grpc.aio.server()
        pb_grpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket}")
        await server.start()
        self._server = server
        log.info("serving %s on %s", self.resource, self.socket)

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=0.2)
            self._server = None
        self.socket.unlink(missing_ok=True)

    async def register(self, kubelet_socket: Path) -> None:
        """Register on the kubelet; raises grpc.aio.AioRpcError when it refuses."""
        async with grpc.aio.insecure_channel(f"unix://{kubelet_socket}") as channel:
            stub = pb_grpc.RegistrationStub(channel)
            await stub.Register(pb.RegisterRequest(
                version=VERSION, endpoint=self.socket.name, resource_name=self.resource,
                options=self._options()), timeout=10)
        log.info("registered %s with the kubelet", self.resource)

    @staticmethod
    def _options() -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(pre_start_required=False,
                                      get_preferred_allocation_available=True)

    # ------------------------------------------------------------------ RPCs
    async def GetDevicePluginOptions(self, request: pb.Empty, context) -> pb.DevicePluginOptions:
        return self._options()

    async def ListAndWatch(self, request: pb.Empty,
                           context) -> AsyncIterator[pb.ListAndWatchResponse]:
        while True:
            changed = self._changed
            yield pb.ListAndWatchResponse(devices=[
                pb.Device(ID=d.id, health=HEALTHY if d.healthy else UNHEALTHY,
                          topology=None if d.numa is None else pb.TopologyInfo(
                              nodes=[pb.NUMANode(ID=d.numa)]))
                for d in self.devices.values()])
            await changed.wait()

    async def PreStartContainer(self, request, context) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()

    async def GetPreferredAllocation(self, request: pb.PreferredAllocationRequest,
                                     context) -> pb.PreferredAllocationResponse:
        cands: list[Candidate] = []
        try:
            pods = await self.pods.list_pods(self.node)
            cands, _ = candidates(pods, self.node, self.resource, self.inventory(),
                                  set(self.devices))
        except Exception as exc:  # the API being down must not stop the topology answer
            log.warning("GetPreferredAllocation %s: cannot list pods (%s); topology only",
                        self.resource, exc)
        out = pb.PreferredAllocationResponse()
        for creq in request.container_requests:
            avail = [self.devices[i] for i in creq.available_deviceIDs if i in self.devices]
            ids = preferred_ids(cands, avail, list(creq.must_include_deviceIDs),
                                creq.allocation_size)
            out.container_responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return out

    async def Allocate(self, request: pb.AllocateRequest, context) -> pb.AllocateResponse:
        out = pb.AllocateResponse()
        for creq in request.container_requests:
            ids = list(creq.devices_ids)
            try:
                resp, outcome = await self._allocate(ids)
            except AllocateError as exc:
                ALLOCATIONS.labels(self.resource, exc.outcome).inc()
                log.error("Allocate %s %s refused: %s", self.resource, ids, exc)
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"gpugov: {exc}")
            except Exception as exc:  # never crash the server on one bad request
                ALLOCATIONS.labels(self.resource, "error").inc()
                log.exception("Allocate %s %s failed", self.resource, ids)
                await context.abort(grpc.StatusCode.INTERNAL, f"gpugov: internal error: {exc}")
            ALLOCATIONS.labels(self.resource, outcome).inc()
            out.container_responses.append(resp)
        return out

    async def _allocate(self, ids: list[str]) -> tuple[pb.ContainerAllocateResponse, str]:
        unknown = [i for i in ids if i not in self.devices]
        if unknown:
            raise AllocateError("unknown_device", f"device IDs {unknown} are not {self.resource} "
                                f"devices of node {self.node}")
        request = [self.devices[i] for i in ids]
        for _ in range(CLAIM_ATTEMPTS):
            try:
                pods = await self.pods.list_pods(self.node)
            except Exception as exc:
                raise AllocateError("error", f"cannot list the pods of node {self.node}: "
                                    f"{exc}") from None
            cands, rejected = candidates(pods, self.node, self.resource, self.inventory(),
                                         set(self.devices))
            found = matching(cands, request)
            if not found:
                raise AllocateError("no_match", self._no_match(ids, request, cands, rejected))
            for c in found:
                container, fresh = _container(c, request)
                resp = self._response(c, request, container)  # fails before any claim
                if not fresh:  # the kubelet allocates the same container again
                    await self._scrub(c, request)  # a scrub that failed before is retried
                    return resp, "reclaimed"
                claims = list(c.all_claims)
                if container is not None:  # one of several containers: record which
                    claims.append(ContainerClaim(container, self.resource, tuple(sorted(ids))))
                value = encode_allocated(sorted(set(c.allocated_ids) | set(ids)), _now(),
                                         claims or None)
                try:
                    ok = await self.pods.patch_annotations(c.namespace, c.name,
                                                           c.resource_version, {ALLOCATED: value})
                except LookupError:
                    continue  # deleted since the list: try the next one
                if ok:
                    log.info("Allocate %s %s -> pod %s%s", self.resource, ids, c.ref,
                             f" container {container}" if container else "")
                    await self._scrub(c, request)
                    return resp, "ok"
                CONFLICTS.labels(self.resource).inc()
                log.info("claim of %s for %s lost a race (stale resourceVersion); next",
                         c.ref, ids)
            # every match changed since we listed: another Allocate claimed it; list again
        raise AllocateError("conflict", f"could not claim a pod for {ids} after "
                            f"{CLAIM_ATTEMPTS} attempts (each candidate changed meanwhile)")

    async def _scrub(self, c: Candidate, request: list[PluginDevice]) -> None:
        """Zero a whole GPU or MIG instance before a pod of another tenant (namespace) gets
        it: memory an exited process left is not scrubbed by anyone else, and such pods run
        without the enforcement library. Shared devices (soft, time-slice, MPS) are not:
        other tenants' pods may be using them, and the library scrubs what they free. A
        failed scrub refuses the Allocate (the container does not start on another tenant's
        data); the kubelet's retry scrubs again."""
        handover = self.cfg.handover
        if handover is None:
            return
        for d in request:
            if d.mode not in (DeviceMode.EXCLUSIVE, DeviceMode.MIG):
                continue
            address = d.mig_uuid if d.mig_uuid else d.index
            result = await asyncio.to_thread(handover.before_handover, d.key, c.namespace,
                                             self.cfg.scrub_cuda_lib, address)
            if result is None:
                continue
            SCRUBS.labels(self.resource, "ok" if result.ok else "failed").inc()
            if not result.ok:
                raise AllocateError("scrub_failed", f"device {d.key} could not be scrubbed "
                                    f"before pod {c.ref} of another tenant gets it: "
                                    f"{result.error or 'nothing zeroed'}")
            SCRUB_SECONDS.labels(self.resource).observe(result.seconds)
            log.info("scrubbed %s (%d bytes, %.2f s) before handing it to %s", d.key,
                     result.bytes, result.seconds, c.ref)

    def _response(self, c: Candidate, request: list[PluginDevice],
                  container: str | None = None) -> pb.ContainerAllocateResponse:
        try:
            caps = dict(c.container_capabilities).get(container or "", c.driver_capabilities)
            return container_response(request, dict(c.slices), self.cfg,
                                      (c.namespace, c.name, c.uid), c.trust_tier,
                                      caps, container=container)
        except (ValueError, OSError) as exc:
            raise AllocateError("error", f"pod {c.ref}: {exc}") from None

    def _no_match(self, ids: list[str], request: list[PluginDevice], cands: list[Candidate],
                  rejected: list) -> str:
        keys = sorted(d.key for d in request)
        msg = (f"no pod bound to node {self.node} has a gpugov.io/allocation for exactly "
               f"{self.resource} devices {keys} (kubelet IDs {sorted(ids)})")
        waiting = [f"{c.ref} wants {list(c.wanted)}" for c in cands
                   if not c.claimed_ids and not c.multi]
        for c in cands:
            step = next_step(c)
            if step is not None:
                held = sorted(held_keys(c))
                waiting.append(f"{c.ref} container {step.name!r} wants {step.size} of "
                               f"{list(c.wanted)}" + (f" except {held}" if held else ""))
        if waiting:
            msg += "; waiting pods: " + ", ".join(waiting[:5])
        if rejected:
            msg += "; pods with unusable annotations: " + "; ".join(
                f"{r.pod}: {r.reason}" for r in rejected[:5])
        return msg


def _container(c: Candidate, request: list[PluginDevice]) -> tuple[str | None, bool]:
    """(which of the pod's several GPU containers this Allocate is for, None for a pod with
    one; whether it is a fresh claim rather than the kubelet repeating one)."""
    if not c.multi:
        return None, not c.claimed_ids
    if fits_next(c, request):
        step = next_step(c)
        assert step is not None
        return step.name, True
    again = repeated(c, request)
    return (again.name if again is not None else None), False

