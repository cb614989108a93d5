"""QoS floor and in-GPU priority between containers sharing one device (native/qos.c).

Several processes (one per "container": own region, own environment) share one fake device
through a shared timeline: the fake time-slices the device between the processes that have
work queued, as the driver does, and accounts each process's device time itself
(tests/native/timeline.py). Shares are read from that accounting, never from wall time."""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path

import pytest
from native_build import drv
from timeline import Timeline

SHARE = 50  # the high-priority pod's share S, percent
# gg_qos_entry: magic, heartbeat, next, inflight, kind, until, pid
ENTRY = struct.Struct("<QQQIIQI20x")
MAGIC, HIGH, LOW = 0x31534F51474755, 1, 2


def setup_device(tmp_path: Path, build) -> tuple[Timeline, Path]:
    (tmp_path / "qos" / "0").mkdir(parents=True)  # the device plugin's folder for device 0
    return Timeline(build, tmp_path / "timeline"), tmp_path / "qos"


def board(qos: Path | None, pod: str) -> dict[str, str]:
    """The pod's board file in device 0's folder, as the device plugin creates and names it."""
    if qos is None:
        return {}
    (qos / "0" / pod).touch()
    return {"GPUGOV_QOS_DIR": str(qos), "GPUGOV_QOS_SELF": pod}


def high(tmp_path: Path, qos: Path | None, share: int = SHARE) -> dict[str, str]:
    return {"GPUGOV_SHARED_REGION": str(tmp_path / "region-high"),
            "GPUGOV_CORE_LIMIT": str(share), "GPUGOV_TASK_PRIORITY": "0", **board(qos, "high")}


def low(tmp_path: Path, qos: Path | None, i: int) -> dict[str, str]:
    return {"GPUGOV_SHARED_REGION": str(tmp_path / f"region-low{i}"),
            "GPUGOV_MEMORY_LIMIT": "256Mi", "GPUGOV_TASK_PRIORITY": "1", **board(qos, f"low{i}")}


def finish(procs) -> list[str]:
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err[-2000:]
        outs.append(out)
    return outs


def contend(build, tmp_path: Path, with_board: bool, neighbours: int = 2,
            high_load: str = "load:1000:3.2", seconds: float = 2.0):
    """A high-priority pod (1 ms kernels, capped at S) and best-effort pods (2 ms kernels, no
    cap) flat out on one device: the per-window measurements after a warm-up."""
    tl, qos = setup_device(tmp_path, build)
    board = qos if with_board else None
    procs = [tl.pod(build, 0, high_load, high(tmp_path, board))]
    procs += [tl.pod(build, i, "load:2000:3.2", low(tmp_path, board, i))
              for i in range(1, neighbours + 1)]
    time.sleep(0.8)
    windows = tl.windows(seconds, 0.5)
    finish(procs)
    return windows


def test_high_priority_pod_gets_its_share_next_to_best_effort_pods(build, tmp_path):
    windows = contend(build, tmp_path, with_board=True)
    shares = [w[1].get(0, 0.0) for w in windows]
    # over the whole interval at least 0.9 S, and no half-second window far below it
    assert sum(shares) / len(shares) >= 0.9 * SHARE / 100, shares
    assert min(shares) >= 0.8 * SHARE / 100, shares
    # the best-effort pods fill the rest: the device stays busy (work-conserving)
    assert sum(w[0] for w in windows) / len(windows) >= 0.85, windows


def test_planned_high_priority_starts_find_no_best_effort_work_in_front(build, tmp_path):
    # three best-effort pods fill the high pod's gaps; the device time-slices between them,
    # so each one's kernels take longer than alone. What they queue in a gap must still have
    # run when the high pod wakes: its kernels then run alone, and it is charged only its own
    # time. Measured by the fake's accounting: how long other pods' work ran while the high
    # pod had work queued, against the device time it got.
    tl, qos = setup_device(tmp_path, build)
    procs = [tl.pod(build, 0, "load:1000:4", high(tmp_path, qos))]
    procs += [tl.pod(build, i, "load:2000:4", low(tmp_path, qos, i)) for i in range(1, 4)]
    time.sleep(0.8)
    waited0, (_, done0) = tl.waited(), tl.sample()
    time.sleep(2.5)
    waited1, (_, done1) = tl.waited(), tl.sample()
    finish(procs)
    got = done1[0] - done0[0]
    waited = waited1[0] - waited0[0]
    best_effort = sum(done1[i] - done0[i] for i in range(1, 4))
    assert waited <= 0.02 * got, (waited, got)
    # and the best-effort pods did use the gaps: the device stayed busy
    assert best_effort >= 0.8 * got, (best_effort, got)


def test_without_the_board_the_best_effort_pods_take_the_high_pods_share(build, tmp_path):
    # the same pods without priority: the device's time-slicing gives each a third, and the
    # high pod's cap (charged by wall time on the shared device) keeps it below S
    windows = contend(build, tmp_path, with_board=False)
    shares = [w[1].get(0, 0.0) for w in windows]
    assert sum(shares) / len(shares) < 0.8 * SHARE / 100, shares


def test_best_effort_pods_get_the_device_while_the_high_pod_is_idle(build, tmp_path):
    # the high pod is registered but launches only 10 ms in every second
    windows = contend(build, tmp_path, with_board=True, high_load="load:1000:3.2:10:990")
    util = sum(w[0] for w in windows) / len(windows)
    best_effort = sum(sum(v for c, v in w[1].items() if c) for w in windows) / len(windows)
    assert util >= 0.9, windows
    assert best_effort >= 0.85, windows


