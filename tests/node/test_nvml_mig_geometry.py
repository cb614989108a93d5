"""The fake NVML refuses exactly the GPU-instance placements the MIG geometry of the model
forbids (and accepts the others): the fake driver and gpugov's tables cannot drift apart."""

from __future__ import annotations

import ctypes

import pynvml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nvml_fake import A30, A100_80, H100_80, FakeNode

from gpugov.model.mig import MigInstance, get_geometry, layout_errors
from gpugov.node.nvml.library import Nvml

KINDS = {"A100-SXM4-80GB": A100_80, "H100-SXM5-80GB": H100_80, "A30": A30}


@st.composite
def attempts(draw):
    model = draw(st.sampled_from(sorted(KINDS)))
    geo = get_geometry(model)
    steps = draw(st.lists(st.tuples(st.sampled_from(geo.profile_names()),
                                    st.integers(0, geo.memory_slices - 1)),
                          min_size=1, max_size=6))
    return model, steps


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=attempts())
def test_fake_accepts_exactly_the_valid_placements(case, fakes, tmp_path_factory, monkeypatch):
    model, steps = case
    geo = get_geometry(model)
    node = FakeNode(tmp_path_factory.mktemp("mig"))
    node.gpu(KINDS[model], "mig-mode 1")
    for k, v in node.write().items():
        monkeypatch.setenv(k, v)
    with Nvml(str(fakes.current / "libnvidia-ml.so.1")):
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        placed: list[MigInstance] = []
        for name, start in steps:
            p = geo.profile(name)
            want_ok = layout_errors(geo, [*placed, MigInstance(start, name)]) == []
            place = pynvml.c_nvmlGpuInstancePlacement_t()
            place.start, place.size = start, p.memory_slices
            try:
                pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, p.profile_id,
                                                                ctypes.byref(place))
                ok = True
            except pynvml.NVMLError as e:
                ok = False
                # an invalid start is an argument error; a taken/full GPU is out of resources
                expected = (pynvml.NVML_ERROR_INVALID_ARGUMENT if start not in p.starts
                            else pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
                assert e.value == expected, (name, start, placed)
            assert ok == want_ok, (model, name, start, placed)
            if ok:
                placed.append(MigInstance(start, name))
