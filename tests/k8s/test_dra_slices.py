"""The `gpu.gpugov.io` DRA driver's ResourceSlices and DeviceClasses: built from node
inventories (pure), published to a real v1.34 API server (DRAConsumableCapacity on), and
allocated by the real kube-scheduler's DynamicResources plugin to kwok nodes — by CEL
selectors over gpugov's attributes, and soft slices by consumable capacity."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from gpugov.k8s.annotations import Inventory, MigInstance
from gpugov.k8s.dra.publisher import SlicePublisher, probe_features
from gpugov.k8s.dra.slices import (
    DRIVER,
    MAX_DEVICES_PER_SLICE,
    SLICE_CLASS,
    Features,
    device_classes,
    node_slices,
)
from gpugov.k8s.scheduler.kube import Kube
from gpugov.model.devices import DeviceMode

sys.path.insert(0, str(Path(__file__).parent))
from dra_support import (  # noqa: E402
    claim,
    claim_pod,
    gpu,
    inventory,
    kwok_node,
    request,
    wait_for,
)

ON = Features(consumable_capacity=True)


def _devices(slices: list[dict]) -> dict[str, dict]:
    return {d["name"]: d for s in slices for d in s["spec"]["devices"]}


def test_each_mode_becomes_its_devices_with_attributes_cel_can_read() -> None:
    inv = inventory(
        gpu(0), gpu(1, DeviceMode.SOFT),
        gpu(2, DeviceMode.MIG, mig=(MigInstance("3g.40gb", 4, "MIG-a"),
                                    MigInstance("1g.10gb", 0, "MIG-b"))),
        gpu(3, DeviceMode.TIMESLICE, replicas=3), gpu(4, healthy=False))
    devs = _devices(node_slices("n1", inv, ON, 1))
    assert list(devs) == ["gpu-0", "gpu-1", "gpu-2-mig-1g-10gb-0", "gpu-2-mig-3g-40gb-4",
                          "gpu-3-ts-0", "gpu-3-ts-1", "gpu-3-ts-2"]  # unhealthy gpu 4: none
    whole = devs["gpu-0"]
    assert whole["attributes"]["model"] == {"string": "A100-SXM4-80GB"}
    assert whole["attributes"]["uuid"] == {"string": "GPU-a100-0000"}
    assert whole["attributes"]["nvlinkDomain"] == {"int": 0}
    assert whole["attributes"]["pcieRoot"] == {"string": "pcie-0"}
    assert whole["attributes"]["numaNode"] == {"int": 0}
    assert "allowMultipleAllocations" not in whole
    soft = devs["gpu-1"]
    assert soft["allowMultipleAllocations"] is True
    assert soft["capacity"]["memory"]["value"] == "81920Mi"
    assert soft["capacity"]["compute"]["requestPolicy"]["validRange"]["max"] == "100"
    mig = devs["gpu-2-mig-3g-40gb-4"]
    assert mig["attributes"]["migProfile"] == {"string": "3g.40gb"}
    assert mig["attributes"]["uuid"] == {"string": "MIG-a"}
    assert mig["attributes"]["parentUUID"] == {"string": "GPU-a100-0002"}
    assert mig["capacity"]["compute"] == {"value": "42"}  # 3 of 7 compute slices
    assert devs["gpu-3-ts-1"]["capacity"]["memory"] == {"value": "27306Mi"}
    # without DRAConsumableCapacity a soft GPU is offered whole, never half-described
    off = _devices(node_slices("n1", inv, Features(), 1))["gpu-1"]
    assert "allowMultipleAllocations" not in off and off["attributes"]["sharing"] == \
        {"bool": False}
    assert SLICE_CLASS not in {c["metadata"]["name"] for c in device_classes(Features())}
    assert SLICE_CLASS in {c["metadata"]["name"] for c in device_classes(ON)}


def test_a_large_pool_is_split_into_slices_of_128_devices() -> None:
    inv = Inventory(tuple(gpu(i, DeviceMode.MPS, replicas=48) for i in range(8)))
    slices = node_slices("big", inv, ON, 7)
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 128, 128]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {3}
    assert {s["spec"]["pool"]["generation"] for s in slices} == {7}
    assert len(_devices(slices)) == 8 * 48 <= 3 * MAX_DEVICES_PER_SLICE


async def _kube(plane) -> Kube:
    return await Kube.from_kubeconfig(plane.kubeconfig)


async def _create(kube: Kube, path: str, obj: dict) -> dict:
    status, doc = await kube.request("POST", path, obj)
    assert status in (200, 201), (path, status, doc)
    return doc


async def _nodes(kube: Kube, *nodes: dict) -> None:
    for n in nodes:
        await _create(kube, "/api/v1/nodes", n)


def test_published_slices_are_allocated_by_kube_scheduler_by_cel_and_capacity(
        dra_plane) -> None:
    async def main() -> None:
        kube = await _kube(dra_plane)
        try:
            features = await probe_features(kube)
            assert features.consumable_capacity  # the plane runs with the alpha gate on
            pub = SlicePublisher(kube, features)
            await pub.ensure_classes()
            await _nodes(kube,
                         kwok_node("dra-a", inventory(gpu(0, model="A100-SXM4-80GB"))),
                         kwok_node("dra-h", inventory(
                             gpu(0, model="H100-SXM5-80GB", nvlink=3),
                             gpu(1, DeviceMode.SOFT, model="H100-SXM5-80GB", nvlink=3))))
            for name in ("dra-a", "dra-h"):
                _, node = await kube.request("GET", f"/api/v1/nodes/{name}")
                assert await pub.sync_node(node) == "published"
                assert await pub.sync_node(node) == "unchanged"  # nothing rewritten
            plain = kwok_node("dra-plain", inventory(gpu(0)))
            del plain["metadata"]["labels"]["gpugov.io/dra"]  # the device plugin's node
            await _nodes(kube, plain)
            _, node = await kube.request("GET", "/api/v1/nodes/dra-plain")
            assert "no label gpugov.io/dra=true" in await pub.sync_node(node)
            _, doc = await kube.request("GET", "/apis/resource.k8s.io/v1/resourceslices")
            mine = [s for s in doc["items"] if s["spec"]["driver"] == DRIVER]
            assert {s["spec"]["nodeName"] for s in mine} == {"dra-a", "dra-h"}
            await _create(kube, "/api/v1/namespaces", {"metadata": {"name": "dra1"}})
            ns = "dra1"
            base = "/apis/resource.k8s.io/v1/namespaces/dra1/resourceclaims"
            # a CEL selector on gpugov's attributes: only an H100 in NVLink domain 3 fits
            h100 = (f'device.attributes["{DRIVER}"].model == "H100-SXM5-80GB" && '
                    f'device.attributes["{DRIVER}"].nvlinkDomain == 3 && '
                    f'!device.attributes["{DRIVER}"].sharing')
            await _create(kube, base, claim("whole", ns, [request("g", "gpu.gpugov.io",
                                                                  selector=h100)]))
            # two soft slices (20 GiB / 30 %, 40 GiB / 50 %) share the soft H100
            for i, (mem, pct) in enumerate((("20Gi", "30"), ("40Gi", "50"))):
                await _create(kube, base, claim(f"slice{i}", ns, [request(
                    "s", SLICE_CLASS, capacity={"memory": mem, "compute": pct})]))
            # a third one no longer fits the 30 % compute left
            await _create(kube, base, claim("slice2", ns, [request(
                "s", SLICE_CLASS, capacity={"memory": "1Gi", "compute": "40"})]))
            pods = "/api/v1/namespaces/dra1/pods"
            for name in ("whole", "slice0", "slice1", "slice2"):
                await _create(kube, pods, claim_pod(name, ns, {"gpu": name}))

            async def bound(name: str) -> str:
                _, p = await kube.request("GET", f"{pods}/{name}")
                return p["spec"].get("nodeName") or ""

            assert await wait_for(lambda: bound("whole"), "whole bound") == "dra-h"
            _, c = await kube.request("GET", f"{base}/whole")
            (res,) = c["status"]["allocation"]["devices"]["results"]
            assert (res["driver"], res["pool"], res["device"]) == (DRIVER, "dra-h", "gpu-0")
            for name in ("slice0", "slice1"):
                assert await wait_for(lambda n=name: bound(n), name) == "dra-h"
                _, c = await kube.request("GET", f"{base}/{name}")
                (res,) = c["status"]["allocation"]["devices"]["results"]
                assert res["device"] == "gpu-1" and res.get("shareID")
                assert set(res["consumedCapacity"]) == {"memory", "compute"}
            await asyncio.sleep(2)
            assert await bound("slice2") == ""  # 30 + 50 + 40 > 100: stays pending
            _, c = await kube.request("GET", f"{base}/slice2")
            assert not (c.get("status") or {}).get("allocation")
            # the inventory changes: the pool's generation moves, the old slices go
            _, node = await kube.request("GET", "/api/v1/nodes/dra-a")
            node["metadata"]["annotations"]["gpugov.io/inventory"] = '{"v":1,"devices":7}'
            assert (await pub.sync_node(node)).startswith("withdrawn: gpugov.io/inventory")
            assert "dra-a" in pub.problems
        finally:
            await kube.close()

    asyncio.run(main())


def test_claims_no_device_can_serve_stay_pending_with_a_reason(dra_plane) -> None:
    """Bad claims on gpugov's devices: an unknown DeviceClass, capacity above any device, a
    selector no device matches, a CEL selector naming an attribute gpugov does not publish —
    each pod stays pending with kube-scheduler's reason and no claim is allocated."""
    async def main() -> None:
        kube = await _kube(dra_plane)
        try:
            pub = SlicePublisher(kube, await probe_features(kube))
            await pub.ensure_classes()
            await _nodes(kube, kwok_node("dra-bad", inventory(gpu(0, DeviceMode.SOFT))))
            _, node = await kube.request("GET", "/api/v1/nodes/dra-bad")
            await pub.sync_node(node)
            ns = "dra-bad-input"
            await _create(kube, "/api/v1/namespaces", {"metadata": {"name": ns}})
            base = f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"
            cases = {
                "noclass": request("g", "nope.gpugov.io"),
                "toobig": request("g", SLICE_CLASS, capacity={"memory": "200Gi"}),
                "nomatch": request("g", "gpu.gpugov.io", selector=(
                    f'device.attributes["{DRIVER}"].model == "B300"')),
                "noattr": request("g", "gpu.gpugov.io", selector=(
                    f'device.attributes["{DRIVER}"].flavour == "x"')),
            }
            for name, req in cases.items():
                await _create(kube, base, claim(name, ns, [req]))
                await _create(kube, f"/api/v1/namespaces/{ns}/pods",
                              claim_pod(name, ns, {"gpu": name}))

            async def reasons() -> dict[str, str]:
                _, doc = await kube.request("GET", f"/api/v1/namespaces/{ns}/events")
                got = {e["involvedObject"]["name"]: e.get("message", "") for e in doc["items"]
                       if e.get("reason") == "FailedScheduling"}
                return got if set(got) >= set(cases) else {}

            said = await wait_for(reasons, "FailedScheduling for every bad claim")
            assert "nope.gpugov.io" in said["noclass"], said["noclass"]
            for name in ("toobig", "nomatch"):
                assert "cannot allocate all claims" in said[name], said[name]
            assert "flavour" in said["noattr"] or "cannot allocate" in said["noattr"], said
            for name in cases:
                _, c = await kube.request("GET", f"{base}/{name}")
                assert not (c.get("status") or {}).get("allocation"), name
        finally:
            await kube.close()

    asyncio.run(main())


def test_dra_classes_prints_the_device_classes_to_apply() -> None:
    import yaml
    from typer.testing import CliRunner

    from gpugov.cli import app

    res = CliRunner().invoke(app, ["dra", "classes", "--consumable-capacity"])
    assert res.exit_code == 0, res.output
    docs = list(yaml.safe_load_all(res.output))
    assert [d["metadata"]["name"] for d in docs] == [
        "gpu.gpugov.io", "mig.gpugov.io", "timeslice.gpugov.io", "mps.gpugov.io", SLICE_CLASS]
    assert all(d["apiVersion"] == "resource.k8s.io/v1" and d["kind"] == "DeviceClass"
               for d in docs)
