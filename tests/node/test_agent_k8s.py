"""The node agent on the fake NVML against the real kube-apiserver: GFD labels and the
inventory annotation published, a MIG layout applied and one refused (GPU busy), XID ->
unhealthy -> healthy, bypass and zombie memory reported as Events, bad input reported without
a crash. The agent runs as it does in the cluster: the node ServiceAccount under the chart's
RBAC, with a token bound to its Node, under the node-scope admission policy."""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from nvml_fake import A100_80, H100_80
from prometheus_client import CollectorRegistry, generate_latest
from region_files import SlotSpec, start_ticks, write_region

from gpugov.k8s.annotations import INVENTORY, AnnotationError, decode_inventory
from gpugov.k8s.devcluster.rbac import node_token_kubeconfig
from gpugov.k8s.node_policy import node_scope_policies
from gpugov.k8s.webhook.policy import apply_policies, delete_policies
from gpugov.model.devices import DeviceMode
from gpugov.node.agent import (
    MIG_CONFIG_STATE,
    UNSCHEDULABLE_GPUS,
    AgentConfig,
    AgentErrorsCollector,
    NodeAgent,
)
from gpugov.node.nvml.health import HealthTracker
from gpugov.node.nvml.source import NvmlDeviceSource

GiB = 1 << 30
UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
_n = itertools.count()
CONFIG = """version: v1
mig-configs:
  mixed:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
  typo:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"5g.50gb": 1}
"""


class Clock:
    t = 0.0

    def __call__(self) -> float:
        return self.t


async def _node(api, name):
    return await client.CoreV1Api(api).read_node(name)


async def _events(api, name):
    ev = await client.CoreV1Api(api).list_namespaced_event(
        "default", field_selector=f"involvedObject.name={name}")
    return [(e.reason, e.message) for e in ev.items]


async def _label(api, name, key, value):
    await client.CoreV1Api(api).patch_node(
        name, {"metadata": {"labels": {key: value}}},
        _content_type="application/merge-patch+json")


@pytest.fixture
def agent_setup(k8s_control_plane, node, open_nvml, sleepers, tmp_path):
    name = f"gpu-agent-{next(_n)}"
    k8s_control_plane.create_nodes([{
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {"nvidia.com/gpu.product": "stale",
                                "nvidia.com/mig-9g.1gb.count": "1", "team": "ml",
                                "nvidia.com/gpu.deploy.device-plugin": "true"}}}])
    busy, accounted, bypass = sleepers.start(), sleepers.start(), sleepers.start()
    gone = sleepers.dead_pid()
    node.gpu(A100_80, "cc 8 0", "power 60000 400000")
    node.gpu(A100_80, "cc 8 0", "mig-mode 1", "gi 0 0", f"proc {busy} {4 * GiB} 0",
             "power 60000 400000")
    node.gpu(H100_80, "cc 9 0", f"proc {accounted} {GiB}", f"proc {bypass} {2 * GiB}",
             f"proc {gone} {GiB}", "power 60000 700000")
    write_region(tmp_path / "regions" / f"team-a_trainer-0_{UID}" / "region", [8 * GiB], [25],
                 [SlotSpec(accounted, start_ticks(accounted), [GiB])])
    (tmp_path / "mig.yaml").write_text(CONFIG)
    nv = open_nvml(node)
    clock = Clock()
    source = NvmlDeviceSource(nv, HealthTracker(nv, recovery_s=60, clock=clock))
    cfg = AgentConfig(name, tmp_path / "mig.yaml", tmp_path / "regions", drain_grace_s=0)
    system = f"gpugov-agent-{name}"  # the node ServiceAccount's namespace
    policies = node_scope_policies(system, name=f"gpugov-node-scope-{name}")
    asyncio.run(apply_policies(k8s_control_plane.kubeconfig, policies))
    agent_kc = asyncio.run(node_token_kubeconfig(k8s_control_plane.kubeconfig, name, system,
                                                 tmp_path / "agent-kubeconfig"))
    try:
        yield k8s_control_plane, name, source, cfg, clock, node, (bypass, gone), agent_kc
    finally:
        asyncio.run(delete_policies(k8s_control_plane.kubeconfig, policies))


