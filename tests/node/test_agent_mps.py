"""The node agent runs the MPS control daemon while a GPU is in `mps` mode (fake NVML, a fake
`nvidia-cuda-mps-control` with the documented CLI contract, the real kube-apiserver)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from test_agent_k8s import _events
from test_agent_k8s import agent_setup as _agent_setup

from gpugov.model.devices import DeviceMode
from gpugov.node.agent import NodeAgent
from gpugov.node.mps import MpsDaemon
from gpugov.node.nvml.source import SharingPolicy

FAKE = str(Path(__file__).parent / "fakes" / "nvidia-cuda-mps-control")
agent_setup = pytest.fixture(_agent_setup.__wrapped__)  # the agent test's fixture, reused


def test_the_agent_starts_the_mps_daemon_for_mps_gpus_and_stops_it_after(agent_setup,
                                                                        tmp_path):
    cluster, name, source, cfg, *_rest, agent_kc = agent_setup
    daemon = MpsDaemon(tmp_path / "mps", control=FAKE)
    cfg.mps = daemon
    source.sharing = SharingPolicy(DeviceMode.MPS, 4)

    async def scenario() -> None:
        async with cluster.api() as api, cluster.api(agent_kc) as agent_api:
            agent = NodeAgent(agent_api, source, cfg)
            try:
                await agent.round()
                assert daemon.alive()
                state = json.loads((daemon.pipe_dir / "fake-state.json").read_text())
                mps = [d for d in source.inventory().devices if d.mode == DeviceMode.MPS]
                assert state["visible"] == [d.uuid for d in mps] and state["thread_percentage"] \
                    == 25
                assert ("MpsDaemonStarted" in {r for r, _ in await _events(api, name)})
                source.sharing = SharingPolicy(DeviceMode.EXCLUSIVE, 1)
                await agent.round()
                assert not daemon.alive()
            finally:
                if daemon.alive():
                    daemon.stop()

    asyncio.run(scenario())


def test_node_agent_mode_mps_starts_the_daemon_with_exclusive_process_gpus(
        k8s_control_plane, node, fakes, tmp_path):
    """`gpugov node agent --mode mps` (not only `node run`) runs the MPS control daemon for
    the node's GPUs, after setting their compute mode through NVML; a GPU NVML cannot switch
    (a process already on it) leaves the daemon stopped with a Warning Event naming it."""
    import os
    import subprocess
    import time

    from gpugov.k8s.scheduler.harness import gpugov_argv

    name = f"gpu-agent-mps-{os.getpid()}-{tmp_path.name[-6:]}"
    k8s_control_plane.create_nodes([{
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"}}}])
    from nvml_fake import H100_80

    node.gpu(H100_80, "cc 9 0")
    node.gpu(H100_80, "cc 9 0")
    env = {**os.environ, **node.write(), "FAKE_NVML_ROOT": "1"}
    state = tmp_path / "state"
    daemon = MpsDaemon(state / "mps", control=FAKE)
    argv = gpugov_argv("node", "agent", "--node-name", name, "--kubeconfig",
                       str(k8s_control_plane.kubeconfig), "--mode", "mps", "--replicas", "4",
                       "--mps-control", FAKE, "--state-dir", str(state), "--listen", "",
                       "--interval", "0.5", "--nvml-library",
                       str(fakes.current / "libnvidia-ml.so.1"))

    def run_until(check, what: str) -> None:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        try:
            for _ in range(300):
                if check():
                    return
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.1)
            raise AssertionError(f"timed out waiting for {what}")
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    async def reasons() -> list[tuple[str, str]]:
        async with k8s_control_plane.api() as api:
            return await _events(api, name)

    try:
        def configured() -> bool:  # the daemon with its per-client defaults, and the Event
            f = daemon.pipe_dir / "fake-state.json"
            try:
                defaults = json.loads(f.read_text()).get("thread_percentage") == 25
            except (OSError, ValueError):  # not written yet, or being written
                return False
            return defaults and "MpsDaemonStarted" in {r for r, _ in asyncio.run(reasons())}

        run_until(configured, "the MPS daemon with its per-client defaults")
        st = json.loads((daemon.pipe_dir / "fake-state.json").read_text())
        assert len(st["visible"]) == 2 and daemon.alive()
    finally:
        if daemon.alive():
            daemon.stop()
    node.add("proc 1 4242 1073741824")  # a process outside MPS on GPU 1
    env.update(node.write())
    run_until(lambda: any(r == "MpsDaemonFailed" and "4242" in m
                          for r, m in asyncio.run(reasons())), "the refusal event")
    assert not daemon.alive()
