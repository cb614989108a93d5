"""cluster.yaml as users write it: a folder given by mistake is named as such, a spreadsheet's
byte-order mark and YAML 1.2 exponents (`2e6`) are read, and the errors word fields like the
queue config's."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpugov.model.cluster_spec import ClusterFileError, load_cluster_file


def test_a_folder_is_refused_as_a_folder(tmp_path: Path) -> None:
    with pytest.raises(ClusterFileError, match="is a folder"):
        load_cluster_file(tmp_path)


def test_bom_and_exponent_numbers_are_read(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_bytes("\ufeffnodePools:\n  - {name: h, count: 1, model: H100-SXM5-80GB, gpus: 8,"
                     " cpuMilli: 1.92e5, memoryMiB: 2e6}\n".encode())
    (pool,) = load_cluster_file(path).node_pools
    assert (pool.cpu_milli, pool.memory_mib) == (192000, 2000000)


def test_errors_name_the_path_and_value(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("nodePools:\n  - {name: h, count: -1, model: H100-SXM5-80GB, gpus: 8,"
                    " cpuMilli: 1000, memoryMiB: 1000}\n")
    with pytest.raises(ClusterFileError, match=r"nodePools\[0\]\.count: .*\(got -1\)"):
        load_cluster_file(path)


@pytest.mark.parametrize(("pool", "words"), [
    ({"count": 1_000_000_000},
     "nodePools[0].count: Input should be less than or equal to 100000"),
    ({"gpus": 100_000}, "nodePools[0].gpus: Input should be less than or equal to 256"),
    ({"cpuMilli": 10**30}, "nodePools[0].cpuMilli"),
    ({"memoryMiB": 10**30}, "nodePools[0].memoryMiB"),
    ({"powerBudgetW": float("inf")}, "nodePools[0].powerBudgetW"),
    ({"devices": [{"index": 0, "mode": "timeslice", "replicas": 100_000_000}]},
     "nodePools[0].devices[0].replicas: Input should be less than or equal to 1024"),
])
def test_every_count_and_size_has_an_upper_bound_named_in_the_error(
        tmp_path: Path, pool: dict, words: str) -> None:
    """Issue 22, finding 1: a typo like `count: 1000000000` is an error naming the range, never
    a run that grows to gigabytes."""
    import yaml

    doc = {"nodePools": [{"name": "h", "count": 1, "model": "H100-SXM5-80GB", "gpus": 8,
                          "cpuMilli": 1000, "memoryMiB": 1000, **pool}]}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ClusterFileError) as info:
        load_cluster_file(path)
    assert words in str(info.value)


def test_the_total_node_count_is_bounded_too(tmp_path: Path) -> None:
    pools = "".join(f"  - {{name: p{i}, count: 60000, model: H100-SXM5-80GB, gpus: 8, "
                    "cpuMilli: 1000, memoryMiB: 1000}\n" for i in range(2))
    path = tmp_path / "cluster.yaml"
    path.write_text("nodePools:\n" + pools)
    with pytest.raises(ClusterFileError, match="120000 nodes in all; allowed: at most 100000"):
        load_cluster_file(path)
