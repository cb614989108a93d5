"""Mixed-fleet replay (issue 8 item 6): cluster.yaml with device modes, taints and power
budgets, the jobs file's namespace/resources/tolerations/node_selector columns,
allocations.csv checked by an independent recomputation, bad input refused with exit 2."""

from __future__ import annotations

import csv
import io
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpugov.cli import app
from gpugov.model.catalog import CATALOG
from gpugov.model.mig import find_placement, get_geometry
from gpugov.sim.mixed_scenario import MIXED_CLUSTER, MIXED_QUEUES

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
    devices: [{index: "0-3", mode: soft}]
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
    "x0,,low,1,100,1,,,1000,1024,ns-x,nvidia.com/gpu=1\n"
    "x1,,low,1,100,1,,,1000,1024,ns-x,nvidia.com/gpumem=5000\n"
    "gang,a,low,10,50,2,,,1000,1024,ns-a,nvidia.com/gpu=2\n"
    "big,,high,20,10,1,,,1000,1024,ns-a,nvidia.com/gpu=4\n")

ISOLATION = {"exclusive": "hard", "mig": "hard", "soft": "soft", "timeslice": "soft",
             "mps": "none"}
LEVEL = {"none": 0, "soft": 1, "hard": 2}
FLOOR = {"trusted": "none", "internal": "soft", "untrusted": "hard"}


def fleet(cluster_yaml: str) -> dict[str, dict]:
    """Per node, read from the cluster file itself (plain YAML, not gpugov's reader): its
    model, card memory and per-device (mode, replicas, MIG layout or None)."""
    out = {}
    for pool in yaml.safe_load(cluster_yaml)["nodePools"]:
        devices: list[tuple[str, int, list[str] | None]] = [("exclusive", 1, None)] * pool["gpus"]
        for group in pool.get("devices", []):
            lo, _, hi = str(group["index"]).partition("-")
            for k in range(int(lo), int(hi or lo) + 1):
                devices[k] = (group["mode"], group.get("replicas", 1), group.get("layout"))
        for i in range(pool["count"]):
            out[f"{pool['name']}-{i}"] = {"model": pool["model"], "devices": devices,
                                          "memory": CATALOG[pool["model"]].memory_mib}
    return out


def tiers(queues_yaml: str) -> dict[str, str]:
    return {t["namespace"]: t["trust"] for t in yaml.safe_load(queues_yaml)["tenants"]}


