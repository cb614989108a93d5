"""MIG capability device nodes, switched on: both entry points (`node device-plugin` and
`node run`) build Allocate's answer with `run.response_config`, which, when the devices come
from NVML, gives each MIG container `/dev/nvidia-caps/nvidia-cap<N>` for its GPU and compute
instance (NVML's IDs on the fake NVML, minors from a /proc tree as the driver writes it)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from nvml_fake import A100_80

sys.path.insert(0, str(Path(__file__).parent))
from test_deviceplugin import _caps_tree  # noqa: E402

from gpugov.k8s.annotations import AllocatedDevice, Inventory  # noqa: E402
from gpugov.model.devices import DeviceMode  # noqa: E402
from gpugov.node.deviceplugin.resources import plugin_devices  # noqa: E402
from gpugov.node.deviceplugin.response import container_response  # noqa: E402
from gpugov.node.deviceplugin.run import response_config  # noqa: E402
from gpugov.node.deviceplugin.source import StaticDeviceSource  # noqa: E402
from gpugov.node.nvml.health import HealthTracker  # noqa: E402
from gpugov.node.nvml.source import NvmlDeviceSource  # noqa: E402


def test_an_nvml_backed_plugin_passes_a_mig_instances_capability_nodes(
        node, open_nvml, tmp_path: Path) -> None:
    node.gpu(A100_80)
    node.gpu(A100_80, "mig-mode 1", "gi 9 0")  # 3g.40gb@0
    nv = open_nvml(node)
    source = NvmlDeviceSource(nv, HealthTracker(nv))
    cfg = response_config(tmp_path / "state", source)
    assert cfg.mig_ids is not None
    (dev,) = plugin_devices(source.inventory())["nvidia.com/mig-3g.40gb"]
    gi, ci = cfg.mig_ids(dev.mig_uuid)
    proc = tmp_path / "proc"
    _caps_tree(proc, 1, gi=gi, ci=ci, gi_minor=21, ci_minor=22)
    rec = AllocatedDevice(1, DeviceMode.MIG, 428, 40192, dev.uuid, "3g.40gb", 0, dev.mig_uuid)
    r = container_response([dev], {dev.key: rec}, dataclasses.replace(cfg, proc_root=str(proc)),
                           ("ns", "p", "u"), None)
    paths = {d.container_path for d in r.devices}
    assert {"/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22",
            "/dev/nvidia1"} <= paths
    # the runtime injects devices (--no-device-specs), or a static inventory: none asked
    assert response_config(tmp_path / "state", source, device_specs=False).mig_ids is None
    static = StaticDeviceSource(Inventory(()))
    assert response_config(tmp_path / "state", static).mig_ids is None
