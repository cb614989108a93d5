"""Signs of life on stderr: a long run in a pipe is never silent, a short one prints nothing."""

from __future__ import annotations

import io

from gpugov.sim.progress import Ticker


def test_a_long_run_in_a_pipe_prints_plain_lines_and_a_short_one_prints_nothing() -> None:
    """Issue 22, finding 17: `modes` at its maximum and large replays in a pipe showed no sign
    of life for minutes."""
    quiet = io.StringIO()
    t = Ticker("modes", 100, "placements", stream=quiet, tty=False)  # first line after 2 s
    for i in range(100):
        t.update(i)
    t.close()
    assert quiet.getvalue() == ""
    out = io.StringIO()
    t = Ticker("replay", 200, "s of trace time", stream=out, tty=False, first_after=0,
               every=0)
    t.update(50, "3/9 jobs done")
    t.update(100)
    t.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("replay: 25% (50/200 s of trace time) 3/9 jobs done, ")
    assert lines[1].startswith("replay: 50% (100/200 s of trace time), ")


def test_modes_reports_progress_over_every_mode_run() -> None:
    from gpugov.sim.modes import compare

    seen: list[int] = []
    compare(600, 0, 2, tick=seen.append)
    assert seen == sorted(seen) and seen[0] == 0 and seen[-1] == 6 * 600


def test_steps_in_a_pipe_print_each_step_and_repeat_a_long_one() -> None:
    """`dev up`/`dev build` block in steps (a build: minutes); in a pipe the current step
    repeats from a timer, so the run is never silent; a short run prints nothing."""
    import time

    from gpugov.sim.progress import Steps

    quiet = io.StringIO()
    with Steps("dev build", "checking the binary cache", stream=quiet, tty=False) as s:
        s.say("building etcd")
    assert quiet.getvalue() == ""
    out = io.StringIO()
    with Steps("dev up", "starting", stream=out, tty=False, first_after=0, every=0.05) as s:
        s.say("starting etcd")
        deadline = time.monotonic() + 30
        while out.getvalue().count("dev up: starting etcd, ") < 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # the heartbeat repeats the step that still blocks
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("dev up: starting, ")
    assert lines[1].startswith("dev up: starting etcd, ")
    assert sum(line.startswith("dev up: starting etcd, ") for line in lines) >= 2
