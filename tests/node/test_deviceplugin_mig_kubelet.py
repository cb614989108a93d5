"""Several MIG instances and time-sliced MIG replicas through the kubelet's own device manager
(k8s.io/kubernetes pkg/kubelet/cm/devicemanager v1.34.2): the kubelet is steered to exactly
the instances the scheduler recorded, and a replica's container is capped at its memory."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from kubelet_driver.scenario import mig, mig_uuid, scheduled_pod, uuid  # noqa: E402
from test_deviceplugin_kubelet import Node, envs, ids, run, until  # noqa: E402

from gpugov.k8s.annotations import (  # noqa: E402
    AllocatedDevice,
    Inventory,
    InventoryDevice,
    MigInstance,
)
from gpugov.model.devices import DeviceMode  # noqa: E402

H100 = "H100-SXM5-80GB"


def node() -> Inventory:
    """GPU 0: seven whole 1g.10gb; GPU 1: 3g.40gb@0, 2g.20gb@4 and 1g.10gb@6 time-sliced ×4."""
    def dev(i: int, mig_: tuple[MigInstance, ...]) -> InventoryDevice:
        return InventoryDevice(index=i, uuid=uuid(i), model=H100, memory_mib=81559,
                               mode=DeviceMode.MIG, mig=mig_)
    return Inventory((
        dev(0, tuple(MigInstance("1g.10gb", s, mig_uuid(0, s)) for s in range(7))),
        dev(1, (MigInstance("3g.40gb", 0, mig_uuid(1, 0)),
                MigInstance("2g.20gb", 4, mig_uuid(1, 4)),
                MigInstance("1g.10gb", 6, mig_uuid(1, 6), replicas=4)))))


def test_two_instances_and_a_replica_go_where_the_scheduler_put_them(
        kubelet_driver_binary: Path, tmp_path: Path) -> None:
    async def body(n: Node, mgr, source) -> None:
        cap = await until(n.peer, lambda c: "nvidia.com/mig-1g.10gb.shared" in c["capacity"])
        assert cap["capacity"]["nvidia.com/mig-1g.10gb.shared"] == 4
        assert cap["capacity"]["nvidia.com/mig-1g.10gb"] == 7  # GPU 1's is never whole
        n.pods.put(scheduled_pod("two", [mig(0, "1g.10gb", 2), mig(0, "1g.10gb", 5)]))
        result = await n.admit("two", {"nvidia.com/mig-1g.10gb": 2})
        assert result["ok"], result
        assert sorted(ids(result, "nvidia.com/mig-1g.10gb")) == [mig_uuid(0, 2), mig_uuid(0, 5)]
        assert envs(result)["NVIDIA_VISIBLE_DEVICES"] == f"{mig_uuid(0, 2)},{mig_uuid(0, 5)}"
        replica = AllocatedDevice(1, DeviceMode.MIG, 35, 2000, uuid(1), "1g.10gb", 6,
                                  mig_uuid(1, 6), mig_replicas=4)
        n.pods.put(scheduled_pod("rep", [replica]))
        result = await n.admit("rep", {"nvidia.com/mig-1g.10gb.shared": 1})
        assert result["ok"], result
        (got,) = ids(result, "nvidia.com/mig-1g.10gb.shared")
        assert got.startswith(mig_uuid(1, 6) + "::")
        e = envs(result)
        assert e["NVIDIA_VISIBLE_DEVICES"] == mig_uuid(1, 6)
        assert e["GPUGOV_MEMORY_LIMIT_0"] == "2000Mi" and "GPUGOV_CORE_LIMIT_0" not in e

    run(kubelet_driver_binary, tmp_path, node(), body)
