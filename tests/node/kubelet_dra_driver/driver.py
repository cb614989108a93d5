"""Build and drive the kubelet DRA-manager test peer (main.go in this folder).

Built on demand into ${XDG_CACHE_HOME:-~/.cache}/gpugov/k8s-v1.34.2/bin/kubelet-dra-driver by the
same recipe as the device-manager peer (`kubelet_driver.peer.build_peer`). `KubeletDraPeer`
runs it as its own process group and talks JSON lines to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubelet_driver.peer import DriverUnavailable, JsonLinePeer, build_peer

__all__ = ["DriverUnavailable", "KubeletDraPeer", "build"]

HERE = Path(__file__).resolve().parent
SOURCES = ("main.go",)
NAME = "kubelet-dra-driver"


def build() -> Path:
    """The driver binary, built when missing or when its sources changed."""
    return build_peer(HERE, SOURCES, NAME, "DRA manager")


class KubeletDraPeer(JsonLinePeer):
    """The kubelet's DRA manager + plugin watcher in a child process."""

    what = "kubelet DRA driver"
    start_timeout = 60.0

    def __init__(self, binary: Path, registry: Path, state: Path, kubeconfig: Path,
                 node: str, log_path: Path) -> None:
        super().__init__([str(binary), "-registry", str(registry), "-state", str(state),
                          "-kubeconfig", str(kubeconfig), "-node", node, "-v", "4"], log_path)

    def registered(self, driver: str) -> bool:
        return bool(self.call({"op": "registered", "driver": driver}).get("registered"))

    def prepare(self, namespace: str, name: str) -> dict[str, Any]:
        return self.call({"op": "prepare", "namespace": namespace, "name": name})

    def unprepare(self, namespace: str, name: str) -> dict[str, Any]:
        return self.call({"op": "unprepare", "namespace": namespace, "name": name})