def check_allocations(out: Path, nodes: dict[str, dict], tier: dict[str, str]) -> list[dict]:
    """Recompute, from allocations.csv alone plus the cluster file, every device's use over
    time: no device's memory, compute, replicas or MIG memory slices overcommitted; MIG
    instances only at valid starts, never overlapping, fixed layouts kept; untrusted tenants
    never share a device; isolation never below the tier's floor. And every job's rows agree
    with jobs.csv."""
    with open(out / "allocations.csv", newline="") as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == ALLOC_HEADER
        rows = list(reader)
    jobs = {r["name"]: r for r in csv.DictReader(io.StringIO((out / "jobs.csv").read_text()))}
    events: dict[tuple[str, int], list[tuple[float, int, int, dict]]] = defaultdict(list)
    for i, r in enumerate(rows):
        node, dev = r["node"], int(r["device"])
        assert node in nodes and 0 <= dev < len(nodes[node]["devices"]), r
        card, model = nodes[node]["memory"], nodes[node]["model"]
        dev_mode = nodes[node]["devices"][dev][0]
        mode, milli, mem = r["mode"], int(r["milli"]), int(r["memory_mib"])
        assert mode == dev_mode or (mode, dev_mode) == ("exclusive", "soft"), r
        assert r["isolation"] == ISOLATION[mode], r
        if r["namespace"] in tier:
            assert LEVEL[r["isolation"]] >= LEVEL[FLOOR[tier[r["namespace"]]]], r
        assert 0 < milli <= 1000 and 0 <= mem <= card, r
        if mode == "exclusive":
            assert milli == 1000 and mem == card, r
        if mode == "mig":
            g = get_geometry(model)
            p = g.profile(r["mig_profile"])
            assert int(r["mig_start"]) in p.starts, f"invalid MIG start: {r}"
            assert mem == p.memory_mib and milli == 1000 * p.compute_slices // g.compute_slices
        else:
            assert r["mig_profile"] == "" and r["mig_start"] == "", r
        start = float(r["start_s"])
        end = float(r["end_s"]) if r["end_s"] else float("inf")
        assert end >= start
        # at equal times, releases (kind 0) come before new holds (kind 1)
        events[(node, dev)].append((start, 1, i, r))
        events[(node, dev)].append((end, 0, i, r))
    for (node, dev), evs in events.items():
        card, model = nodes[node]["memory"], nodes[node]["model"]
        mode, replicas, layout = nodes[node]["devices"][dev]
        held: dict[int, dict] = {}
        for t, kind, i, r in sorted(evs, key=lambda e: e[:3]):
            if kind == 0:
                del held[i]
                continue
            held[i] = r
            now = list(held.values())
            where = f"{node}/{dev} at {t}"
            assert sum(int(x["milli"]) for x in now) <= 1000, f"{where}: compute over"
            assert sum(int(x["memory_mib"]) for x in now) <= card, f"{where}: memory over"
            if any(x["mode"] == "exclusive" for x in now):
                assert len(now) == 1, f"{where}: a whole device shared"
            if mode in ("timeslice", "mps"):
                assert len(now) <= replicas, f"{where}: more pods than replicas"
            if mode == "mig":
                g = get_geometry(model)
                slices: set[int] = set()
                for x in now:
                    p = g.profile(x["mig_profile"])
                    span = set(range(int(x["mig_start"]), int(x["mig_start"]) + p.memory_slices))
                    assert not slices & span, f"{where}: MIG instances overlap"
                    slices |= span
                assert sum(g.profile(x["mig_profile"]).compute_slices for x in now) \
                    <= g.compute_slices, f"{where}: MIG compute slices over"
                if layout:
                    used = Counter(x["mig_profile"] for x in now)
                    assert all(n <= layout.count(p) for p, n in used.items()), \
                        f"{where}: instances outside the fixed layout {layout}: {used}"
            spaces = {x["namespace"] for x in now}
            if any(tier.get(ns) == "untrusted" for ns in spaces):
                assert len(spaces) == 1, f"{where}: untrusted tenant shares with {spaces}"
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
    rows = check_allocations(out, fleet(CLUSTER), tiers(QUEUES))
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
    # the untrusted tenant's whole GPU: hard isolation, a device nobody else holds meanwhile
    x0 = next(r for r in rows if r["job"] == "x0")
    assert (x0["mode"], x0["milli"], x0["isolation"]) == ("exclusive", "1000", "hard")
    # its soft slice is refused, not widened: a slice cannot give it hard isolation
    assert jobs["x1"]["status"] == "rejected" and "isolation" in jobs["x1"]["reason"], jobs["x1"]


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
    # the openb nodes CSV is all soft devices: the same as `devices: [{index: 0-3, soft}]`
    csv_nodes = tmp_path / "nodes"  # openb CSV without extension
    csv_nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                         "gpu-0,64000,262144,4,A100-SXM4-80GB\n"
                         "gpu-1,64000,262144,4,A100-SXM4-80GB\n")
    r = run(files, tmp_path / "csv", "--nodes", csv_nodes)
    assert r.exit_code == 0, r.output
    assert (tmp_path / "csv" / "allocations.csv").read_text() == runs[0]


def test_devices_not_named_are_exclusive(files, tmp_path):
    """Without `devices:` a pool's GPUs take whole-GPU pods only: the slices never start."""
    files["cluster.yaml"].write_text(CLUSTER.replace('    devices: [{index: "0-3", mode: soft}]'
                                                     '\n', ""))
    out = tmp_path / "run"
    r = run(files, out)
    assert r.exit_code == 0, r.output
    rows = check_allocations(out, fleet(files["cluster.yaml"].read_text()), tiers(QUEUES))
    assert {r["mode"] for r in rows} == {"exclusive"}
    jobs = {r["name"]: r for r in csv.DictReader(io.StringIO((out / "jobs.csv").read_text()))}
    for i in range(4):  # rejected: the reason names the mode
        job = jobs[f"s{i}"]
        assert job["status"] == "rejected" and "gpu-mode" in job["reason"], job


