"""`gpugov dev up --dra-pool NAME` as a user runs it: the pool's kwok nodes are served by DRA on
the real v1.34 apiserver (alpha gates on), with gpugov's DeviceClasses, the node-scoped slice
policy, slices published from the inventories, and the governor admitting a 20 GiB / 30 %
slice claim to its queue before kube-scheduler binds the pod."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from pathlib import Path

from kubernetes_asyncio import client

from gpugov.k8s.devcluster import dev, used_view
from gpugov.k8s.devcluster.client import api_client
from gpugov.k8s.devcluster.cluster_file import builtin_fleet, node_objects
from gpugov.k8s.devcluster.plane import StartError
from gpugov.k8s.devcluster.processes import alive
from gpugov.k8s.devcluster.pytest_plugin import ensure_binaries_or_skip
from gpugov.k8s.dra.slices import ADMITTED, DRA_LABEL, SLICE_CLASS

sys.path.insert(0, str(Path(__file__).parent))
from cli_run import gpugov  # noqa: E402
from dra_support import claim, claim_pod, request  # noqa: E402

CLUSTER = textwrap.dedent("""\
    nodePools:
      - name: plain
        count: 1
        model: A100-SXM4-80GB
        gpus: 2
        cpuMilli: 32000
        memoryMiB: 262144
      - name: dra
        count: 1
        model: A100-SXM4-80GB
        gpus: 2
        cpuMilli: 32000
        memoryMiB: 262144
        devices:
          - {index: "0", mode: soft}
    """)


def _wait_query(url: str, promql: str, timeout: float = 60) -> list[dict]:
    import time
    import urllib.parse
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        q = urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as r:
            result = json.loads(r.read())["data"]["result"]
        if result or time.monotonic() > deadline:
            return result
        time.sleep(1)


def test_dra_pools_are_labelled_and_an_unknown_pool_is_refused_before_anything_starts(
        tmp_path) -> None:
    objs = node_objects(builtin_fleet())
    pools = sorted({o["metadata"]["labels"]["gpugov.io/pool"] for o in objs})
    names = dev.dra_nodes(objs, (pools[0],))
    assert names and all(o["metadata"]["labels"].get(DRA_LABEL) == "true"
                         for o in objs if o["metadata"]["name"] in names)
    assert not [o for o in objs if o["metadata"]["name"] not in names
                and DRA_LABEL in o["metadata"]["labels"]]
    try:
        dev.dra_nodes(node_objects(builtin_fleet()), ("nosuch",))
        raise AssertionError("an unknown pool was accepted")
    except StartError as e:
        assert "--dra-pool 'nosuch': no such node pool; pools: " + ", ".join(pools) == str(e)
    out = gpugov("dev", "up", "--dir", str(tmp_path / "w"), "--dra-pool", "nosuch")
    assert out.returncode == 2 and "no such node pool" in out.stderr
    assert not (tmp_path / "w" / "state.json").exists()


def test_dev_up_serves_a_pool_through_dra_governed_by_queue(tmp_path) -> None:
    ensure_binaries_or_skip()
    nodes = tmp_path / "cluster.yaml"
    nodes.write_text(CLUSTER)
    work = tmp_path / "dev"
    up = gpugov("dev", "up", "--nodes", str(nodes), "--dir", str(work), "--dra-pool", "dra")
    try:
        assert up.returncode == 0, up.stderr
        assert "DRA (driver gpu.gpugov.io) serves: dra-0" in up.stderr
        kubeconfig = up.stdout.strip().splitlines()[-1].split("=", 1)[1]

        async def use() -> tuple:
            async with api_client(kubeconfig) as api:
                custom = client.CustomObjectsApi(api)
                core = client.CoreV1Api(api)
                reg = client.AdmissionregistrationV1Api(api)
                vaps = {v.metadata.name for v in
                        (await reg.list_validating_admission_policy()).items}
                await core.create_namespace({"metadata": {"name": "team"}})
                await custom.create_namespaced_custom_object(
                    "resource.k8s.io", "v1", "team", "resourceclaims",
                    claim("slice", "team", [request("gpu", SLICE_CLASS, capacity={
                        "memory": "20Gi", "compute": "30"})]))
                await core.create_namespaced_pod("team", claim_pod("p", "team",
                                                                   {"gpu": "slice"}))
                classes = slices = None
                pod = c = None
                for _ in range(600):
                    classes = await custom.list_cluster_custom_object(
                        "resource.k8s.io", "v1", "deviceclasses")
                    slices = await custom.list_cluster_custom_object(
                        "resource.k8s.io", "v1", "resourceslices")
                    pod = await core.read_namespaced_pod("p", "team")
                    c = await custom.get_namespaced_custom_object(
                        "resource.k8s.io", "v1", "team", "resourceclaims", "slice")
                    if pod.spec.node_name:
                        break
                    await asyncio.sleep(0.2)
                return vaps, classes, slices, pod, c
        vaps, classes, slices, pod, c = asyncio.run(use())
        assert "gpugov-node-slices" in vaps
        assert {"gpu.gpugov.io", "mig.gpugov.io", SLICE_CLASS} <= \
            {x["metadata"]["name"] for x in classes["items"]}
        assert {s["spec"]["nodeName"] for s in slices["items"]} == {"dra-0"}
        assert pod.spec.node_name == "dra-0"
        (res,) = c["status"]["allocation"]["devices"]["results"]
        assert res["device"] == "gpu-0" and res["consumedCapacity"]["memory"] == "20Gi"
        conds = {d["type"]: d["status"] for dev_ in c["status"].get("devices", [])
                 for d in dev_.get("conditions") or []}
        assert conds.get(ADMITTED) == "True"
        # the used view (simulated: kwok nodes have no GPU) attributes the claim to its pod
        url = dev.prometheus_url(work.resolve())
        assert (url is None) == (used_view.prometheus_binary() is None)
        if url is not None:
            got = _wait_query(url, 'gpugov_pod_memory_used_bytes{claim="slice"}')
            assert [(r["metric"]["pod"], r["metric"]["gpu"]) for r in got] == [("p", "0")]
    finally:
        state = json.loads((work / "state.json").read_text()) if (work / "state.json").exists() \
            else {"processes": []}
        pids = [(p["name"], p["pid"], p["ticks"]) for p in state["processes"]]
        down = gpugov("dev", "down", "--dir", str(work))
    assert down.returncode == 0, down.stderr
    assert {"gpugov-dra-publish", "gpugov-dra-governor"} <= {n for n, _, _ in pids}
    assert [name for name, pid, ticks in pids if alive(pid, ticks)] == []
