"""Several GPU containers per pod on the node: the plugin's Allocate per container, with a model
of the kubelet's device manager (init containers first, an init container's devices handed on
in any order, a sidecar's kept) driving the real plugin (`ResourcePlugin._allocate`).

Property: whatever the containers and the order the kubelet hands devices on, every container
is admitted, gets only devices of its pod's record, and no device is given to two containers
that run at the same time (two app containers, an app container and a sidecar, an init
container and a sidecar before it); no kubelet ID goes to two pods.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from kubelet_driver.scenario import NODE, gpu, scheduled_pod, soft, whole  # noqa: E402

from gpugov.k8s.annotations import (  # noqa: E402
    ALLOCATED,
    Inventory,
    decode_allocated_containers,
)
from gpugov.k8s.pod_containers import Step, effective, resource_steps  # noqa: E402
from gpugov.model.devices import DeviceMode  # noqa: E402
from gpugov.node.deviceplugin import MemoryPodSource, ResponseConfig  # noqa: E402
from gpugov.node.deviceplugin.handshake import candidates, preferred_ids  # noqa: E402
from gpugov.node.deviceplugin.plugin import AllocateError, ResourcePlugin  # noqa: E402
from gpugov.node.deviceplugin.resources import GPU, plugin_devices  # noqa: E402
from gpugov.node.pod_regions import scan  # noqa: E402

N_WHOLE, N_SOFT, REPLICAS = 6, 3, 4
INVENTORY = Inventory((*(gpu(i, nvlink=0) for i in range(N_WHOLE)),
                       *(gpu(N_WHOLE + j, DeviceMode.SOFT, replicas=REPLICAS)
                         for j in range(N_SOFT))))


def spec_of(steps: list[Step]) -> dict[str, Any]:
    def c(s: Step) -> dict[str, Any]:
        out: dict[str, Any] = {"name": s.name, "resources": {"limits": {GPU: str(s.size)}}}
        if s.kind == "sidecar":
            out["restartPolicy"] = "Always"
        return out
    return {"initContainers": [c(s) for s in steps if s.kind != "app"],
            "containers": [c(s) for s in steps if s.kind == "app"]}


class Kubelet:
    """The device manager's allocation for one node (devicemanager.ManagerImpl.Allocate and
    devicesToAllocate): reusable devices first, in the order `pick` gives, then the plugin's
    preferred IDs; an init container's devices become reusable, others' are not."""

    def __init__(self, plugin: ResourcePlugin, pods: MemoryPodSource) -> None:
        self.plugin, self.pods = plugin, pods
        self.in_use: set[str] = set()

    async def admit(self, steps: list[Step], pick) -> dict[str, list[str]]:
        reusable: list[str] = []
        got: dict[str, list[str]] = {}
        for s in steps:
            ids = [i for i in pick(reusable)][:s.size]
            if len(ids) < s.size:
                cands, _ = candidates(await self.pods.list_pods(NODE), NODE, GPU, INVENTORY,
                                      set(self.plugin.devices))
                avail = [d for i, d in self.plugin.devices.items()
                         if i not in self.in_use or i in ids]
                pref = preferred_ids(cands, avail, ids, s.size)
                ids += [i for i in pref if i not in ids and i not in self.in_use][
                    :s.size - len(ids)]
            assert len(ids) == s.size, (s, ids)
            await self.plugin._allocate(ids)
            self.in_use |= set(ids)
            got[s.name] = ids
            if s.kind == "init":
                reusable += [i for i in ids if i not in reusable]
            else:
                reusable = [i for i in reusable if i not in ids]
        return got


def plugin_on(pods: MemoryPodSource, tmp: Path) -> ResourcePlugin:
    lib = tmp / "libgpugov.so"
    lib.write_bytes(b"stand-in")
    p = ResourcePlugin(GPU, NODE, tmp / "plugins", pods, lambda: INVENTORY,
                       ResponseConfig(state_dir=tmp / "state", library=lib))
    p.set_devices(plugin_devices(INVENTORY)[GPU])
    return p


@st.composite
def pods_and_orders(draw) -> list[tuple[list[Step], bool, list[int]]]:
    """Pods of 1-4 containers (init, sidecar, app; 1-2 devices each), each whole or soft,
    with the order the kubelet hands reusable devices on."""
    out = []
    for _ in range(draw(st.integers(1, 3))):
        kinds = draw(st.lists(st.sampled_from(["init", "sidecar", "app"]), min_size=1,
                              max_size=4))
        kinds = sorted(kinds, key=lambda k: k == "app")  # init containers come first
        steps = [Step(f"c{j}", k, draw(st.integers(1, 2))) for j, k in enumerate(kinds)]
        out.append((steps, draw(st.booleans()), draw(st.permutations(range(8)))))
    return out


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=pods_and_orders())
def test_no_device_goes_to_two_containers_running_together(plan, tmp_path: Path) -> None:
    async def main() -> None:
        pods = MemoryPodSource()
        plugin = plugin_on(pods, tmp_path)
        kubelet = Kubelet(plugin, pods)
        free_whole, free_soft = list(range(N_WHOLE)), list(range(N_WHOLE, N_WHOLE + N_SOFT))
        admitted: dict[str, tuple[list[Step], set[str], dict[str, list[str]]]] = {}
        for n, (steps, is_soft, order) in enumerate(plan):
            need = effective((s.kind, s.size) for s in steps)
            pool = free_soft if is_soft else free_whole
            if need > len(pool):
                continue
            picked, pool[:] = pool[:need], pool[need:]
            record = [soft(i, 300, 4096) if is_soft else whole(i) for i in picked]
            pod = scheduled_pod(f"p{n}", record)
            pod["spec"].update(spec_of(steps))
            pods.put(pod)
            assert resource_steps(pod, GPU) == steps

            def pick(reusable: list[str], order=order) -> list[str]:
                return sorted(reusable, key=lambda d: order[sum(map(ord, d)) % len(order)])

            got = await kubelet.admit(steps, pick)
            keys = {f"GPU-{i:08d}-0000-4000-8000-{i:012d}" for i in picked}
            admitted[f"p{n}"] = (steps, keys, got)
        ids_by_pod: dict[str, str] = {}
        for name, (steps, record, got) in admitted.items():
            held: set[str] = set()  # devices of containers still running
            for s in steps:
                ks = {i.split("::")[0] for i in got[s.name]}
                assert ks <= record, (name, s, got)
                assert len(ks) == s.size  # distinct devices, one slice each
                assert not ks & held, (name, s, got)
                if s.holds:
                    held |= ks
                for i in got[s.name]:
                    assert ids_by_pod.setdefault(i, name) == name  # no ID to two pods
            if len(steps) > 1:
                rec = decode_allocated_containers(
                    pods.get("team-a", name)["metadata"]["annotations"][ALLOCATED])
                assert [(c.name, sorted(c.device_ids)) for c in rec] == [
                    (s.name, sorted(got[s.name])) for s in steps]

    asyncio.run(main())


def test_a_second_app_container_on_a_device_the_first_holds_is_refused(tmp_path: Path) -> None:
    """The kubelet gives a replica of the same soft GPU to the second app container (another
    ID, same device): refused, naming the container and the devices it may take."""
    async def main() -> None:
        pods = MemoryPodSource()
        plugin = plugin_on(pods, tmp_path)
        pod = scheduled_pod("two", [soft(6, 300, 4096), soft(7, 300, 4096)])
        pod["spec"].update(spec_of([Step("a", "app", 1), Step("b", "app", 1)]))
        pods.put(pod)
        u6 = "GPU-00000006-0000-4000-8000-000000000006"
        await plugin._allocate([f"{u6}::0"])
        try:
            await plugin._allocate([f"{u6}::1"])
        except AllocateError as exc:
            msg = str(exc)
        else:
            raise AssertionError("a device given to two app containers")
        assert "team-a/two container 'b' wants 1 of" in msg and f"except ['{u6}']" in msg
        rec = decode_allocated_containers(
            pods.get("team-a", "two")["metadata"]["annotations"][ALLOCATED])
        assert [(c.name, c.device_ids) for c in rec] == [("a", (f"{u6}::0",))]

    asyncio.run(main())


def test_the_same_ids_again_are_the_same_answer_not_a_new_claim(tmp_path: Path) -> None:
    async def main() -> None:
        pods = MemoryPodSource()
        plugin = plugin_on(pods, tmp_path)
        pod = scheduled_pod("again", [whole(0), whole(1)])
        pod["spec"].update(spec_of([Step("a", "app", 1), Step("b", "app", 1)]))
        pods.put(pod)
        u0 = "GPU-00000000-0000-4000-8000-000000000000"
        u1 = "GPU-00000001-0000-4000-8000-000000000001"
        assert (await plugin._allocate([u0]))[1] == "ok"
        assert (await plugin._allocate([u1]))[1] == "ok"
        resp, outcome = await plugin._allocate([u0])  # the kubelet repeats container a's
        assert outcome == "reclaimed" and resp.envs["NVIDIA_VISIBLE_DEVICES"] == u0
        rec = decode_allocated_containers(
            pods.get("team-a", "again")["metadata"]["annotations"][ALLOCATED])
        assert [c.name for c in rec] == ["a", "b"]

    asyncio.run(main())


def test_each_containers_region_is_read_with_its_name(tmp_path: Path) -> None:
    from region_files import write_region

    root = tmp_path / "regions"
    pod = root / "team-a_two_0f6c1a2b-1111-2222-3333-444455556666"
    write_region(pod / "containers" / "a" / "region", [4096 << 20], [30], [])
    write_region(pod / "containers" / "b" / "region", [4096 << 20], [30], [])
    (pod / "containers" / "a" / "devices").write_text("GPU-a\n")
    write_region(root / "team-a_one_0f6c1a2b-1111-2222-3333-444455556667" / "region",
                 [1 << 30], [10], [])
    regions, problems = scan(root)
    assert not problems
    assert sorted((r.pod, r.container, r.device_uuids) for r in regions) == [
        ("one", "", ()), ("two", "a", ("GPU-a",)), ("two", "b", ())]