MODES_CLUSTER = """
nodePools:
  - name: mig
    count: 1
    model: A100-SXM4-80GB
    gpus: 2
    cpuMilli: 64000
    memoryMiB: 262144
    devices:
      - {index: 0, mode: mig, layout: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]}
      - {index: 1, mode: mig}
  - name: edge
    count: 1
    model: L40S
    gpus: 4
    cpuMilli: 64000
    memoryMiB: 262144
    topology: pcie
    labels: {zone: b}
    taints: [{key: dedicated, value: infer, effect: NoSchedule}]
    powerBudgetW: 700
    devices:
      - {index: "0-1", mode: timeslice, replicas: 4}
      - {index: 2, mode: mps, replicas: 2}
      - {index: 3, mode: soft}
  - name: whole
    count: 1
    model: H100-SXM5-80GB
    gpus: 4
    cpuMilli: 64000
    memoryMiB: 262144
    topology: nvswitch
    labels: {zone: a}
"""
MODES_QUEUES = QUEUES.replace("{name: b, quota: {gpu: 4}}", "{name: b, quota: {gpu: 16}}")
MODES_HEADER = HEADER.rstrip("\n") + ",tolerations,node_selector\n"
TOL = "dedicated=infer:NoSchedule"
MODES_JOBS = MODES_HEADER + "".join(
    f"m{i},,low,{i},100,1,,,100,100,ns-b,nvidia.com/mig-1g.10gb=1,,\n" for i in range(6)
) + "".join(
    f"g{i},,low,{10 + i},100,1,,,100,100,ns-b,nvidia.com/mig-3g.40gb=1,,\n" for i in range(3)
) + "".join(
    f"t{i},,low,{20 + i},100,1,,,100,100,ns-b,nvidia.com/gpu.shared=1,{TOL},zone=b\n"
    for i in range(3)
) + (
    f"soft-ok,,low,25,100,1,,,100,100,ns-b,nvidia.com/gpumem=10000,gpu:Exists;{TOL},\n"
    "w0,,low,30,100,1,,,100,100,ns-a,nvidia.com/gpu=2,,zone=a\n"
    # never fit: the only soft device is on the tainted node; zone=b is tainted
    "soft-no,,low,25,100,1,,,100,100,ns-b,nvidia.com/gpumem=10000,,\n"
    "w1,,low,25,100,1,,,100,100,ns-a,nvidia.com/gpu=1,,zone=b\n"
    "x0,,low,40,100,1,,,100,100,ns-x,nvidia.com/mig-1g.10gb=1,,\n"
)


def test_modes_taints_selectors_and_power_from_cluster_yaml(tmp_path):
    for name, text in (("cluster.yaml", MODES_CLUSTER), ("q.yaml", MODES_QUEUES),
                       ("jobs.csv", MODES_JOBS)):
        (tmp_path / name).write_text(text)
    files = {n: tmp_path / n for n in ("cluster.yaml", "q.yaml", "jobs.csv")}
    out = tmp_path / "run"
    r = run(files, out)
    assert r.exit_code == 0, r.output
    rows = check_allocations(out, fleet(MODES_CLUSTER), tiers(MODES_QUEUES))
    jobs = {r["name"]: r for r in csv.DictReader(io.StringIO((out / "jobs.csv").read_text()))}
    by_job = defaultdict(list)
    for row in rows:
        by_job[row["job"]].append(row)
    # MIG: every pod ran on the MIG node; the fixed layout's two 1g.10gb and its one 3g.40gb
    # are all it lends, the dynamic device makes the rest
    for name in [f"m{i}" for i in range(6)] + [f"g{i}" for i in range(3)] + ["x0"]:
        assert jobs[name]["start_s"], jobs[name]
        assert {(x["node"], x["mode"]) for x in by_job[name]} == {("mig-0", "mig")}
    assert {x["device"] for n in ("m0", "m1", "m2") for x in by_job[n]} == {"0", "1"}
    # taints: only tolerating pods land on the edge node; node selectors hold
    assert {x["node"] for x in by_job["soft-ok"]} == {"edge-0"}
    assert jobs["soft-no"]["status"] == "rejected" and "gpu-mode" in jobs["soft-no"]["reason"]
    assert {x["node"] for x in by_job["w0"]} == {"whole-0"} and len(by_job["w0"]) == 2
    assert jobs["w1"]["status"] == "rejected" and "taint" in jobs["w1"]["reason"], jobs["w1"]
    assert all(x["node"] == "edge-0" and x["mode"] == "timeslice"
               for t in ("t0", "t1", "t2") for x in by_job[t])
    # power: 700 W holds two busy 350 W cards at once, and the edge node reached it
    busy = []
    edge = [x for x in rows if x["node"] == "edge-0"]
    for t in sorted({float(x["start_s"]) for x in edge}):
        busy.append(len({x["device"] for x in edge if float(x["start_s"]) <= t
                         < float(x["end_s"] or "inf")}))
    assert max(busy) == 2, busy


