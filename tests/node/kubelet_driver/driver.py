"""Build and drive the kubelet device-manager test peer (main.go in this folder).

`build()` compiles it on demand (`peer.build_peer`); `KubeletPeer` runs it as its own process
group and talks JSON lines to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubelet_driver.peer import DriverUnavailable, JsonLinePeer, build_peer

__all__ = ["DriverUnavailable", "KubeletPeer", "build"]

HERE = Path(__file__).resolve().parent
SOURCES = ("main.go", "linkname.s")


def build() -> Path:
    """The driver binary, built when missing or when its sources changed."""
    return build_peer(HERE, SOURCES, "kubelet-driver", "device manager")


class KubeletPeer(JsonLinePeer):
    """The kubelet's device manager in a child process, serving kubelet.sock in `plugin_dir`."""

    what = "kubelet driver"

    def __init__(self, binary: Path, plugin_dir: Path, log_path: Path) -> None:
        super().__init__([str(binary), "-dir", str(plugin_dir)], log_path)
        self.binary, self.plugin_dir = binary, plugin_dir

    def capacity(self) -> dict[str, Any]:
        return self.call({"op": "capacity"})

    def admit(self, uid: str, name: str, limits: dict[str, int], namespace: str = "default",
              container: str = "main") -> dict[str, Any]:
        return self.call({"op": "admit", "pod": {
            "uid": uid, "name": name, "namespace": namespace,
            "containers": [{"name": container, "limits": limits}]}})

    def admit_pod(self, uid: str, name: str, containers: list[dict[str, Any]],
                  init_containers: list[dict[str, Any]] | None = None,
                  namespace: str = "default") -> dict[str, Any]:
        """A pod of several containers, each `{"name", "limits", "restartPolicy"?}`; the
        answer lists init containers first (`"init": true`), as the kubelet admits them."""
        return self.call({"op": "admit", "pod": {
            "uid": uid, "name": name, "namespace": namespace, "containers": containers,
            "initContainers": init_containers or []}})

    def remove(self, uid: str) -> dict[str, Any]:
        return self.call({"op": "remove", "uid": uid})
