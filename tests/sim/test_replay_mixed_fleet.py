"""Mixed-fleet replay (issue 8 item 6): cluster.yaml, the jobs file's namespace/resources
columns, allocations.csv checked independently, bad input refused with exit 2."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpugov.cli import app
from gpugov.model.catalog import CATALOG
from gpugov.sim.mixed_scenario import MIXED_CLUSTER

runner = CliRunner()
ALLOC_HEADER = ["job", "pod", "namespace", "node", "device", "mode", "mig_profile", "mig_start",
                "memory_mib", "milli", "isolation", "start_s", "end_s"]
CLUSTER = """
nodePools:
  - name: gpu
    count: 2
    model: A100-SXM4-80GB
    gpus: 4
    cpuMilli: 64000
    memoryMiB: 262144
    topology: nvswitch
    labels: {zone: a}
"""
QUEUES = """
queues:
  - {name: a, quota: {gpu: 4}}
  - {name: b, quota: {gpu: 4}}
tenants:
  - {namespace: ns-a, queue: a, trust: internal}
  - {namespace: ns-b, queue: b, trust: trusted}
  - {namespace: ns-x, queue: b, trust: untrusted}
priorityClasses:
  - {name: high, value: 1000, preemptible: false}
  - {name: low, value: 10}
"""
HEADER = ("name,queue,priority,submit_s,duration_s,pods,gpu_per_pod,gpu_milli,cpu_milli,"
          "memory_mib,namespace,resources\n")
# b borrows a's quota; the gang in ns-a reclaims it, then `big` (high) preempts the gang,
# which restarts when big is done (new allocation rows); slices arrive later
JOBS = HEADER + "".join(
    f"s{i},,low,200,100,1,,,1000,1024,ns-b,nvidia.com/gpu=1;nvidia.com/gpumem={10240 * (i + 1)};"
    f"nvidia.com/gpucores={20 + 10 * i}\n" for i in range(4)) + "".join(
    f"w{i},b,low,0,100,1,1,1000,1000,1024,,\n" for i in range(8)) + (
    "x0,,low,1,100,1,,,1000,1024,ns-x,nvidia.com/gpumem=5000\n"
    "gang,a,low,10,50,2,,,1000,1024,ns-a,nvidia.com/gpu=2\n"
    "big,,high,20,10,1,,,1000,1024,ns-a,nvidia.com/gpu=4\n")


def capacities(cluster_yaml: str) -> dict[str, tuple[int, int]]:
    """(devices, MiB per device) per node, read from the cluster file itself."""
    out = {}
    for pool in yaml.safe_load(cluster_yaml)["nodePools"]:
        for i in range(pool["count"]):
            out[f"{pool['name']}-{i}"] = (pool["gpus"], CATALOG[pool["model"]].memory_mib)
    return out


def check_allocations(out: Path, caps: dict[str, tuple[int, int]]) -> list[dict]:
    """Recompute per-device memory and compute over time from allocations.csv alone and
    compare every job's rows with jobs.csv."""
    with open(out / "allocations.csv", newline="") as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == ALLOC_HEADER
        rows = list(reader)
    jobs = {r["name"]: r for r in csv.DictReader(io.StringIO((out / "jobs.csv").read_text()))}
    events: dict[tuple[str, int], list[tuple[float, int, int, int]]] = defaultdict(list)
    for r in rows:
        node, dev = r["node"], int(r["device"])
        assert node in caps and 0 <= dev < caps[node][0], r
        assert r["mig_profile"] == "" and r["mig_start"] == ""
        milli, mem = int(r["milli"]), int(r["memory_mib"])
        assert 0 < milli <= 1000 and 0 <= mem <= caps[node][1], r
        if r["mode"] == "exclusive":
            assert milli == 1000 and mem == caps[node][1] and r["isolation"] == "hard", r
        else:
            assert r["mode"] == "soft" and milli < 1000 and r["isolation"] == "soft", r
        start = float(r["start_s"])
        end = float(r["end_s"]) if r["end_s"] else float("inf")
        assert end >= start
        # at equal times, releases (kind 0) come before new holds (kind 1)
        events[(node, dev)].append((start, 1, milli, mem))
        events[(node, dev)].append((end, 0, -milli, -mem))
    for (node, dev), evs in events.items():
        milli = mem = 0
        for t, _, dm, dmem in sorted(evs):
            milli += dm
            mem += dmem
            assert milli <= 1000, f"{node}/{dev} compute over capacity at {t}: {milli}"
            assert mem <= caps[node][1], f"{node}/{dev} memory over capacity at {t}: {mem}"
    by_job: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_job[r["job"]].append(r)
    for name, job in jobs.items():
        mine = by_job.pop(name, [])
        if not job["start_s"]:
            assert not mine, f"{name} never started but holds devices"
            continue
        episodes = sorted({float(r["start_s"]) for r in mine})
        assert episodes and episodes[-1] == float(job["start_s"]), name
        assert len(episodes) in (int(job["preemptions"]), int(job["preemptions"]) + 1), name
        last = [r for r in mine if float(r["start_s"]) == episodes[-1]]
        want_end = job["end_s"] if job["status"] == "finished" else ""
        assert {r["end_s"] for r in last} == {want_end}, name
        if job["status"] == "running":
            assert all(r["end_s"] == "" for r in last)
    assert not by_job, f"rows for jobs not in jobs.csv: {sorted(by_job)}"
    return rows


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name, text in (("cluster.yaml", CLUSTER), ("q.yaml", QUEUES), ("jobs.csv", JOBS)):
        (tmp_path / name).write_text(text)
        out[name] = tmp_path / name
    return out


