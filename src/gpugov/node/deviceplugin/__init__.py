"""gpugov's device plugin: hands each container exactly the GPU slice the scheduler wrote.

See docs/device-plugin.md. `DevicePluginManager` runs one `ResourcePlugin` (gRPC, kubelet API
v1beta1) per resource; devices come from a `DeviceSource`, pods from a `PodSource`.
"""

from gpugov.node.deviceplugin.manager import DevicePluginManager
from gpugov.node.deviceplugin.pods import ApiPodSource, MemoryPodSource, PodSource
from gpugov.node.deviceplugin.response import ResponseConfig
from gpugov.node.deviceplugin.source import DeviceSource, StaticDeviceSource

__all__ = ["ApiPodSource", "DevicePluginManager", "DeviceSource", "MemoryPodSource", "PodSource",
           "ResponseConfig", "StaticDeviceSource"]