def forge(path: Path, kind: str, stop: threading.Event) -> None:
    """A hostile container rewriting its own pod's board file every millisecond."""
    while not stop.is_set():
        now = time.monotonic_ns()
        data = {
            # fresh high-priority entries claiming work in flight and a launch due, forever
            "busy": ENTRY.pack(MAGIC, now, now + 5_000_000, 7, HIGH, 0, 1) * 64,
            # low-priority announcements of endless work
            "backlog": ENTRY.pack(MAGIC, now, 0, 0, LOW, 2**64 - 1, 1) * 64,
            "garbage": bytes(range(256)) * 64,
            "future": ENTRY.pack(MAGIC, 2**64 - 1, 2**64 - 1, 2**32 - 1, HIGH, 2**64 - 1, 1) * 64,
            "truncated": b"",
        }[kind]
        with open(path, "r+b") as f:
            f.truncate(0)
            f.write(data)
        time.sleep(0.001)


@pytest.mark.parametrize("forgery", ["busy", "backlog", "garbage", "future", "truncated"])
def test_a_forged_board_only_slows_best_effort_work_and_never_hangs(build, tmp_path, forgery):
    tl, qos = setup_device(tmp_path, build)
    board(qos, "hostile")
    stop = threading.Event()
    writer = threading.Thread(target=forge, args=(qos / "0" / "hostile", forgery, stop))
    writer.start()
    try:
        procs = [tl.pod(build, 0, "load:1000:2.4", high(tmp_path, qos)),
                 tl.pod(build, 1, "load:2000:2.4", low(tmp_path, qos, 1))]
        time.sleep(0.6)
        windows = tl.windows(1.5, 0.5)
        outs = finish(procs)  # nobody hangs, nobody faults
    finally:
        stop.set()
        writer.join()
    shares = [w[1].get(0, 0.0) for w in windows]
    # the high-priority pod never reads the boards: it keeps its share whatever is written
    assert sum(shares) / len(shares) >= 0.9 * SHARE / 100, (forgery, windows)
    # the best-effort pod still launches: at worst one launch per bounded wait
    assert int(outs[1].split("launches=")[1].split()[0]) >= 5, outs[1]


def test_processes_open_other_pods_files_read_only(build, tmp_path):
    # the folder is mounted read-only into every pod; the library itself opens only its own
    # pod's file for writing, so a mount mistake does not turn into writes to other pods' files
    tl, qos = setup_device(tmp_path, build)
    procs = [tl.pod(build, 0, "load:1000:1.5", high(tmp_path, qos)),
             tl.pod(build, 1, "load:2000:1.5", low(tmp_path, qos, 1))]
    time.sleep(0.8)
    modes = {}
    for name, p in (("high", procs[0]), ("low1", procs[1])):
        for fd in Path(f"/proc/{p.pid}/fd").iterdir():
            try:
                target = Path(fd.readlink())
            except OSError:
                continue
            if target.parent == qos / "0":
                flags = int(Path(f"/proc/{p.pid}/fdinfo/{fd.name}").read_text()
                            .split("flags:")[1].split()[0], 8)
                modes.setdefault(name, {})[target.name] = flags & 3  # O_ACCMODE
    finish(procs)
    assert modes["low1"].get("high") == 0, modes  # O_RDONLY
    assert modes["low1"]["low1"] == 2 and modes["high"]["high"] == 2, modes  # O_RDWR: own file


def test_a_killed_high_priority_process_stops_holding_best_effort_work(build, tmp_path):
    tl, qos = setup_device(tmp_path, build)
    g = tl.pod(build, 0, "load:1000:30", high(tmp_path, qos, share=90))
    b = tl.pod(build, 1, "load:2000:3", low(tmp_path, qos, 1))
    time.sleep(0.6)
    g.kill()  # SIGKILL: its entry stays, with work in flight, and its heartbeat stops
    g.wait()
    time.sleep(0.3)
    windows = tl.windows(1.0, 0.5)
    finish([b])
    assert min(w[1].get(1, 0.0) for w in windows) >= 0.85, windows


@pytest.mark.parametrize("env,needle", [
    ({"GPUGOV_TASK_PRIORITY": "2"}, "GPUGOV_TASK_PRIORITY='2': expected 0 (high) or 1 (low)"),
    ({"GPUGOV_TASK_PRIORITY": "high"}, "GPUGOV_TASK_PRIORITY='high'"),
    ({"GPUGOV_QOS_DIR": "qos"}, "GPUGOV_QOS_DIR='qos': expected an absolute folder path"),
    ({"GPUGOV_QOS_SELF": "../x"}, "GPUGOV_QOS_SELF='../x': expected a file name"),
])
def test_bad_priority_configuration_refuses_gpu_use(build, env, needle):
    r = drv(build, "direct", "ctx:0", env=env)
    assert r.find("init")["rc"] == "800"  # CUDA_ERROR_NOT_PERMITTED
    assert needle in r.stderr


def test_a_board_that_is_not_a_regular_file_is_not_used(build, tmp_path):
    qos = tmp_path / "qos"
    (qos / "0" / "mine").mkdir(parents=True)  # a folder where the pod's file should be
    r = drv(build, "direct", "ctx:0", "launch:3:100",
            env={"GPUGOV_QOS_DIR": str(qos), "GPUGOV_QOS_SELF": "mine",
                 "GPUGOV_TASK_PRIORITY": "1"})
    assert r.rcs("launch") == [0]
    assert "runs without priority" in r.stderr
