"""Every loader, fed arbitrary bytes and arbitrary CSV/YAML structures: a valid result or one
`InputFileError` that names the file — never another exception, never a hang."""

from __future__ import annotations

import csv
import io
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpugov.sim.jobs import JOB_COLUMNS, load_job_file
from gpugov.sim.report import TARGET_COLUMNS, load_targets
from gpugov.sim.text_input import InputFileError, load_yaml
from gpugov.sim.trace import NODE_COLUMNS, POD_COLUMNS, load_nodes, load_pods

LOADERS: dict[str, tuple[Callable[[Path], object], tuple[str, ...]]] = {
    "nodes": (load_nodes, NODE_COLUMNS),
    "pods": (load_pods, (*POD_COLUMNS, "gpu_spec")),
    "jobs": (load_job_file, JOB_COLUMNS),
    "jobs-mixed": (load_job_file, (*JOB_COLUMNS, "namespace", "resources", "tolerations",
                                   "node_selector")),
    "openb-jobs": (load_job_file, (*POD_COLUMNS, "creation_time", "deletion_time", "qos")),
    "targets": (lambda p: load_targets(p, "w"), TARGET_COLUMNS),
}
FUZZ = settings(max_examples=120, deadline=3000, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


def check(loader: Callable[[Path], object], data: bytes) -> object:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "input.csv"
        path.write_bytes(data)
        try:
            result = loader(path)
        except InputFileError as exc:
            assert str(exc).startswith(str(path)), exc
            assert exc.path == str(path)
            event("refused")
            return exc
        event("accepted")
        return result


cells = st.one_of(
    st.integers(min_value=-(10**25), max_value=10**25).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", "0", "1", "1000", "1001", "8", "1e300", "1e18", "-0", "nan", "inf",
                     "99999999999999999999", "T4", "t4", "A100-SXM4-80GB", "G2|T4", "LS", "BE",
                     "a", "06-FGD", "fgd", "w", " 1 ", "1.5", "0x10", "١٢"]),
    st.text(max_size=12),
)


_small = st.sampled_from(["0", "1", "2", "4", "8", "250", "500", "1000", "1.0", "3e2"])
PLAUSIBLE = {
    "cpu_milli": _small, "memory_mib": _small, "gpu": _small, "num_gpu": st.sampled_from(
        ["0", "1", "2"]), "gpu_milli": _small, "model": st.sampled_from(["T4", "t4", "G2", ""]),
    "gpu_spec": st.sampled_from(["", "T4", "T4|G2"]), "queue": st.just("a"),
    "priority": st.just(""), "submit_s": _small, "duration_s": _small, "pods": st.just("1"),
    "gpu_per_pod": st.sampled_from(["0", "1"]), "creation_time": _small,
    "deletion_time": _small, "qos": st.sampled_from(["LS", "BE", ""]), "workload": st.just("w"),
    "policy": st.sampled_from(["fgd", "06-FGD", "best-fit"]),
    "alloc_at_100_mean": _small, "alloc_at_130_mean": st.just("90"),
    "namespace": st.sampled_from(["", "ns-a"]),
    "resources": st.sampled_from(["", "nvidia.com/gpu=1", "nvidia.com/mig-1g.10gb=1",
                                  "nvidia.com/gpu.shared=1", "nvidia.com/gpumem=2000",
                                  "nvidia.com/mig-1g.10gb=2", "nvidia.com/gpu=1;cpu=2"]),
    "tolerations": st.sampled_from(["", "Exists", "a=b:NoSchedule;c:Exists", "a:b", "=x"]),
    "node_selector": st.sampled_from(["", "zone=a", "zone", "a=b;a=c"]),
}


@st.composite
def csv_documents(draw, columns: tuple[str, ...]) -> bytes:  # type: ignore[no-untyped-def]
    """A header with some, all or more of `columns` in any order, rows of any length."""
    if draw(st.booleans()):  # plausible: the right header, mostly sensible cells
        header = list(columns)
        rows = [[draw(st.one_of(PLAUSIBLE.get(c, st.just(f"x{i}")), cells))
                 if draw(st.integers(0, 9)) == 0 else draw(PLAUSIBLE.get(c, st.just(f"x{i}")))
                 for c in header] for i in range(draw(st.integers(0, 6)))]
    else:
        header = draw(st.lists(st.sampled_from([*columns, "extra", ""]),
                               max_size=len(columns) + 2))
        if draw(st.booleans()):
            header = list(columns) + header[: draw(st.integers(0, 2))]
        rows = draw(st.lists(st.lists(cells, max_size=len(header) + 2), max_size=6))
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    text = buf.getvalue()
    prefix = draw(st.sampled_from([b"", b"\xef\xbb\xbf"]))
    return prefix + text.encode("utf-8")


