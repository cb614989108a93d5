"""The DRA kubelet plugin's gRPC servers: registration through the plugin watcher and
NodePrepareResources / NodeUnprepareResources (kubelet DRA API v1, advertised "v1.DRAPlugin").

Registration: a `pluginregistration.Registration` server on
`<registry dir>/gpu.gpugov.io-reg.sock` (the kubelet watches `/var/lib/kubelet/plugins_registry`
and calls GetInfo), naming the DRA socket `<plugin dir>/dra.sock`
(`/var/lib/kubelet/plugins/gpu.gpugov.io/`). The kubelet's watcher finds the socket again when
it restarts, so the plugin re-registers without doing anything.

Prepare is idempotent: a claim once prepared is remembered in `<state dir>/dra/<uid>.json`
(surviving plugin and kubelet restarts) and answered from there — the kubelet prepares again
after a restart that lost its checkpoint, and the same devices and CDI spec come back. Each
claim fails alone: its error goes into its own entry of the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
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
from gpugov.node.proto import dra_v1_pb2 as pb
from gpugov.node.proto import dra_v1_pb2_grpc as pb_grpc
from gpugov.node.proto import pluginregistration_pb2 as reg_pb
from gpugov.node.proto import pluginregistration_pb2_grpc as reg_grpc

log = logging.getLogger(__name__)

SERVICE = "v1.DRAPlugin"
PLUGIN_TYPE = "DRAPlugin"


class ClaimSource(Protocol):
    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ResourceClaim object, None when it does not exist."""

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
                 registry_dir: Path) -> None:
        self.node, self.inventory, self.features = node, inventory, features
        self.paths, self.claims = paths, claims
        self.socket = plugin_dir / "dra.sock"
        self.reg_socket = registry_dir / f"{DRIVER}-reg.sock"
        self.registration = Registration(self.socket)
        self._servers: list[grpc.aio.Server] = []
        self._locks: dict[str, asyncio.Lock] = {}
        self.state = paths.state_dir / "dra"

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

    async def stop(self) -> None:
        for server in reversed(self._servers):
            await server.stop(grace=1)
        self._servers.clear()
        for path in (self.reg_socket, self.socket):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    # ---------------------------------------------------------------- prepare
    def _record(self, uid: str) -> Path:
        return self.state / f"{''.join(c if c.isalnum() or c in '-_' else '_' for c in uid)}.json"

    async def _prepare_one(self, claim: pb.Claim) -> pb.NodePrepareResourceResponse:
        lock = self._locks.setdefault(claim.uid, asyncio.Lock())
        async with lock:
            record = self._record(claim.uid)
            if record.exists():
                prepared = Prepared.from_json(record.read_text())
                self._write_spec(prepared)  # the runtime's folder may have been cleaned
                _touch(prepared.boards)
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
            edits = prepared.spec["devices"][0]["containerEdits"]
            if any(m["containerPath"] == CONTAINER_REGION_DIR for m in edits.get("mounts", [])):
                region = self.paths.region_dir(claim.namespace, claim.name, claim.uid)
                region.mkdir(parents=True, exist_ok=True)
                (region / "devices").write_text("".join(u + "\n" for u in prepared.uuids))
                # the exporter's attribution: which pods use the claim (name, UID per line)
                _atomic_write(region / "pods", "".join(f"{n} {u}\n" for n, u in prepared.pods))
            _touch(prepared.boards)
            self._write_spec(prepared)
            _atomic_write(record, prepared.to_json())
            return self._answer(prepared)

    def _write_spec(self, prepared: Prepared) -> None:
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
                    record = self._record(claim.uid)
                    if record.exists():  # its QoS board files
                        for board in Prepared.from_json(record.read_text()).boards:
                            with contextlib.suppress(FileNotFoundError):
                                Path(board).unlink()
                    with contextlib.suppress(FileNotFoundError):
                        self.paths.spec_file(claim.uid).unlink()
                    shutil.rmtree(self.paths.region_dir(claim.namespace, claim.name, claim.uid),
                                  ignore_errors=True)
                    with contextlib.suppress(FileNotFoundError):
                        self._record(claim.uid).unlink()
                self._locks.pop(claim.uid, None)
                out.claims[claim.uid].CopyFrom(pb.NodeUnprepareResourceResponse())
            except OSError as e:
                out.claims[claim.uid].CopyFrom(pb.NodeUnprepareResourceResponse(
                    error=f"gpugov: {e}"))
        return out


def _touch(boards: list[str]) -> None:
    """Create the claim's QoS board files (empty: the library fills its entries)."""
    for board in boards:
        Path(board).parent.mkdir(parents=True, exist_ok=True)
        Path(board).touch()


def _json(obj: Any) -> str:
    import json

    return json.dumps(obj, indent=1, sort_keys=True) + "\n"
