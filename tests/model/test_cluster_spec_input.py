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
