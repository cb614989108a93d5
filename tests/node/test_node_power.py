"""The node agent's power work on the fake NVML (limits, their range and refusals modelled as
the real NVML documents them): measured draw and energy, caps set lowest-priority-first as
the PowerDomain's status asks, restored when lifted, the card's minimum and the driver's
refusals handled, every change an Event; and the agent publishing `gpugov.io/power` under
the node-scope policy on the real apiserver."""

from __future__ import annotations

import asyncio

import pynvml
from kubernetes_asyncio import client
from nvml_fake import A100_80, H100_80
from test_agent_k8s import _events, _node, agent_setup  # noqa: F401 - a fixture

from gpugov.k8s.power.contract import PATH, POWER, decode_power
from gpugov.node.agent import NodeAgent
from gpugov.node.power import PowerCaps, measure

MERGE = "application/merge-patch+json"


def test_draw_energy_and_limits_are_measured_and_caps_set_within_the_range(
        node, open_nvml, monkeypatch):
    node.gpu(A100_80, "power 300000 400000", "power-range 100000 400000")
    node.gpu(H100_80, "power 650000 700000", "power-range 200000 700000")
    node.gpu(A100_80, "unsupported power")
    nv = open_nvml(node)
    got = measure(nv)
    assert [(d.index, d.draw_w, d.limit_w, d.min_w, d.max_w) for d in got] == [
        (0, 300.0, 400.0, 100.0, 400.0), (1, 650.0, 700.0, 200.0, 700.0)]
    assert all(d.energy_j and d.energy_j > 0 for d in got)

    caps = PowerCaps()
    (change,) = caps.apply(nv, {1: 450.0})
    assert (change.reason, change.index, change.old_w, change.new_w) == (
        "GpuPowerCapped", 1, 700.0, 450.0)
    assert "over budget" in change.message
    assert [d.draw_w for d in measure(nv)] == [300.0, 450.0]  # the GPU holds its new limit
    assert caps.apply(nv, {1: 450.0}) == []  # nothing to do: no Event
    # below the card's minimum: the minimum, and the Event says so
    (low,) = caps.apply(nv, {1: 50.0})
    assert low.new_w == 200.0 and "below the card's minimum 200 W" in low.message
    # the cap is lifted: back to the default limit
    (back,) = caps.apply(nv, {})
    assert (back.reason, back.new_w) == ("GpuPowerRestored", 700.0)
    assert [d.limit_w for d in measure(nv)] == [400.0, 700.0]
    # a device without power management is refused, named, once
    (nosup,) = caps.apply(nv, {2: 100.0})
    assert nosup.reason == "GpuPowerCapRefused" and "GPU 2" in nosup.message
    assert caps.apply(nv, {2: 100.0}) == []


def test_the_fake_refuses_as_nvml_does(node, open_nvml, monkeypatch):
    node.gpu(A100_80, "power 300000 400000", "power-range 100000 400000")
    open_nvml(node)
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h) == [100000, 400000]
    assert pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h) == 400000
    for bad in (99999, 400001):
        try:
            pynvml.nvmlDeviceSetPowerManagementLimit(h, bad)
        except pynvml.NVMLError as e:
            assert e.value == pynvml.NVML_ERROR_INVALID_ARGUMENT
        else:
            raise AssertionError(f"{bad} mW was accepted")
    monkeypatch.setenv("FAKE_NVML_ROOT", "0")
    try:
        pynvml.nvmlDeviceSetPowerManagementLimit(h, 200000)
    except pynvml.NVMLError as e:
        assert e.value == pynvml.NVML_ERROR_NO_PERMISSION
    else:
        raise AssertionError("a non-root caller set a power limit")


def test_not_root_is_reported_once_and_nothing_changes(node, open_nvml, monkeypatch):
    node.gpu(A100_80, "power 300000 400000")
    nv = open_nvml(node)
    monkeypatch.setenv("FAKE_NVML_ROOT", "0")
    caps = PowerCaps()
    (refused,) = caps.apply(nv, {0: 250.0})
    assert refused.reason == "GpuPowerCapRefused" and "must run as root" in refused.message
    assert caps.apply(nv, {0: 250.0}) == []
    assert measure(nv)[0].limit_w == 400.0


def test_agent_publishes_draw_and_applies_its_domains_caps_with_events(agent_setup):  # noqa: F811
    cluster, name, source, cfg, _clock, _fake, _, agent_kc = agent_setup

    async def scenario() -> None:
        from gpugov.k8s.devcluster.dev import install_crds

        await install_crds(cluster.kubeconfig)
        dom = f"rack-{name}"
        async with cluster.api() as api, cluster.api(agent_kc) as agent_api:
            custom = client.CustomObjectsApi(api)
            await custom.create_cluster_custom_object("gpugov.io", "v1alpha1", "powerdomains", {
                "apiVersion": "gpugov.io/v1alpha1", "kind": "PowerDomain",
                "metadata": {"name": dom}, "spec": {"panelWatts": 1000}})
            try:
                agent = NodeAgent(agent_api, source, cfg)
                for _ in range(100):  # until the node-scope policy is in force
                    await agent.round()
                    ann = (await _node(api, name)).metadata.annotations or {}
                    if POWER in ann:
                        break
                    await asyncio.sleep(0.1)
                published = decode_power(ann[POWER])
                assert [(d.index, d.draw_w, d.limit_w) for d in published] == [
                    (0, 60.0, 400.0), (1, 60.0, 400.0), (2, 60.0, 700.0)]
                # the scheduler's plan: cap GPU 2 of this node
                await custom.patch_cluster_custom_object_status(
                    "gpugov.io", "v1alpha1", "powerdomains", dom,
                    {"status": {"caps": {name: {"2": 300}}}}, _content_type=MERGE)
                await agent.round()
                published = decode_power((await _node(api, name)).metadata.annotations[POWER])
                assert [d.limit_w for d in published] == [400.0, 400.0, 300.0]
                events = await _events(api, name)
                assert any(r == "GpuPowerCapped" and "GPU 2: power limit 700 W -> 300 W" in m
                           for r, m in events)
                # lifted (the scheduler writes null): restored, and an Event says so
                await custom.patch_cluster_custom_object_status(
                    "gpugov.io", "v1alpha1", "powerdomains", dom,
                    {"status": {"caps": {name: None}}}, _content_type=MERGE)
                await agent.round()
                assert any(r == "GpuPowerRestored" for r, _ in await _events(api, name))
                assert agent.errors == {} or not any("power" in k for k in agent.errors)
            finally:
                await custom.delete_cluster_custom_object("gpugov.io", "v1alpha1",
                                                          "powerdomains", dom)
        assert PATH.endswith("powerdomains")

    asyncio.run(scenario())