@pytest.mark.parametrize("policy", ["gpugov", "fgd"])
def test_mixed_scenario_allocations_never_overcommit(tmp_path, policy):
    out = tmp_path / "mixed"
    r = runner.invoke(app, ["replay", "--scenario", "mixed", "--out", str(out), "--no-plots",
                            "--policy", policy])
    assert r.exit_code == 0, r.output
    assert "allocations.csv" in r.output
    rows = check_allocations(out, fleet(MIXED_CLUSTER), tiers(MIXED_QUEUES))
    kinds = {(r["namespace"], r["mode"]) for r in rows}
    assert {("ns-infer", "soft"), ("ns-infer", "mig"), ("ns-infer", "timeslice"),
            ("ns-train", "exclusive"), ("ns-partner", "exclusive"),
            ("ns-partner", "mig")} <= kinds
    assert ("ns-partner", "soft") not in kinds  # untrusted never shares
    gangs = [r for r in rows if r["job"].startswith("train-")]
    assert any(r["pod"].endswith("-1") for r in gangs)  # multi-pod gangs ran
    assert {r["node"].rsplit("-", 1)[0] for r in gangs} == {"train"}  # node selector
    mem = [int(r["memory_mib"]) for r in rows if r["mode"] == "soft"]
    assert min(mem) >= 5 * 1024 and max(mem) <= 40 * 1024
    # devices 0-3 lend only the instances mig-parted would create for their layout; the
    # dynamic devices 4-7 create others where pods land
    layout = find_placement(get_geometry("H100-SXM5-80GB"),
                            ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])
    assert layout is not None
    laid = {(i.profile, str(i.start)) for i in layout}
    fixed = {(r["mig_profile"], r["mig_start"]) for r in rows
             if r["mode"] == "mig" and int(r["device"]) < 4}
    dynamic = {(r["mig_profile"], r["mig_start"]) for r in rows
               if r["mode"] == "mig" and int(r["device"]) >= 4}
    assert fixed and fixed <= laid, fixed
    if policy == "fgd":  # gpugov fills the free fixed-layout instances before cutting more
        assert dynamic - laid, dynamic


BASE_POOL = ("nodePools:\n  - {name: gpu, count: 2, model: A100-SXM4-80GB, gpus: 4, "
             "cpuMilli: 64000, memoryMiB: 262144")
SOFT = ", devices: [{index: '0-3', mode: soft}]"


