"""The replay honours `gpugov.io/topology: required` (issue 20): the jobs file's `annotations`
column reaches the one translation, and `GpuRequest.compile_modes` carries it to the state's
NVLink filter, so a required multi-GPU job is never split across NVLink domains: it runs in
one or waits with reason `topology`. A Tenant's `timeSlicing.oversubscribe` reaches the
compiled request as the scheduler's does."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpugov.control.config import ConfigError, parse_config
from gpugov.k8s.resources import translate
from gpugov.model.cluster import NodeSpec
from gpugov.model.devices import DeviceConfig, DeviceMode, hgx_topology
from gpugov.sim.jobs import load_job_file, to_jobs
from gpugov.sim.replay import ReplayOptions, allocation_rows, job_rows, replay
from gpugov.sim.trace import TraceError

CONFIG = parse_config(yaml.safe_load("""
queues:
  - {name: a, quota: {gpu: 16}}
tenants:
  - {namespace: ns-a, queue: a, trust: internal}
  - {namespace: ns-t, queue: a, trust: trusted, timeSlicing: {oversubscribe: true}}
"""))
HEADER = ("name,queue,priority,submit_s,duration_s,pods,gpu_per_pod,gpu_milli,cpu_milli,"
          "memory_mib,namespace,resources,annotations\n")


def _node(name: str, domains: int) -> NodeSpec:
    """8 whole GPUs split into `domains` NVLink islands (index order)."""
    return NodeSpec(name, 128000, 1 << 20, 8, "A100-SXM4-80GB",
                    devices=(DeviceConfig(DeviceMode.EXCLUSIVE),) * 8,
                    topology=hgx_topology(8, domains=domains))


def _run(tmp_path: Path, rows: list[str], nodes: list[NodeSpec]):
    path = tmp_path / "jobs.csv"
    path.write_text(HEADER + "".join(r + "\n" for r in rows))
    res = replay(CONFIG, nodes, load_job_file(path), ReplayOptions(seed=0))
    return {r[0]: r for r in job_rows(res)}, allocation_rows(res)


def test_a_required_4_gpu_job_is_refused_with_topology_where_no_domain_holds_it(tmp_path):
    """Pairs of NVLinked GPUs: 4 GPUs never share a domain. `required` waits with reason
    topology; the same job `preferred` (the default) runs, split."""
    jobs, allocs = _run(tmp_path, [
        "req,,,0,100,1,,,1000,1024,ns-a,nvidia.com/gpu=4,gpugov.io/topology=required",
        "pref,,,0,100,1,,,1000,1024,ns-a,nvidia.com/gpu=4,"], [_node("pairs", 4)])
    assert jobs["req"][7] in ("pending", "rejected") and "topology" in jobs["req"][8]
    assert jobs["pref"][7] == "finished"
    assert not [a for a in allocs if a[0] == "req"]


def test_required_jobs_are_never_split_across_nvlink_islands(tmp_path):
    """Two 4-GPU islands per node, 1-GPU jobs arriving between required 4-GPU ones: every
    allocation of a required job lies in one island (index // 4)."""
    rows = []
    for i in range(24):
        if i % 3 == 2:
            rows.append(f"r{i},,,{i * 5},{40 + i % 4 * 10},1,,,1000,1024,ns-a,"
                        "nvidia.com/gpu=4,gpugov.io/topology=required")
        else:
            rows.append(f"s{i},,,{i * 5},{30 + i % 5 * 10},1,,,1000,1024,ns-a,"
                        "nvidia.com/gpu=1,")
    jobs, allocs = _run(tmp_path, rows, [_node("n0", 2), _node("n1", 2)])
    required = {}
    for a in allocs:
        if a[0].startswith("r"):
            required.setdefault((a[0], a[1], a[11]), []).append((a[3], int(a[4])))
    assert required, "no required job ran"
    for key, devs in required.items():
        assert len(devs) == 4, (key, devs)
        assert len({(node, d // 4) for node, d in devs}) == 1, (key, devs)
    assert sum(1 for r in jobs.values() if r[0].startswith("r") and r[7] == "finished") >= 4


def test_the_tenants_oversubscription_reaches_its_time_slice_replicas(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text(HEADER + "t,,,0,10,1,,,1000,1024,ns-t,nvidia.com/gpu.shared=1,\n"
                    "a,,,0,10,1,,,1000,1024,ns-a,nvidia.com/gpu.shared=1,\n")
    from gpugov.control.tree import build_tree

    jobs = {j.name: j for j in to_jobs(load_job_file(path), CONFIG, build_tree(CONFIG))}
    assert jobs["t"].request.oversubscribe and not jobs["a"].request.oversubscribe
    req = translate({"nvidia.com/gpu": 4}, {"gpugov.io/topology": "required"})
    assert req is not None and req.to_pod_request("x", modes=True).nvlink


@pytest.mark.parametrize("cell, words", [
    ("gpugov.io/topology=sometimes", ["annotations", "topology policy"]),
    ("example.com/x=1", ["annotations", "not read by the translation"]),
    ("gpugov.io/topology", ["annotations", "key=value"]),
])
def test_bad_annotations_name_the_field(tmp_path, cell, words):
    path = tmp_path / "jobs.csv"
    path.write_text(HEADER + f"j,,,0,10,1,,,1000,1024,ns-a,nvidia.com/gpu=2,{cell}\n")
    with pytest.raises(TraceError) as info:
        load_job_file(path)
    for w in words:
        assert w in str(info.value)


def test_oversubscription_needs_a_trusted_tenant():
    with pytest.raises(ConfigError, match="oversubscribe needs trust: trusted"):
        parse_config({"queues": [{"name": "a"}], "tenants": [
            {"namespace": "n", "queue": "a", "timeSlicing": {"oversubscribe": True}}]})


def test_an_mps_request_where_no_node_serves_mps_says_so(tmp_path):
    """Bad input (issue 20): an MPS client on a fleet without MPS devices waits with a reason
    that names MPS and how a node serves it, not only 'no device in its mode'."""
    jobs, _ = _run(tmp_path, ["m,,,0,10,1,,,1000,1024,ns-a,nvidia.com/gpu.mps=1,"],
                   [_node("whole", 1)])
    assert jobs["m"][7] in ("pending", "rejected")
    assert "gpu-mode" in jobs["m"][8] and "MPS" in jobs["m"][8]
    assert "defaultMode=mps" in jobs["m"][8]


def test_the_replay_reads_the_node_selector_as_the_webhook_does(tmp_path):
    """`nvidia.com/gpu=1` with GFD's `-SHARED` product selector is one time-slice replica in
    the replay too (the one translation), placed on the time-sliced node."""
    from gpugov.sim.jobs import load_job_file as load

    path = tmp_path / "jobs.csv"
    path.write_text("name,queue,priority,submit_s,duration_s,pods,gpu_per_pod,gpu_milli,"
                    "cpu_milli,memory_mib,namespace,resources,node_selector\n"
                    "r,,,0,10,1,,,1000,1024,ns-a,nvidia.com/gpu=1,"
                    "nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB-SHARED\n")
    (spec,) = load(path)
    assert spec.gpu_request is not None and spec.gpu_request.mode is DeviceMode.TIMESLICE
    sliced = NodeSpec("ts", 64000, 1 << 19, 1, "A100-SXM4-80GB",
                      devices=(DeviceConfig(DeviceMode.TIMESLICE, replicas=4),),
                      labels=(("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB-SHARED"),))
    res = replay(CONFIG, [sliced, _node("whole", 1)], [spec], ReplayOptions(seed=0))
    (row,) = allocation_rows(res)
    assert (row[3], row[5]) == ("ts", "timeslice")
