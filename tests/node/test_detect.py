"""Bypass, zombie and driver-overhead detection on constructed cases (fake NVML, real /proc)."""

from __future__ import annotations

from nvml_fake import A100_80
from region_files import SlotSpec, start_ticks, write_region

from gpugov.node.detect import detect
from gpugov.node.nvml.samples import sample_all
from gpugov.node.pod_regions import scan
from gpugov.node.procs import ProcTable

GiB = 1 << 30
MiB = 1 << 20
UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def _pod_region(root, pid, used=GiB):
    return write_region(root / f"team-a_trainer-0_{UID}" / "region", [20 * GiB], [30],
                        [SlotSpec(pid, start_ticks(pid), [used])])


def test_bypass_zombie_and_overhead_fire(node, open_nvml, sleepers, tmp_path):
    accounted, bypass, owner_of_gpu1 = sleepers.start(), sleepers.start(), sleepers.start()
    gone = sleepers.dead_pid()
    node.gpu(A100_80, f"proc {accounted} {GiB + 300 * MiB}", f"proc {bypass} {2 * GiB}")
    node.gpu(A100_80, f"proc {owner_of_gpu1} {5 * GiB}", f"proc {gone} {GiB}")
    _pod_region(tmp_path / "regions", accounted)
    nv = open_nvml(node)
    regions, problems = scan(tmp_path / "regions")
    assert problems == [] and [r.pod for r in regions] == ["trainer-0"]
    f = detect(sample_all(nv), regions, ProcTable.read())
    assert [(x.gpu, x.pid, x.bytes) for x in f.unaccounted] == [(0, bypass, 2 * GiB)]
    assert [(x.gpu, x.pid, x.bytes) for x in f.zombie] == [(1, gone, GiB)]
    assert f.overhead == {0: 300 * MiB}  # GPU 1 runs no accounted process: no overhead figure
    assert f.placement[0, 0][0] == 0  # the region's ordinal 0 is GPU 0


def test_silent_when_everything_is_accounted(node, open_nvml, sleepers, tmp_path):
    accounted, whole_gpu_owner = sleepers.start(), sleepers.start()
    node.gpu(A100_80, f"proc {accounted} {GiB}")
    node.gpu(A100_80, f"proc {whole_gpu_owner} {40 * GiB}")  # a whole-GPU pod: not governed
    _pod_region(tmp_path / "regions", accounted)
    f = detect(sample_all(open_nvml(node)), scan(tmp_path / "regions")[0], ProcTable.read())
    assert f.unaccounted == [] and f.zombie == []
    assert f.overhead == {0: 0}


def test_pod_gone_is_a_zombie_when_live_pods_are_known(node, open_nvml, sleepers, tmp_path):
    pid = sleepers.start()
    node.gpu(A100_80, f"proc {pid} {GiB}")
    procs = ProcTable.read()
    procs._pods[pid] = UID  # the process's cgroup names the pod
    f = detect(sample_all(open_nvml(node)), [], procs, live_pods=set())
    assert [(x.pid, x.bytes) for x in f.zombie] == [(pid, GiB)]
    f = detect(sample_all(open_nvml(node)), [], procs, live_pods={UID})
    assert f.zombie == []


def test_garbage_region_is_reported_not_raised(tmp_path, sleepers):
    good = _pod_region(tmp_path / "regions", sleepers.start())
    bad = tmp_path / "regions" / f"team-b_web-1_{UID}" / "region"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"\x00garbage" * 100)
    odd = tmp_path / "regions" / "not-a-pod-folder" / "region"
    odd.parent.mkdir(parents=True)
    odd.write_bytes(good.read_bytes())
    regions, problems = scan(tmp_path / "regions")
    assert [r.pod for r in regions] == ["trainer-0"]
    by_reason = {p.reason: p.message for p in problems}
    assert set(by_reason) == {"region_corrupt", "bad_folder_name"}
    assert str(bad) in by_reason["region_corrupt"] and "bytes" in by_reason["region_corrupt"]


# ---- issue 21 class 11: which host process a slot stands for is decided from the host side ----

OTHER = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def _holding(sleepers, path) -> int:
    """A process that holds `path` open (as the library does for its liveness lock)."""
    import subprocess

    with open(path, "rb") as fh:
        p = subprocess.Popen(["sleep", "600"], stdin=fh, start_new_session=True)
    sleepers.procs.append(p)
    return p.pid


def _forge_host_pid(path, slot: int, host_pid: int) -> None:
    from gpugov.node.region import layout

    lay = layout()
    base = lay.structs["gg_region"].fields["slots"].offset + slot * lay.structs["gg_slot"].size
    off = base + lay.structs["gg_slot"].fields["host_pid"].offset
    data = bytearray(path.read_bytes())
    data[off:off + 4] = host_pid.to_bytes(4, "little")
    path.write_bytes(bytes(data))


def test_class11_forged_host_pid_cannot_hide_a_bypassing_process(node, open_nvml, sleepers,
                                                                  tmp_path):
    bypass = sleepers.start()
    node.gpu(A100_80, f"proc {bypass} {2 * GiB}")
    path = write_region(tmp_path / "regions" / f"team-a_trainer-0_{UID}" / "region",
                        [20 * GiB], [30], [SlotSpec(4242, 1, [GiB])])
    _forge_host_pid(path, 0, bypass)  # the container names its bypassing process
    procs = ProcTable.read()
    procs._pods[bypass] = UID
    f = detect(sample_all(open_nvml(node)), scan(tmp_path / "regions")[0], procs)
    assert [(x.pid, x.bytes) for x in f.unaccounted] == [(bypass, 2 * GiB)]


def test_class11_slot_naming_a_process_of_the_pod_without_the_library_is_a_bypass(
        node, open_nvml, sleepers, tmp_path):
    bypass = sleepers.start()  # in the pod, does not hold the region (no library)
    node.gpu(A100_80, f"proc {bypass} {2 * GiB}")
    _pod_region(tmp_path / "regions", bypass)  # a slot forged with its PID and start time
    procs = ProcTable.read()
    procs._pods[bypass] = UID
    f = detect(sample_all(open_nvml(node)), scan(tmp_path / "regions")[0], procs)
    assert [(x.pid, x.bytes) for x in f.unaccounted] == [(bypass, 2 * GiB)]


def test_class11_another_pods_process_is_not_taken_as_the_regions(node, open_nvml, sleepers,
                                                                   tmp_path):
    theirs = sleepers.start()  # a process of another pod, on a GPU this pod shares
    node.gpu(A100_80, f"proc {theirs} {5 * GiB}")
    _pod_region(tmp_path / "regions", theirs)  # this pod's region names it
    procs = ProcTable.read()
    procs._pods[theirs] = OTHER
    f = detect(sample_all(open_nvml(node)), scan(tmp_path / "regions")[0], procs)
    assert f.overhead == {} and f.placement == {}  # not accounted to this region


def test_class11_library_process_of_the_pod_is_accounted(node, open_nvml, sleepers, tmp_path):
    path = tmp_path / "regions" / f"team-a_trainer-0_{UID}" / "region"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    pid = _holding(sleepers, path)
    _pod_region(tmp_path / "regions", pid)
    node.gpu(A100_80, f"proc {pid} {GiB + 100 * MiB}")
    procs = ProcTable.read()
    procs._pods[pid] = UID
    f = detect(sample_all(open_nvml(node)), scan(tmp_path / "regions")[0], procs)
    assert f.unaccounted == [] and f.overhead == {0: 100 * MiB}