def test_agent_publishes_applies_mig_and_tracks_health(agent_setup):
    cluster, name, source, cfg, clock, fake, (bypass, gone), agent_kc = agent_setup

    async def scenario() -> None:
        async with cluster.api() as api, cluster.api(agent_kc) as agent_api:
            for i in range(100):  # the policy is in force: a label it does not own is refused
                try:
                    await _label(agent_api, name, "gpugov-test/probe", f"p{i}")
                except ApiException as exc:
                    assert exc.status == 403
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("the node-scope policy never took effect")
            agent = NodeAgent(agent_api, source, cfg)
            registry = CollectorRegistry(auto_describe=False)
            registry.register(AgentErrorsCollector(agent))
            await agent.round()
            n = await _node(api, name)
            labels, ann = n.metadata.labels, n.metadata.annotations
            assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
            assert labels["nvidia.com/gpu.count"] == "3"
            assert labels["nvidia.com/gpu.memory"] == "81920"
            assert labels["nvidia.com/gpu.family"] == "ampere"
            assert labels["nvidia.com/mig.strategy"] == "mixed"
            assert labels["nvidia.com/mig-7g.80gb.count"] == "1"
            assert labels["nvidia.com/cuda.driver-version.full"] == "550.107.02"
            assert "nvidia.com/mig-9g.1gb.count" not in labels  # stale GFD label removed
            assert labels["team"] == "ml"  # labels it does not own are left alone
            assert labels["nvidia.com/gpu.deploy.device-plugin"] == "true"
            inv = decode_inventory(ann[INVENTORY])
            assert [(d.model, d.mode) for d in inv.devices] == [
                ("A100-SXM4-80GB", DeviceMode.EXCLUSIVE), ("A100-SXM4-80GB", DeviceMode.MIG),
                ("H100-SXM5-80GB", DeviceMode.EXCLUSIVE)]
            assert inv.power_budget_w == 1500.0 and all(d.healthy for d in inv.devices)
            # bypass: a process on the shared H100 that no region accounts for
            events = await _events(api, name)
            assert any(r == "GpuMemoryBypass" and f"PID {bypass} " in m for r, m in events)
            # zombie: memory NVML still lists for a process that is gone
            assert any(r == "GpuMemoryZombie" and f"PID {gone} " in m for r, m in events)
            assert [r for r, _ in events].count("GpuMemoryBypass") == 1
            await agent.check_memory()  # a finding is reported once, not every round
            assert [r for r, _ in await _events(api, name)].count("GpuMemoryBypass") == 1

            # MIG: GPU 0 is idle and changes; GPU 1 runs a process and is refused
            await _label(api, name, "nvidia.com/mig.config", "mixed")
            outcomes = await agent.reconcile_mig()
            assert [(o.index, o.state) for o in outcomes] == [(0, "applied"), (1, "refused")]
            n = await _node(api, name)
            labels, ann = n.metadata.labels, n.metadata.annotations
            assert labels["nvidia.com/mig.config.state"] == "failed"
            state = json.loads(ann[MIG_CONFIG_STATE])
            assert state["config"] == "mixed" and state["gpus"]["0"].startswith("applied")
            assert state["gpus"]["1"].startswith("refused: GPU 1 is busy")
            assert UNSCHEDULABLE_GPUS not in ann
            inv = decode_inventory(ann[INVENTORY])
            assert sorted(m.profile for m in inv.devices[0].mig) == [
                "1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
            assert [m.profile for m in inv.devices[1].mig] == ["7g.80gb"]
            assert labels["nvidia.com/mig-1g.10gb.count"] == "2"
            reasons = [r for r, _ in await _events(api, name)]
            assert "MigConfigApplied" in reasons and "MigConfigRefused" in reasons

            # an unknown profile: refused before anything changes, with the allowed names
            await _label(api, name, "nvidia.com/mig.config", "typo")
            assert await agent.reconcile_mig() == []
            n = await _node(api, name)
            state = json.loads(n.metadata.annotations[MIG_CONFIG_STATE])
            assert state["state"] == "failed" and "unknown MIG profile '5g.50gb'" in \
                state["errors"][0] and "allowed: 1g.10gb" in state["errors"][0]
            assert any(r == "MigConfigInvalid" for r, _ in await _events(api, name))

            # XID 79 on the H100 -> unhealthy in the annotation; healthy after the window
            fake.event("xid 2 79")
            await agent.round()
            inv = decode_inventory((await _node(api, name)).metadata.annotations[INVENTORY])
            assert [d.healthy for d in inv.devices] == [True, True, False]
            clock.t += 60
            await agent.round()
            inv = decode_inventory((await _node(api, name)).metadata.annotations[INVENTORY])
            assert [d.healthy for d in inv.devices] == [True, True, True]

            # someone corrupts the annotations: the agent logs, counts, rewrites, goes on
            await client.CoreV1Api(api).patch_node(name, {"metadata": {"annotations": {
                INVENTORY: "{not json", MIG_CONFIG_STATE: "[1,"}}},
                _content_type="application/merge-patch+json")
            with pytest.raises(AnnotationError, match="gpugov.io/inventory"):
                decode_inventory((await _node(api, name)).metadata.annotations[INVENTORY])
            agent.published = None
            agent.mig_attempted = None
            await agent.round()
            n = await _node(api, name)
            assert len(decode_inventory(n.metadata.annotations[INVENTORY]).devices) == 3
            assert agent.errors["bad_mig_state_annotation"] == 1
            text = generate_latest(registry).decode()
            assert 'gpugov_node_agent_errors_total{reason="bad_mig_state_annotation"} 1.0' in text

    asyncio.run(scenario())