@pytest.mark.parametrize("target,text,expected", [
    ("cluster.yaml", BASE_POOL.replace("A100-SXM4-80GB", "Z999") + "}\n",
     ["nodePools[0].model", "Z999"]),
    ("cluster.yaml", BASE_POOL + ", devices: [{index: '0-1', mode: mig, layout: [7g.80gb, "
     "1g.10gb]}]}\n", ["nodePools[0].devices[0].layout", "does not fit"]),
    ("cluster.yaml", BASE_POOL + ", devices: [{index: 0, mode: mig, layout: [9g.99gb]}]}\n",
     ["nodePools[0].devices[0].layout", "9g.99gb"]),
    ("cluster.yaml", BASE_POOL + ", devices: [{index: '0-1', mode: soft}, {index: 1, "
     "mode: soft}]}\n", ["nodePools[0].devices[1].index", "overlap"]),
    ("cluster.yaml", BASE_POOL + ", devices: [{index: '3-1', mode: soft}]}\n",
     ["nodePools[0].devices[0].index", "3-1"]),
    ("cluster.yaml", BASE_POOL + ", devices: [{index: 7, mode: soft}]}\n",
     ["nodePools[0].devices[0].index", "device 7"]),
    ("cluster.yaml", BASE_POOL.replace("cpuMilli: 64000", "cpuMilli: -5") + "}\n",
     ["nodePools[0].cpuMilli", "-5"]),
    ("cluster.yaml", BASE_POOL + ", powerBudgetW: -1}\n", ["nodePools[0].powerBudgetW", "-1"]),
    ("cluster.yaml", BASE_POOL + ", devices: [{index: 0, mode: soft, replicas: 4}]}\n",
     ["nodePools[0].devices[0].replicas", "soft"]),
    ("cluster.yaml", BASE_POOL + ", devices: [{index: 0, mode: timeslice}]}\n",
     ["nodePools[0].devices[0].replicas", "timeslice"]),
    ("cluster.yaml", BASE_POOL + ", devices: [{index: 0, mode: mig, layout: [1g.10gb+me]}]}\n",
     ["nodePools[0].devices[0].layout", "1g.10gb+me"]),
    ("cluster.yaml", BASE_POOL.replace("A100-SXM4-80GB", "L40S")
     + ", devices: [{index: 0, mode: mig}]}\n", ["nodePools[0].devices[0].mode", "L40S"]),
    ("cluster.yaml", BASE_POOL + ", taints: [{key: k, effect: Sometimes}]}\n",
     ["nodePools[0].taints", "Sometimes"]),
    ("cluster.yaml", BASE_POOL + ", topology: ring}\n", ["nodePools[0].topology", "ring"]),
    ("jobs.csv", HEADER + "j,,low,0,1,1,,,1,1,ns-a,nvidia.com/gpux=1\n",
     ["line 2", "resources", "nvidia.com/gpux"]),
    ("jobs.csv", HEADER + "j,,low,0,1,1,,,1,1,ns-a,nvidia.com/gpucores=150\n",
     ["line 2", "resources", "150"]),
    ("jobs.csv", HEADER + "j,,low,0,1,1,,,1,1,ns-a,nvidia.com/gpu=1;nvidia.com/gpumem=999999\n",
     ["line 2", "resources", "999999"]),
    # more memory than any card of this cluster (80 GB A100s), though an H200 would do
    ("jobs.csv", HEADER + "j,,low,0,1,1,,,1,1,ns-a,nvidia.com/gpumem=100000\n",
     ["line 2", "resources", "100000", "A100-SXM4-80GB"]),
    # a MIG profile no node's model has (H100/A100 80 GB have no 1g.5gb)
    ("jobs.csv", HEADER + "j,,low,0,1,1,,,1,1,ns-a,nvidia.com/mig-1g.5gb=1\n",
     ["line 2", "resources", "1g.5gb"]),
    ("jobs.csv", HEADER + "j,,low,0,1,1,,,1,1,ns-a,nvidia.com/mig-1g.10gb=2\n",
     ["line 2", "resources", "2 MIG instances"]),
    ("jobs.csv", HEADER + "j,,low,0,1,1,,,1,1,ns-a,nvidia.com/gpu\n",
     ["line 2", "resources", "name=value"]),
    ("jobs.csv", HEADER + "j,,low,0,1,1,1,1000,1,1,ns-a,nvidia.com/gpu=1\n",
     ["line 2", "gpu_per_pod", "resources"]),
    ("jobs.csv", HEADER + "j,,low,0,1,1,1,1000,1,1,ns-zzz,\n", ["line 2", "ns-zzz"]),
    ("jobs.csv", HEADER + "j,a,low,0,1,1,1,1000,1,1,ns-b,\n",
     ["line 2", "namespace", "ns-b"]),
    ("jobs.csv", MODES_HEADER + "j,,low,0,1,1,1,1000,1,1,ns-a,,dedicated=x:Never,\n",
     ["line 2", "tolerations", "Never", "NoSchedule"]),
    ("jobs.csv", MODES_HEADER + "j,,low,0,1,1,1,1000,1,1,ns-a,,dedicated,\n",
     ["line 2", "tolerations", "dedicated", "key:Exists"]),
    ("jobs.csv", MODES_HEADER + "j,,low,0,1,1,1,1000,1,1,ns-a,,,zone\n",
     ["line 2", "node_selector", "zone", "key=value"]),
    ("jobs.csv", MODES_HEADER + "j,,low,0,1,1,1,1000,1,1,ns-a,,,zone=a;zone=b\n",
     ["line 2", "node_selector", "twice"]),
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


def test_gpumem_percentage_is_a_share_of_the_card_each_pod_lands_on(files, tmp_path):
    """gpumem-percentage becomes MiB of the card the pod lands on; a fleet of two card sizes
    replays it too (issue 19: it was refused as 'no single size'), each pod with its own
    card's share."""
    row_text = "nvidia.com/gpumem-percentage=25;nvidia.com/gpucores=10\n"
    files["jobs.csv"].write_text(HEADER + "p,,low,0,10,1,,,1,1,ns-b," + row_text)
    out = tmp_path / "run"
    r = run(files, out)
    assert r.exit_code == 0, r.output
    (row,) = check_allocations(out, fleet(CLUSTER), tiers(QUEUES))
    assert (row["mode"], row["memory_mib"]) == ("soft", str(81920 // 4))
    mixed = CLUSTER + MODES_CLUSTER.split("nodePools:\n")[1]
    files["cluster.yaml"].write_text(mixed)
    files["jobs.csv"].write_text(HEADER + "".join(
        f"p{i},,low,0,10,1,,,1,1,ns-b," + row_text for i in range(12)))
    r = run(files, tmp_path / "two")
    assert r.exit_code == 0, r.output
    rows = check_allocations(tmp_path / "two", fleet(mixed), tiers(QUEUES))
    nodes = fleet(mixed)
    cards = {(x["node"], int(x["memory_mib"])) for x in rows}
    assert all(mib == nodes[n]["memory"] // 4 for n, mib in cards)


MIG_LAYOUTS = (["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], ["7g.80gb"],
               ["1g.10gb"] * 7, ["4g.40gb", "3g.40gb"], None)  # None: dynamic MIG
RESOURCES = ("nvidia.com/gpu=1", "nvidia.com/gpu=2",
             "nvidia.com/gpumem=20000;nvidia.com/gpucores=30", "nvidia.com/gpumem=40000",
             "nvidia.com/mig-1g.10gb=1", "nvidia.com/mig-2g.20gb=1",
             "nvidia.com/mig-3g.40gb=1", "nvidia.com/gpu.shared=1")
RANDOM_QUEUES = """
queues:
  - {name: q, quota: {gpu: 1000}}
tenants:
  - {namespace: ns-t, queue: q, trust: trusted}
  - {namespace: ns-i, queue: q, trust: internal}
  - {namespace: ns-u, queue: q, trust: untrusted}
priorityClasses:
  - {name: low, value: 10}
"""


@st.composite
def random_pool(draw, k: int) -> dict:
    model = draw(st.sampled_from(["A100-SXM4-80GB", "H100-SXM5-80GB", "L40S"]))
    gpus = draw(st.integers(1, 8))
    devices = []
    for i in range(gpus):
        modes = ["exclusive", "soft", "timeslice", "mps"] + (["mig"] if model != "L40S" else [])
        mode = draw(st.sampled_from(modes))
        group: dict = {"index": i, "mode": mode}
        if mode in ("timeslice", "mps"):
            group["replicas"] = draw(st.integers(2, 4))
        if mode == "mig":
            layout = draw(st.sampled_from(MIG_LAYOUTS))
            if layout:
                group["layout"] = layout
        if mode != "exclusive" or draw(st.booleans()):
            devices.append(group)
    pool: dict = {"name": f"p{k}", "count": draw(st.integers(1, 3)), "model": model,
                  "gpus": gpus, "cpuMilli": 64000, "memoryMiB": 262144, "devices": devices,
                  "labels": {"zone": draw(st.sampled_from(["a", "b"]))},
                  "topology": draw(st.sampled_from(["nvswitch", "pcie", "none"]))}
    if draw(st.booleans()):
        pool["taints"] = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    if draw(st.booleans()):
        pool["powerBudgetW"] = CATALOG[model].tdp_w * draw(st.integers(1, gpus))
    return pool


@st.composite
def random_replay(draw) -> tuple[str, str]:
    pools = [draw(random_pool(0))]
    pools[0]["model"] = draw(st.sampled_from(["A100-SXM4-80GB", "H100-SXM5-80GB"]))
    pools += [draw(random_pool(k)) for k in range(1, draw(st.integers(1, 3)))]
    header = MODES_HEADER
    rows = []
    for i in range(draw(st.integers(1, 30))):
        # mostly tolerant and unselective, so most jobs find a device and the check has
        # overlapping tenants, modes and instances to look at
        ns = draw(st.sampled_from(["ns-t", "ns-t", "ns-i", "ns-u"]))
        res = draw(st.sampled_from(RESOURCES))
        tol = draw(st.sampled_from(["", "dedicated=x:NoSchedule", "Exists", "Exists"]))
        sel = draw(st.sampled_from(["", "", "", "zone=a", "zone=b"]))
        submit, duration = draw(st.integers(0, 50)), draw(st.integers(1, 60))
        pods = draw(st.integers(1, 2))
        rows.append(f"j{i},,low,{submit},{duration},{pods},,,100,100,{ns},{res},{tol},{sel}\n")
    return yaml.safe_dump({"nodePools": pools}), header + "".join(rows)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(random_replay())
def test_random_mixed_replays_never_break_a_device_or_a_tier(tmp_path_factory, case):
    """Random fleets of every mode, taints, labels and budgets, random jobs of every
    spelling, tier, toleration and selector: allocations.csv always passes the independent
    check."""
    cluster, jobs = case
    d = tmp_path_factory.mktemp("random")
    for name, text in (("cluster.yaml", cluster), ("q.yaml", RANDOM_QUEUES),
                       ("jobs.csv", jobs)):
        (d / name).write_text(text)
    files = {n: d / n for n in ("cluster.yaml", "q.yaml", "jobs.csv")}
    r = run(files, d / "run")
    assert r.exit_code == 0, (r.output, r.exception)
    check_allocations(d / "run", fleet(cluster), tiers(RANDOM_QUEUES))


def test_toleration_and_selector_cells_mean_what_kubernetes_means():
    """Each written form becomes the toleration Kubernetes would hold, and tolerates (or not)
    the taints it should."""
    from gpugov.model.constraints import Taint, Toleration, tolerates
    from gpugov.sim.jobs import parse_node_selector, parse_tolerations

    tols = parse_tolerations("f", 2, " dedicated=infer:NoSchedule ; gpu:Exists;"
                             "a=b;c:Exists:NoExecute")
    assert tols == (Toleration("dedicated", "Equal", "infer", "NoSchedule"),
                    Toleration("gpu", "Exists"), Toleration("a", "Equal", "b"),
                    Toleration("c", "Exists", "", "NoExecute"))
    assert tolerates(tols, [Taint("gpu", "anything", "NoExecute"), Taint("a", "b")])
    assert not tolerates(tols, [Taint("dedicated", "train")])
    assert not tolerates(tols, [Taint("c", "", "NoSchedule")])
    assert tolerates(parse_tolerations("f", 2, "Exists"), [Taint("x", "y", "NoExecute")])
    assert parse_tolerations("f", 2, "") == ()
    assert parse_node_selector("f", 2, "tier=x; zone=a") == (("tier", "x"), ("zone", "a"))


_any = st.sampled_from([0, 1, -1, 2, 8, 9, "0-1", "1-0", "2-9", 1.5, None, "x", [], {}, True,
                        10**9, "4"])
_pool = st.fixed_dictionaries(
    {"name": st.sampled_from(["p", "P", "a-b", ""]), "count": _any, "gpus": _any,
     "model": st.sampled_from(["H100-SXM5-80GB", "A100-SXM4-80GB", "L40S", "G2", "Z", "", 5]),
     "cpuMilli": _any, "memoryMiB": _any},
    optional={"topology": st.sampled_from(["nvswitch", "pcie", "none", "ring", 1]),
              "powerBudgetW": st.sampled_from([0, 100, -5, "x", 1e12]),
              "labels": st.sampled_from([{"a": "b"}, {"a": 1}, [], "x"]),
              "taints": st.sampled_from([[{"key": "k", "effect": "NoSchedule"}], [{"key": ""}],
                                         "x", [{"key": "k", "effect": "Bad"}]]),
              "devices": st.lists(st.fixed_dictionaries({}, optional={
                  "index": _any, "mode": st.sampled_from(["mig", "soft", "timeslice", "mps",
                                                          "exclusive", "bad", 3]),
                  "layout": st.sampled_from([["7g.80gb"], ["1g.10gb+me"], ["3g.40gb"] * 2,
                                             ["1g.6gb"], [], "x", [1]]),
                  "replicas": _any}), max_size=3)})


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(pools=st.lists(_pool, min_size=1, max_size=2))
def test_any_cluster_yaml_loads_or_is_refused_naming_the_file(tmp_path, pools):
    from gpugov.model.cluster_spec import ClusterFileError
    from gpugov.sim.fleet import load_fleet
    from gpugov.sim.trace import TraceError

    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"nodePools": pools}))
    try:
        nodes = load_fleet(path)
    except (ClusterFileError, TraceError) as exc:
        assert str(exc).startswith(str(path)), exc
        return
    assert all(len(n.devices) == n.gpu_count for n in nodes)
