"""`PodRequest`'s quick acceptance of trace-shaped requests (the construction fast path)
accepts exactly what its full checks accept and works out `plain` as `_is_plain` does; a
clone under another name (`renamed`) equals `dataclasses.replace`'s."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from gpugov.model.constraints import Toleration
from gpugov.model.devices import DeviceMode
from gpugov.model.isolation import IsolationLevel
from gpugov.model.request import PodRequest

fields_st = st.fixed_dictionaries({
    "name": st.just("p"),
    "cpu_milli": st.sampled_from([-1, 0, 1000, 96000]),
    "memory_mib": st.sampled_from([-5, 0, 1024]),
    "gpu_count": st.sampled_from([-1, 0, 1, 2, 8]),
    "gpu_milli": st.sampled_from([-1, 0, 1, 500, 999, 1000, 1001]),
    "models": st.sampled_from([(), ("T4",)]),
    "gpu_memory_mib": st.sampled_from([0, 0, -1, 4096]),
    "mode": st.sampled_from([None, None, *DeviceMode]),
    "mig_profile": st.sampled_from(["", "", "1g.10gb"]),
    "min_isolation": st.sampled_from(list(IsolationLevel)),
    "tenant": st.sampled_from(["", "t"]),
    "sealed": st.booleans(),
    "node_selector": st.sampled_from([(), (("zone", "a"),)]),
    "tolerations": st.sampled_from([(), (Toleration("k", "Exists", "", "NoSchedule"),)]),
    "gpu_memory_percent": st.sampled_from([0.0, 0.0, 50.0, 101.0, -1.0]),
    "nvlink": st.booleans(),
    "pods": st.sampled_from([None, None, ("ns", ())]),
})


def _reference(fields: dict) -> tuple[str, bool | None]:
    """The full checks and `_is_plain`, on an instance made without `__post_init__`."""
    ref = object.__new__(PodRequest)
    for f in dataclasses.fields(PodRequest):
        object.__setattr__(ref, f.name, fields.get(f.name, f.default))
    try:
        ref._check()
    except ValueError as e:
        return str(e), None
    return "", ref._is_plain()


@settings(max_examples=600, deadline=None)
@given(fields_st)
def test_quick_acceptance_is_the_full_checks(fields: dict) -> None:
    try:
        got = ("", PodRequest(**fields).plain)
    except ValueError as e:
        got = (str(e), None)
    assert got == _reference(fields)


@settings(max_examples=200, deadline=None)
@given(fields_st)
def test_renamed_is_replace(fields: dict) -> None:
    try:
        pod = PodRequest(**fields)
    except ValueError:
        return
    clone = pod.renamed("q")
    assert clone == dataclasses.replace(pod, name="q") and clone.name == "q"
    assert clone.plain == pod.plain