def run(files: dict[str, Path], out: Path, option: str = "--cluster",
        cluster: Path | None = None):  # type: ignore[no-untyped-def]
    return runner.invoke(app, ["replay", option, str(cluster or files["cluster.yaml"]),
                               "--jobs", str(files["jobs.csv"]), "--queues",
                               str(files["q.yaml"]), "--out", str(out), "--no-plots"])


def test_cluster_yaml_resources_and_namespaces_replay(files, tmp_path):
    out = tmp_path / "run"
    r = run(files, out)
    assert r.exit_code == 0, r.output
    rows = check_allocations(out, capacities(CLUSTER))
    jobs = {r["name"]: r for r in csv.DictReader(io.StringIO((out / "jobs.csv").read_text()))}
    assert jobs["gang"]["preemptions"] == "1" and jobs["gang"]["status"] == "finished"
    gang = [r for r in rows if r["job"] == "gang"]
    assert len({r["start_s"] for r in gang}) == 2  # evicted, restarted: new rows
    assert len(gang) == 2 * 2 * 2  # 2 episodes x 2 pods x 2 GPUs
    assert {r["pod"] for r in gang} == {"gang-0", "gang-1"}
    assert {r["namespace"] for r in gang} == {"ns-a"}
    s1 = next(r for r in rows if r["job"] == "s1")  # gpumem=20480, gpucores=30
    assert (s1["mode"], s1["memory_mib"], s1["milli"]) == ("soft", "20480", "300")
    assert s1["namespace"] == "ns-b"
    # the untrusted tenant's 5000 MiB slice gets a whole device nobody shares
    x0 = next(r for r in rows if r["job"] == "x0")
    assert (x0["mode"], x0["milli"], x0["isolation"]) == ("exclusive", "1000", "hard")
    others = [r for r in rows if r["job"] != "x0" and (r["node"], r["device"]) ==
              (x0["node"], x0["device"])]
    x_end = float(x0["end_s"] or "inf")
    assert all(float(r["end_s"] or "inf") <= float(x0["start_s"]) or
               float(r["start_s"]) >= x_end for r in others)


def test_cluster_and_nodes_spellings_and_content_sniffing_agree(files, tmp_path):
    runs = []
    plain = tmp_path / "cluster-file"  # no extension: the content decides
    plain.write_text(CLUSTER)
    for k, (option, path) in enumerate((("--cluster", None), ("--nodes", None),
                                        ("--nodes", plain))):
        r = run(files, tmp_path / f"r{k}", option, path)
        assert r.exit_code == 0, r.output
        runs.append((tmp_path / f"r{k}" / "allocations.csv").read_text())
    assert runs[0] == runs[1] == runs[2]
    csv_nodes = tmp_path / "nodes"  # openb CSV without extension
    csv_nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                         "gpu-0,64000,262144,4,A100-SXM4-80GB\n"
                         "gpu-1,64000,262144,4,A100-SXM4-80GB\n")
    r = run(files, tmp_path / "csv", "--nodes", csv_nodes)
    assert r.exit_code == 0, r.output
    assert (tmp_path / "csv" / "allocations.csv").read_text() == runs[0]


