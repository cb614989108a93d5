"""The device view of `top` reads one value per physical GPU even when the exporter
also reports MIG instances under the parent's UUID (dcgm-exporter's GPU_I_ID rows)."""

from gpugov.observe.promapi import Sample
from gpugov.observe.snapshot import per_device
from gpugov.observe.views import MIB


def _row(uuid: str, value: float, gi: str = "") -> Sample:
    labels = {"UUID": uuid, "gpu": "0"}
    if gi:
        labels |= {"GPU_I_ID": gi, "GPU_I_PROFILE": "1g.10gb"}
    return Sample(labels, value)


def test_mig_instance_rows_never_overwrite_the_whole_gpu_value() -> None:
    rows = [_row("GPU-a", 30000), _row("GPU-a", 1000, gi="7"), _row("GPU-a", 2000, gi="8")]
    assert per_device(rows, MIB) == {"GPU-a": 30000 * MIB}
    # the instance rows coming first must not change that either
    assert per_device(list(reversed(rows)), MIB) == {"GPU-a": 30000 * MIB}


def test_a_card_reported_only_per_instance_is_the_sum_of_its_instances() -> None:
    rows = [_row("GPU-b", 1000, gi="7"), _row("GPU-b", 2500, gi="8"), _row("GPU-c", 40)]
    assert per_device(rows, MIB) == {"GPU-b": 3500 * MIB, "GPU-c": 40 * MIB}
    busy = [_row("GPU-b", 20, gi="7"), _row("GPU-b", 60, gi="8")]
    assert per_device(busy, 1 / 100, combine="mean") == {"GPU-b": 0.4}