@pytest.mark.parametrize("name", LOADERS)
@FUZZ
@given(data=st.binary(max_size=300))
def test_loader_on_arbitrary_bytes(name: str, data: bytes) -> None:
    check(LOADERS[name][0], data)


@pytest.mark.parametrize("name", LOADERS)
@FUZZ
@given(data=st.data())
def test_loader_on_arbitrary_csv_structures(name: str, data: st.DataObject) -> None:
    loader, columns = LOADERS[name]
    result = check(loader, data.draw(csv_documents(columns)))
    if isinstance(result, list):  # accepted rows satisfy the documented ranges
        for item in result:
            for field in ("gpu_milli",):
                assert 0 <= getattr(item, field, 0) <= 1000


yaml_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12)


@FUZZ
@given(value=yaml_values)
def test_yaml_loader_on_arbitrary_structures(value: object) -> None:
    text = yaml.safe_dump(value, allow_unicode=True).encode()
    result = check(load_yaml, text)
    assert not isinstance(result, InputFileError), result  # whatever we dump, we read back


@FUZZ
@given(data=st.binary(max_size=300))
def test_yaml_loader_on_arbitrary_bytes(data: bytes) -> None:
    check(load_yaml, data)


def test_yaml_reads_exponent_numbers_as_numbers(tmp_path: Path) -> None:
    """YAML 1.1 (PyYAML's default) reads `1e18` as the string '1e18' (issue 13 item 13)."""
    p = tmp_path / "q.yaml"
    p.write_text("quota: {gpu: 1e18, milli: 2.5E3, name: e18, neg: -1e-3}\n")
    assert load_yaml(p) == {"quota": {"gpu": 1e18, "milli": 2500.0, "name": "e18",
                                      "neg": -0.001}}


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "q.yaml"
    p.write_text("queues:\n  - {name: a\n  - b\n")
    with pytest.raises(InputFileError, match=r"q\.yaml, line \d+: not valid YAML"):
        load_yaml(p)


def test_a_misspelled_optional_job_column_is_refused_with_the_closest_name(tmp_path) -> None:
    """Issue 22, finding 15: `node_selectr` was silently ignored (the jobs ran anywhere)."""
    from gpugov.sim.text_input import InputFileError

    path = tmp_path / "jobs.csv"
    path.write_text(",".join((*JOB_COLUMNS, "node_selectr")) + "\n"
                    "j,q,low,0,10,1,1,1000,1000,1024,zone=a\n")
    with pytest.raises(InputFileError) as info:
        load_job_file(path)
    assert "node_selectr" in str(info.value) and "did you mean 'node_selector'" in str(info.value)


def test_openb_pods_without_or_with_a_negative_lifetime_are_never_a_silent_second(
        tmp_path) -> None:
    """Issue 22 (low): a missing or negative duration became 1 s without a word."""
    from gpugov.sim.text_input import InputFileError

    head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos,creation_time,deletion_time\n"
    path = tmp_path / "pods.csv"
    path.write_text(head + "a,1000,1024,1,1000,LS,100,500\nb,1000,1024,1,1000,BE,200,\n")
    jobs = {j.name: j for j in load_job_file(path)}
    assert jobs["a"].duration == 400 and jobs["b"].duration == 300  # until the trace's end
    path.write_text(head + "a,1000,1024,1,1000,LS,100,50\n")
    with pytest.raises(InputFileError, match="deletion_time.*before creation_time"):
        load_job_file(path)


def test_a_policy_listed_twice_in_the_targets_is_refused(tmp_path) -> None:
    """Issue 22 (low): duplicate --targets rows were accepted (the last one silently won)."""
    from gpugov.sim.text_input import InputFileError

    path = tmp_path / "t.csv"
    path.write_text("workload,policy,alloc_at_100_mean,alloc_at_130_mean\n"
                    "w,06-FGD,90,91\nw,fgd,80,81\n")
    with pytest.raises(InputFileError, match="06-FGD of workload 'w' is listed twice"):
        load_targets(path, "w")
