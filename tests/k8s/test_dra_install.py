"""The Helm chart's DRA install (dra.*): off by default; when on, the DeviceClasses and the
node-scoped slice policy are what gpugov's code generates, the kubelet plugin runs in the node
DaemonSet with arguments `gpugov node dra-plugin` accepts, the governor is opt-in and runs as
the scheduler; the rendered objects pass the real apiserver's server-side dry-run."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import click
import yaml
from typer.main import get_command

from gpugov.cli import app
from gpugov.k8s.devcluster import build
from gpugov.k8s.dra import chart_files, slice_policy
from gpugov.k8s.dra.slices import Features, device_classes

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "gpugov"
NS = "gpu-ops"


def _helm(helm: Path, *args: str, namespace: str = NS) -> subprocess.CompletedProcess:
    return subprocess.run([str(helm), "template", "gpugov", str(CHART), "--namespace", namespace,
                           "--kube-version", build.K8S_VERSION, *args],
                          capture_output=True, text=True, check=False)


def render(helm: Path, *args: str, namespace: str = NS) -> list[dict]:
    out = _helm(helm, *args, namespace=namespace)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _by(docs: list[dict]) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def _containers(docs: list[dict]) -> dict[str, dict]:
    ds = _by(docs)[("DaemonSet", "gpugov-node")]
    return {c["name"]: c for c in ds["spec"]["template"]["spec"]["containers"]}


def _parse(path: list[str], args: list[str]) -> dict:
    """The options a CLI command gets from `args` (parsed and validated, not run)."""
    cmd: click.Command = get_command(app)
    for name in path:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    with cmd.make_context(" ".join(path), list(args)) as ctx:
        return dict(ctx.params)


def test_the_chart_file_is_generated_from_the_code() -> None:
    assert (CHART / "files" / "dra.yaml").read_text() == chart_files.chart_file_text()


def test_dra_is_off_by_default(helm) -> None:
    docs = render(helm)
    assert not [d for d in docs if d["kind"] == "DeviceClass"]
    assert not [d for d in docs if "slices" in d["metadata"]["name"] or
                "dra" in d["metadata"]["name"]]
    assert set(_containers(docs)) == {"node"}


def test_dra_objects_are_the_codes(helm) -> None:
    """The slice policy (for the release's node ServiceAccount) and the DeviceClasses are
    what `slice_policy.policies` and `slices.device_classes` generate; gpu-slice.gpugov.io
    only with dra.consumableCapacity."""
    for cc in (False, True):
        docs = render(helm, "--set", "dra.enabled=true",
                      "--set", f"dra.consumableCapacity={str(cc).lower()}")
        by = _by(docs)
        for want in slice_policy.policies(NS, "gpugov", "gpugov-node-slices"):
            assert by[(want["kind"], want["metadata"]["name"])]["spec"] == want["spec"]
        classes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "DeviceClass"}
        code = {c["metadata"]["name"]: c for c in device_classes(Features(cc))}
        assert sorted(classes) == sorted(code)
        for name, c in code.items():
            assert classes[name]["spec"] == c["spec"]
            assert classes[name]["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpugov"
        assert ("gpu-slice.gpugov.io" in classes) is cc


def test_the_kubelet_plugin_is_a_node_daemonset_container(helm) -> None:
    docs = render(helm, "--set", "dra.enabled=true")
    cs = _containers(docs)
    plugin = cs["dra-plugin"]
    assert plugin["command"] == ["gpugov", "node", "dra-plugin"]
    params = _parse(["node", "dra-plugin"], plugin["args"])
    assert params["state_dir"] == Path("/var/lib/gpugov") and params["publish"] is True
    assert params["govern"] is False and params["interval"] == 5.0
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} \
        in plugin["env"]
    mounts = {m["name"]: m["mountPath"] for m in plugin["volumeMounts"]}
    # the kubelet's plugin folders, the runtime's CDI folder, and the node container's state
    # folder (claim regions the exporter reads, QoS boards, the library)
    assert mounts["kubelet-plugins"] == str(params["plugins_dir"])
    assert mounts["kubelet-plugins-registry"] == str(params["registry_dir"])
    assert mounts["cdi"] == str(params["cdi_dir"]) == "/var/run/cdi"
    node_state = {m["name"]: m["mountPath"] for m in cs["node"]["volumeMounts"]}["state"]
    assert mounts["state"] == node_state == str(params["state_dir"])
    ds = _by(docs)[("DaemonSet", "gpugov-node")]
    vols = {v["name"]: v["hostPath"]["path"] for v in ds["spec"]["template"]["spec"]["volumes"]
            if "hostPath" in v}
    assert vols["kubelet-plugins"] == "/var/lib/kubelet/plugins"
    assert vols["kubelet-plugins-registry"] == "/var/lib/kubelet/plugins_registry"
    assert ("Deployment", "gpugov-dra-governor") not in _by(docs)


def test_the_governor_is_opt_in_and_runs_as_the_scheduler(helm) -> None:
    docs = render(helm, "--set", "dra.enabled=true", "--set", "dra.governor.enabled=true",
                  "--set", "dra.governor.reclaim=false")
    dep = _by(docs)[("Deployment", "gpugov-dra-governor")]
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gpugov-scheduler" and dep["spec"]["replicas"] == 1
    (c,) = pod["containers"]
    assert c["args"][:2] == ["dra", "governor"]
    params = _parse(["dra", "governor"], c["args"][2:])
    assert params["reclaim"] is False and params["interval"] == 1.0
    assert params["kubeconfig"] == Path("/etc/gpugov/kubeconfig")
    # the plugin's devices carry the binding conditions the governor decides
    assert _parse(["node", "dra-plugin"], _containers(docs)["dra-plugin"]["args"])["govern"]
    out = _helm(helm, "--set", "dra.enabled=true", "--set", "dra.governor.enabled=true",
                "--set", "scheduler.enabled=false")
    assert out.returncode != 0 and "dra.governor.enabled needs scheduler.enabled" in out.stderr
    out = _helm(helm, "--set", "dra.enabled=true", "--set", "node.enabled=false")
    assert out.returncode != 0 and "dra.enabled needs node.enabled" in out.stderr


def test_dra_render_passes_server_side_dry_run(helm, k8s_control_plane) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from test_chart import NS as CHART_NS
    from test_chart import _kubectl_dry_run, _prepare

    asyncio.run(_prepare(k8s_control_plane.kubeconfig))
    docs = render(helm, "--include-crds", "--set", "dra.enabled=true",
                  "--set", "dra.consumableCapacity=true", "--set", "dra.governor.enabled=true",
                  namespace=CHART_NS)
    out = _kubectl_dry_run(k8s_control_plane.kubeconfig, docs)
    assert out.returncode == 0, out.stderr
    assert "deviceclass.resource.k8s.io/gpu.gpugov.io serverside-applied (server dry run)" \
        in out.stdout
    assert "gpugov-dra-governor serverside-applied (server dry run)" in out.stdout
