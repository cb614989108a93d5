"""Properties of the lock-free handshake (handshake.py), with a model of the kubelet: it asks
GetPreferredAllocation, takes the answer, calls Allocate; the plugin claims the first match.

- In bind order (what the kubelet does), every container gets its own pod's slice.
- In any order, every admission succeeds, no device ID is handed out twice, every pod is
  claimed once, and each GPU carries exactly the slices the scheduler put on it.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
from kubelet_driver.scenario import NODE, gpu, scheduled_pod, soft, whole  # noqa: E402

from gpugov.k8s.annotations import ALLOCATED, Inventory, encode_allocated  # noqa: E402
from gpugov.model.devices import DeviceMode  # noqa: E402
from gpugov.node.deviceplugin.handshake import candidates, matching, preferred_ids  # noqa: E402
from gpugov.node.deviceplugin.resources import GPU, plugin_devices  # noqa: E402

N_WHOLE, N_SOFT, REPLICAS = 4, 3, 4
INVENTORY = Inventory((*(gpu(i, nvlink=0) for i in range(N_WHOLE)),
                       *(gpu(N_WHOLE + j, DeviceMode.SOFT, replicas=REPLICAS)
                         for j in range(N_SOFT))))
DEVICES = {d.id: d for d in plugin_devices(INVENTORY)[GPU]}


@st.composite
def scheduled(draw) -> list[tuple]:
    """A valid schedule: whole GPUs used once, at most REPLICAS soft pods per soft GPU."""
    free_whole = list(range(N_WHOLE))
    soft_used = Counter()
    plan: list[tuple] = []
    for _ in range(draw(st.integers(1, 14))):
        if free_whole and draw(st.booleans()):
            n = draw(st.integers(1, min(2, len(free_whole))))
            picks = draw(st.permutations(free_whole))[:n]
            for p in picks:
                free_whole.remove(p)
            plan.append(tuple(whole(p) for p in sorted(picks)))
        else:
            room = [g for g in range(N_WHOLE, N_WHOLE + N_SOFT) if soft_used[g] < REPLICAS]
            if not room:
                continue
            g = draw(st.sampled_from(room))
            soft_used[g] += 1
            plan.append((soft(g, draw(st.sampled_from([100, 300])),
                              draw(st.sampled_from([1024, 4096]))),))
    return plan


def admit_all(plan: list[tuple], order: list[int]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Bind every pod (in plan order), then admit in `order`; returns admitted -> claimed pod
    and claimed pod -> device IDs."""
    pods = []
    for k, devices in enumerate(plan):
        p = scheduled_pod(f"p{k:02d}", list(devices))
        p["metadata"]["resourceVersion"] = str(100 + k)  # bound in plan order
        pods.append(p)
    by_name = {p["metadata"]["name"]: p for p in pods}
    used: set[str] = set()
    claimed_by: dict[str, str] = {}
    ids_of: dict[str, list[str]] = {}
    rv = 1000
    for k in order:
        size = len(plan[k])
        cands, rejected = candidates(pods, NODE, GPU, INVENTORY, set(DEVICES))
        assert not rejected
        avail = [d for i, d in DEVICES.items() if i not in used]
        chosen = preferred_ids(cands, avail, [], size)
        assert len(chosen) == size and not used & set(chosen)  # the kubelet follows it
        found = matching(cands, [DEVICES[i] for i in chosen])
        assert found, f"admission of p{k:02d} found no pod for {chosen}"
        c = found[0]
        target = by_name[c.name]
        target["metadata"]["annotations"][ALLOCATED] = encode_allocated(chosen, "t")
        rv += 1
        target["metadata"]["resourceVersion"] = str(rv)
        used |= set(chosen)
        claimed_by[f"p{k:02d}"] = c.name
        ids_of[c.name] = chosen
    return claimed_by, ids_of


def slices(devices: tuple) -> list:
    return sorted((d.uuid, d.mode, d.milli, d.memory_mib) for d in devices)


@settings(max_examples=150, deadline=None)
@given(scheduled())
def test_in_bind_order_every_container_gets_its_own_slice(plan: list[tuple]) -> None:
    claimed_by, _ = admit_all(plan, list(range(len(plan))))
    for admitted, claimed in claimed_by.items():
        assert slices(plan[int(admitted[1:])]) == slices(plan[int(claimed[1:])])


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_in_any_order_nothing_is_lost_or_given_twice(data) -> None:
    plan = data.draw(scheduled())
    order = data.draw(st.permutations(range(len(plan))))
    claimed_by, ids_of = admit_all(plan, list(order))
    assert sorted(claimed_by.values()) == sorted(f"p{k:02d}" for k in range(len(plan)))
    all_ids = [i for ids in ids_of.values() for i in ids]
    assert len(all_ids) == len(set(all_ids))
    # each GPU carries exactly the slices the scheduler put on it
    got = Counter((DEVICES[i].uuid, name) for name, ids in ids_of.items() for i in ids)
    want = Counter((d.uuid, f"p{k:02d}") for k, devs in enumerate(plan) for d in devs)
    assert got == want
