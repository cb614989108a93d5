"""Time one scrape of the dev cluster's SIMULATED exporter (`gpugov.node.synthetic`): build
the devices from node and pod objects and render the series.

    python bench/synthetic_scrape.py [nodes] [gpus_per_node] [pods_per_gpu] [scrapes]
"""

from __future__ import annotations

import statistics
import sys
import time

from gpugov.k8s.annotations import (
    ALLOCATION,
    INVENTORY,
    AllocatedDevice,
    Allocation,
    Inventory,
    InventoryDevice,
    encode_allocation,
    encode_inventory,
)
from gpugov.model.devices import DeviceMode
from gpugov.model.isolation import IsolationLevel
from gpugov.node.synthetic import KWOK, Simulation, devices


def main() -> None:
    n, g, per, scrapes = (int(a) for a in (sys.argv[1:] + ["200", "8", "4", "20"][len(
        sys.argv[1:]):]))
    nodes, pods = [], []
    for i in range(n):
        inv = Inventory(tuple(InventoryDevice(k, f"GPU-{i}-{k}", "A100-SXM4-80GB", 81920,
                                              DeviceMode.SOFT) for k in range(g)))
        nodes.append({"metadata": {"name": f"n{i}", "annotations": {
            KWOK: "fake", INVENTORY: encode_inventory(inv)}}})
        for k in range(g):
            for j in range(per):
                rec = Allocation(f"n{i}", IsolationLevel.SOFT, (AllocatedDevice(
                    k, DeviceMode.SOFT, 200, 10000, uuid=f"GPU-{i}-{k}"),))
                pods.append({"metadata": {"name": f"p{i}-{k}-{j}", "namespace": "ns",
                                          "uid": f"u{i}-{k}-{j}",
                                          "annotations": {ALLOCATION: encode_allocation(rec)}},
                             "spec": {"nodeName": f"n{i}"}, "status": {"phase": "Running"}})
    sim = Simulation()
    times, size = [], 0
    for s in range(scrapes):
        t0 = time.perf_counter()
        body = sim.render(devices(nodes, pods), now=float(s))
        times.append(time.perf_counter() - t0)
        size = len(body)
    print(f"{n} nodes x {g} GPUs, {len(pods)} pods: scrape median "
          f"{statistics.median(times) * 1000:.1f} ms (min {min(times) * 1000:.1f}, "
          f"max {max(times) * 1000:.1f}), {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