def test_mixed_scenario_allocations_never_overcommit(tmp_path):
    out = tmp_path / "mixed"
    r = runner.invoke(app, ["replay", "--scenario", "mixed", "--out", str(out), "--no-plots"])
    assert r.exit_code == 0, r.output
    assert "allocations.csv" in r.output
    rows = check_allocations(out, capacities(MIXED_CLUSTER))
    kinds = {(r["namespace"], r["mode"]) for r in rows}
    assert {("ns-infer", "soft"), ("ns-train", "exclusive"),
            ("ns-partner", "exclusive")} <= kinds
    assert ("ns-partner", "soft") not in kinds  # untrusted never shares
    gangs = [r for r in rows if r["job"].startswith("train-")]
    assert any(r["pod"].endswith("-1") for r in gangs)  # multi-pod gangs ran
    mem = [int(r["memory_mib"]) for r in rows if r["mode"] == "soft"]
    assert min(mem) >= 5 * 1024 and max(mem) <= 40 * 1024


def _bad_cluster(text: str):  # type: ignore[no-untyped-def]
    return ("cluster.yaml", text)


BASE_POOL = ("nodePools:\n  - {name: gpu, count: 2, model: A100-SXM4-80GB, gpus: 4, "
             "cpuMilli: 64000, memoryMiB: 262144")


@pytest.mark.parametrize("target,text,expected", [
    ("cluster.yaml", BASE_POOL.replace("A100-SXM4-80GB", "Z999") + "}\n",
     ["nodePools[0].model", "Z999"]),
    ("cluster.yaml", BASE_POOL + ", devices: [{index: '0-1', mode: mig, layout: [7g.80gb, "
     "1g.10gb]}]}\n", ["nodePools[0].devices[0].layout", "does not fit"]),
    ("cluster.yaml", BASE_POOL + ", devices: [{index: '0-1', mode: soft}, {index: 1, "
     "mode: soft}]}\n", ["nodePools[0].devices[1].index", "overlap"]),
    ("cluster.yaml", BASE_POOL.replace("cpuMilli: 64000", "cpuMilli: -5") + "}\n",
     ["nodePools[0].cpuMilli", "-5"]),
    ("cluster.yaml", BASE_POOL + ", devices: [{index: '0-1', mode: soft}]}\n",
     ["nodePools[0].devices", "planned"]),
    ("cluster.yaml", BASE_POOL + ", taints: [{key: k, effect: NoSchedule}]}\n",
     ["nodePools[0].taints", "planned"]),
    ("jobs.csv", HEADER + "j,,low,0,1,1,,,1,1,ns-a,nvidia.com/gpux=1\n",
     ["line 2", "resources", "nvidia.com/gpux"]),
    ("jobs.csv", HEADER + "j,,low,0,1,1,,,1,1,ns-a,nvidia.com/gpucores=150\n",
     ["line 2", "resources", "150"]),
    ("jobs.csv", HEADER + "j,,low,0,1,1,,,1,1,ns-a,nvidia.com/gpu=1;nvidia.com/gpumem=999999\n",
     ["line 2", "resources", "999999"]),
    ("jobs.csv", HEADER + "j,,low,0,1,1,,,1,1,ns-a,nvidia.com/mig-1g.10gb=1\n",
     ["line 2", "resources", "planned"]),
    ("jobs.csv", HEADER + "j,,low,0,1,1,,,1,1,ns-a,nvidia.com/gpu\n",
     ["line 2", "resources", "name=value"]),
    ("jobs.csv", HEADER + "j,,low,0,1,1,1,1000,1,1,ns-a,nvidia.com/gpu=1\n",
     ["line 2", "gpu_per_pod", "resources"]),
    ("jobs.csv", HEADER + "j,,low,0,1,1,1,1000,1,1,ns-zzz,\n", ["line 2", "ns-zzz"]),
    ("jobs.csv", HEADER + "j,a,low,0,1,1,1,1000,1,1,ns-b,\n",
     ["line 2", "namespace", "ns-b"]),
])
def test_bad_mixed_input_exits_2_and_writes_nothing(files, tmp_path, target, text, expected):
    files[target].write_text(text)
    out = tmp_path / "run"
    r = run(files, out)
    assert r.exit_code == 2, r.output
    flat = " ".join(r.output.split())
    assert files[target].name in flat
    for word in expected:
        assert word in flat, (word, r.output)
    assert not out.exists()
