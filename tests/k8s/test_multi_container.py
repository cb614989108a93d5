"""A pod's several GPU containers as its one request (`webhook.admission.pod_request`).

Property: for containers of one shape, the pod is charged what can run at once — with init
and app containers only, max(largest init container, sum of app containers); with sidecars,
Kubernetes' own rule (KEP-753). Different shapes are refused naming the containers.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpugov.k8s import annotations as ann
from gpugov.k8s.pod_containers import effective, resource_steps
from gpugov.k8s.resources import RequestError
from gpugov.k8s.webhook import admission
from gpugov.k8s.webhook.admission import pod_request
from gpugov.model.devices import DeviceMode

SHAPES = [{}, {"nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "25"},
          {"nvidia.com/gpumem-percentage": "50"}]


def pod(apps: list[tuple[str, dict]], inits: list[tuple[str, dict]] = (),
        sidecars: tuple[str, ...] = ()) -> dict:
    def c(name: str, lim: dict) -> dict:
        out = {"name": name, "image": "x", "resources": {"limits": lim}}
        if name in sidecars:
            out["restartPolicy"] = "Always"
        return out
    spec = {"containers": [c(n, lim) for n, lim in apps]}
    if inits:
        spec["initContainers"] = [c(n, lim) for n, lim in inits]
    return {"metadata": {"name": "p"}, "spec": spec}


@given(apps=st.lists(st.integers(0, 4), min_size=1, max_size=4),
       inits=st.lists(st.integers(0, 4), max_size=3), shape=st.sampled_from(SHAPES))
def test_the_pod_is_charged_max_of_its_largest_init_container_and_its_app_containers(
        apps, inits, shape) -> None:
    """0: a container that asks for no GPU."""
    def lim(n: int) -> dict:
        return {"nvidia.com/gpu": str(n), **shape} if n else {"cpu": "1"}
    p = pod([(f"a{i}", lim(n)) for i, n in enumerate(apps)],
            [(f"i{i}", lim(n)) for i, n in enumerate(inits)])
    req = pod_request(p)
    if not any(apps + inits):
        assert req is None
        return
    assert req.count == max(max(inits, default=0), sum(apps))
    assert req.mode is (DeviceMode.EXCLUSIVE if not shape else DeviceMode.SOFT)


@given(kinds=st.lists(st.sampled_from(["init", "sidecar"]), max_size=3),
       sizes=st.lists(st.integers(1, 3), min_size=4, max_size=4),
       apps=st.lists(st.integers(1, 3), min_size=1, max_size=2))
def test_sidecars_are_charged_beside_everything_after_them(kinds, sizes, apps) -> None:
    inits = [(f"i{j}", {"nvidia.com/gpu": str(sizes[j])}) for j in range(len(kinds))]
    sidecars = tuple(f"i{j}" for j, k in enumerate(kinds) if k == "sidecar")
    p = pod([(f"a{j}", {"nvidia.com/gpu": str(n)}) for j, n in enumerate(apps)], inits,
            sidecars)
    # Kubernetes' rule, written out: sidecars run beside every container after them
    running, peak = 0, 0
    for j, k in enumerate(kinds):
        if k == "sidecar":
            running += sizes[j]
            peak = max(peak, running)
        else:
            peak = max(peak, sizes[j] + running)
    want = max(peak, sum(apps) + running)
    assert pod_request(p).count == want
    steps = resource_steps(p, "nvidia.com/gpu")
    assert effective((s.kind, s.size) for s in steps) == want


def test_each_container_is_translated_on_its_own_and_a_bad_one_is_named() -> None:
    p = pod([("a", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150"}),
             ("b", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50"})])
    try:
        pod_request(p)
    except RequestError as exc:
        assert str(exc).startswith("container 'a': nvidia.com/gpucores: 150 % is more than "
                                   "one GPU")
    else:
        raise AssertionError("accepted")


def test_mig_instances_of_one_profile_add_up_and_two_profiles_are_refused() -> None:
    one = {"nvidia.com/mig-1g.10gb": "1"}
    req = pod_request(pod([("a", one), ("b", {"nvidia.com/mig-1g.10gb": "2"})]))
    assert (req.mode, req.mig_profile, req.count) == (DeviceMode.MIG, "1g.10gb", 3)
    try:
        pod_request(pod([("a", one), ("b", {"nvidia.com/mig-3g.40gb": "1"})]))
    except RequestError as exc:
        assert "(1 MIG 1g.10gb instance vs 1 MIG 3g.40gb instance)" in str(exc)
    else:
        raise AssertionError("accepted")


def test_different_priorities_are_different_shapes() -> None:
    try:
        pod_request(pod([("hi", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096",
                                 "nvidia.com/priority": "0"}),
                         ("lo", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096"})]))
    except RequestError as exc:
        assert "container 'hi', container 'lo'" in str(exc) and "priority 0" in str(exc)
    else:
        raise AssertionError("accepted")


def test_an_mps_client_per_container_is_refused_but_an_init_container_may_reuse_it() -> None:
    mps = {"nvidia.com/gpu.mps": "1"}
    try:
        pod_request(pod([("a", mps), ("b", mps)]))
    except RequestError as exc:
        assert "each ask for 1 MPS client while running together" in str(exc)
    else:
        raise AssertionError("accepted")
    assert pod_request(pod([("a", mps)], [("i", mps)])).count == 1


def test_the_validating_webhook_accepts_what_the_mutating_one_wrote() -> None:
    soft = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096"}
    p = pod([("a", soft), ("b", soft)], [("i", soft)])
    req = pod_request(p)
    p["metadata"]["annotations"] = {ann.REQUEST: ann.encode_request(req)}
    review = {"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "object": p}
    assert admission.validate(review)["response"]["allowed"]
    assert req.count == 2


def test_cpu_and_memory_are_charged_as_the_containers_hold_them_at_once() -> None:
    from gpugov.k8s.scheduler.translate import _cpu_mem

    def c(name: str, cpu: str, mem: str, **kw) -> dict:
        return {"name": name, "resources": {"requests": {"cpu": cpu, "memory": mem}}, **kw}
    spec = {"initContainers": [c("load", "4", "1Gi")],
            "containers": [c("a", "1", "2Gi"), c("b", "1", "1Gi")]}
    assert _cpu_mem(spec) == (4000, 3072)  # the init container's CPU, the app's memory
    spec["initContainers"].append(c("proxy", "500m", "512Mi", restartPolicy="Always"))
    assert _cpu_mem(spec) == (4000, 3584)  # a sidecar runs beside the app containers
