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
