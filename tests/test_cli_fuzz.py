"""The CLI fuzzed per option type and per loader (issue 22, must-show): every hostile number,
path and file is exit 2 with one `error:` line naming the option or the file, never a
traceback, and nothing is written.

Numbers: NaN, ±inf, huge, negative and zero for every numeric option of every command (the
table is checked against the command tree, so a new option must join it). Paths: missing, a
folder, unwritable, and the input itself as the output. Loaders: cluster.yaml, jobs.csv,
pods/nodes CSV, node configs, MIG configs, queue configs and kubeconfigs, with fixed hostile
files and with hypothesis-generated ones.
"""

from __future__ import annotations

import copy
import json
import tempfile
import typing
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.main import get_command
from typer.testing import CliRunner

from gpugov.cli import app

runner = CliRunner()

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"node-{i},32000,131072,{(2, 4, 8)[i % 3]},{('T4', 'G2')[i % 2]}\n" for i in range(6))
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,creation_time,deletion_time\n" \
    + "".join(f"pod-{i:03d},1000,2048,1,{(250, 500, 1000)[i % 3]},,LS,{i * 10},{i * 10 + 500}\n"
              for i in range(12))
MISSING = "missing-file"  # in the test's folder; named by the check that runs after the options


def one_error_line(res, names: str) -> str:  # type: ignore[no-untyped-def]
    """Exit 2, no traceback, exactly one line of output, an `error:` line naming `names`."""
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.output
    assert names in lines[0], (names, res.output)
    return lines[0]


def tree_snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a tiny trace; the command runs inside it (so nothing lands elsewhere)."""
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "openb_node_list_gpu_node.csv").write_text(NODES)
    (trace / "openb_pod_list_tiny.csv").write_text(PODS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("NODE_NAME", raising=False)
    return tmp_path


# --- numbers --------------------------------------------------------------------------------
VALUES = {"nan": "nan", "inf": "inf", "-inf": "-inf", "huge": "1e300", "negative": "-1",
          "zero": "0"}
HUGE_INT = "1" + "0" * 30
PROM = "http://127.0.0.1:1"
# (command, option, base argv after the command, values that are valid there)
NUMERIC: list[tuple[str, str, list[str], set[str]]] = [
    ("simulate", "--tune", ["--seeds", "1", "--out", "o"], set()),
    ("simulate", "--workers", ["--seeds", "1", "--out", "o"], set()),
    ("modes", "--pod-count", [], set()),
    ("modes", "--seed", ["--model", "nosuch"], {"zero"}),
    ("modes", "--node-count", [], set()),
    ("modes", "--replicas", [], set()),
    # a replay's seed is any whole number; --period 0 is off; it may stop at 0 s or never
    ("replay", "--seed", ["--nodes", MISSING, "--jobs", MISSING, "--queues", MISSING],
     {"zero", "huge"}),
    ("replay", "--period", ["--nodes", MISSING, "--jobs", MISSING, "--queues", MISSING],
     {"zero", "huge"}),
    ("replay", "--until", ["--nodes", MISSING, "--jobs", MISSING, "--queues", MISSING],
     {"zero", "huge"}),
    ("reconcile", "--interval", ["--prometheus", PROM, "--kubeconfig", MISSING], set()),
    ("reconcile", "--idle-threshold", ["--prometheus", PROM, "--kubeconfig", MISSING],
     {"zero"}),
    ("reconcile", "--max-pods", ["--prometheus", PROM, "--kubeconfig", MISSING], set()),
    ("tenants", "--resync", ["--kubeconfig", MISSING], set()),
    ("scheduler", "--lease-duration", ["--kubeconfig", MISSING], set()),
    ("scheduler", "--renew-deadline", ["--kubeconfig", MISSING], set()),
    ("scheduler", "--retry-period", ["--kubeconfig", MISSING], set()),
    ("scheduler", "--concurrency", ["--kubeconfig", MISSING], set()),
    ("top", "--interval", ["--kubeconfig", MISSING], set()),
    ("rightsize", "--headroom", ["--prometheus", "nonsense"], {"zero"}),
    ("report", "--gpu-hour-price", ["--prometheus", "nonsense"], {"zero"}),
    ("report", "--kwh-price", ["--prometheus", "nonsense"], {"zero"}),
    ("experiment fgd", "--tune", ["--trace-dir", "trace", "--workload", "tiny", "--out", "o"],
     set()),
    ("experiment fgd", "--workers", ["--trace-dir", "trace", "--workload", "tiny", "--out", "o"],
     set()),
    ("dev demo", "--timeout", ["--dir", "nodev"], set()),
    ("node exporter", "--recovery-seconds", ["--regions", MISSING], {"zero"}),
    # a valid kubeconfig: the plugin's own checks run, then NVML (absent here: exit 1)
    ("node device-plugin", "--replicas", ["--node-name", "n1", "--kubeconfig", "kubeconfig"],
     set()),
    ("node device-plugin", "--soft-replicas", ["--node-name", "n1", "--kubeconfig",
                                               "kubeconfig"], set()),
    ("node device-plugin", "--refresh-seconds", ["--node-name", "n1", "--kubeconfig",
                                                 "kubeconfig"], set()),
    ("node run", "--interval", ["--node-name", "n1", "--config", MISSING], set()),
    ("node agent", "--replicas", ["--node-name", "n1", "--mode", "timeslice", "--kubeconfig",
                                  MISSING], set()),
    ("node agent", "--interval", ["--node-name", "n1", "--kubeconfig", MISSING], set()),
    ("node agent", "--drain-grace", ["--node-name", "n1", "--kubeconfig", MISSING], {"zero"}),
    ("node agent", "--recovery-seconds", ["--node-name", "n1", "--kubeconfig", MISSING],
     {"zero"}),
    ("node dra-plugin", "--interval", ["--node-name", "n1", "--kubeconfig", MISSING], set()),
    ("node dra-plugin", "--sweep-interval", ["--node-name", "n1", "--kubeconfig", MISSING],
     set()),
    ("dra governor", "--interval", ["--kubeconfig", MISSING], set()),
]


def _leaves(cmd, path=()):  # type: ignore[no-untyped-def]
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            yield from _leaves(sub, (*path, name))
    else:
        yield " ".join(path), cmd


def _options_of_type(kinds: tuple[type, ...]) -> set[tuple[str, str]]:
    found = set()
    for path, cmd in _leaves(get_command(app)):
        hints = typing.get_type_hints(cmd.callback)
        for p in cmd.params:
            hint = hints.get(p.name)
            if p.hidden or hint is None:
                continue
            if any(hint is k or k in typing.get_args(hint) for k in kinds):
                found.add((path, p.opts[0]))
    return found


def test_every_numeric_option_is_in_the_fuzz_table() -> None:
    """A new numeric option joins the table below (and so gets fuzzed)."""
    assert _options_of_type((int, float)) == {(c, o) for c, o, _, _ in NUMERIC}


NUMBER_CASES = [(c, o, b, k) for c, o, b, valid in NUMERIC for k in VALUES if k not in valid]


@pytest.mark.parametrize(("command", "option", "base", "kind"), NUMBER_CASES,
                         ids=[f"{c} {o} {k}" for c, o, _, k in NUMBER_CASES])
def test_hostile_numbers_are_one_line_naming_the_option(place: Path, command: str, option: str,
                                                         base: list[str], kind: str) -> None:
    value = VALUES[kind]
    if kind == "huge" and _is_int(command, option):
        value = HUGE_INT
    _inputs(place)
    before = tree_snapshot(place)
    res = runner.invoke(app, [*command.split(), *base, option, value])
    one_error_line(res, option)
    assert tree_snapshot(place) == before


def _is_int(command: str, option: str) -> bool:
    return (command, option) in _options_of_type((int,))


# --- paths ----------------------------------------------------------------------------------
JOBS = ("name,queue,priority,submit_s,duration_s,pods,gpu_per_pod,gpu_milli,cpu_milli,"
        "memory_mib\n" + "".join(f"b{i},b,low,0,100,1,1,1000,1000,1024\n" for i in range(3)))
QUEUES = ("queues:\n  - {name: a, quota: {gpu: 4}}\n  - {name: b, quota: {gpu: 4}}\n"
          "tenants:\n  - {namespace: ns-a, queue: a}\n"
          "priorityClasses:\n  - {name: low, value: 10}\n")
KUBECONFIG = """apiVersion: v1
kind: Config
current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
"""
TN, TP = "trace/openb_node_list_gpu_node.csv", "trace/openb_pod_list_tiny.csv"


def _inputs(place: Path) -> None:
    """Valid inputs beside the trace, a folder and a file to misuse."""
    for name, text in (("jobs.csv", JOBS), ("q.yaml", QUEUES), ("kubeconfig", KUBECONFIG),
                       ("node.yaml", "defaultMode: soft\n"), ("afile", "x\n")):
        (place / name).write_text(text)
    (place / "adir").mkdir()
    from gpugov.k8s.devcluster.pki import CertificateAuthority

    CertificateAuthority("fuzz-ca").serving("fuzz").write(place / "tls.crt", place / "tls.key")


PATH_CASES = {
    "missing": lambda: "nope",
    "folder": lambda: "adir",
    "file": lambda: "afile",
    "unwritable": lambda: "/proc/gpugov-fuzz/out",  # not creatable, even for root
}
TLS = ["--tls-cert", "tls.crt", "--tls-key", "tls.key", "--client-ca", "tls.crt"]
REPLAY = ["replay", "--nodes", TN, "--jobs", "jobs.csv", "--queues", "q.yaml"]
# (argv with X where the path goes, the cases that must be refused, the input "input" reuses)
PATHS: list[tuple[list[str], tuple[str, ...], str | None]] = [
    (["simulate", "--nodes", "X", "--pods", TP, "--out", "o"], ("missing", "folder"), None),
    (["simulate", "--nodes", TN, "--pods", "X", "--out", "o"], ("missing", "folder"), None),
    (["simulate", "--nodes", TN, "--pods", TP, "--seeds", "1", "--out", "X"],
     ("file", "unwritable", "input"), TN),
    (["replay", "--nodes", "X", "--jobs", "jobs.csv", "--queues", "q.yaml"],
     ("missing", "folder"), None),
    (["replay", "--nodes", TN, "--jobs", "X", "--queues", "q.yaml"], ("missing", "folder"), None),
    (["replay", "--nodes", TN, "--jobs", "jobs.csv", "--queues", "X"], ("missing", "folder"),
     None),
    ([*REPLAY, "--out", "X"], ("file", "unwritable", "input"), "jobs.csv"),
    (["openb-jobs", "X", "--out", "o.csv"], ("missing", "folder"), None),
    (["openb-jobs", TP, "--out", "X"], ("folder", "unwritable", "input"), TP),
    (["explain", "j", "--run", "X"], ("missing", "file"), None),
    (["explain", "pod", "ns/p", "--kubeconfig", "X"], ("missing", "folder"), None),
    (["reconcile", "--prometheus", PROM, "--kubeconfig", "X"], ("missing", "folder"), None),
    (["reconcile", "--prometheus", PROM, "--kubeconfig", "kubeconfig", "--queues", "X"],
     ("missing", "folder"), None),
    (["tenants", "--kubeconfig", "X"], ("missing", "folder"), None),
    (["scheduler", "--kubeconfig", "X"], ("missing", "folder"), None),
    (["extender", "--kubeconfig", "X", *TLS], ("missing", "folder"), None),
    *[(["extender", "--kubeconfig", "kubeconfig",
        *[("X" if i == k else v) for i, v in enumerate(TLS)]], ("missing", "folder"), None)
      for k in (1, 3, 5)],
    (["webhook", "--cert", "X", "--key", "tls.key", "--kubeconfig", "kubeconfig"],
     ("missing", "folder"), None),
    (["webhook", "--cert", "tls.crt", "--key", "X", "--kubeconfig", "kubeconfig"],
     ("missing", "folder"), None),
    (["webhook", "--cert", "tls.crt", "--key", "tls.key", "--kubeconfig", "X"],
     ("missing", "folder"), None),
    (["webhook", "--cert", "tls.crt", "--key", "tls.key", "--kubeconfig", "kubeconfig",
      "--client-ca", "X"], ("missing", "folder"), None),
    (["verify", "--cuda-lib", "X"], ("missing", "file"), None),
    (["top", "--once", "--kubeconfig", "X"], ("missing", "folder"), None),
    (["top", "--once", "--prometheus", PROM, "--queues", "X"], ("missing", "folder"), None),
    (["report", "--prometheus", PROM, "--out", "X"], ("file", "unwritable"), None),
    (["experiment", "fgd", "--trace-dir", "X", "--out", "o"], ("missing", "file"), None),
    (["experiment", "fgd", "--trace-dir", "trace", "--workload", "tiny", "--targets", "X",
      "--out", "o"], ("missing", "folder"), None),
    (["experiment", "fgd", "--trace-dir", "trace", "--workload", "tiny", "--seeds", "1",
      "--out", "X"], ("file", "unwritable", "input"), "trace"),
    (["plan", "mig", "--nodes", "X", "--pods", TP], ("missing", "folder"), None),
    (["plan", "mig", "--nodes", TN, "--pods", "X"], ("missing", "folder"), None),
    (["plan", "mig", "--nodes", TN, "--pods", TP, "--out", "X"],
     ("folder", "unwritable", "input"), TP),
    (["dev", "up", "--nodes", "X", "--dir", "dev"], ("missing", "folder"), None),
    (["dev", "demo", "--dir", "X"], ("missing", "file"), None),
    (["crd", "generate", "--out", "X"], ("file", "unwritable"), None),
    (["crd", "convert", "X"], ("missing", "folder"), None),
    (["node", "exporter", "--regions", "X"], ("missing", "file"), None),
    (["node", "device-plugin", "--node-name", "n1", "--devices", "X"], ("missing", "folder"),
     None),
    (["node", "device-plugin", "--node-name", "n1", "--kubeconfig", "X"],
     ("missing", "folder"), None),
    (["node", "run", "--node-name", "n1", "--config", "X"], ("missing", "folder"), None),
    (["node", "run", "--node-name", "n1", "--config", "node.yaml", "--mig-config", "X"],
     ("missing", "folder"), None),
    (["node", "run", "--node-name", "n1", "--config", "node.yaml", "--kubeconfig", "X"],
     ("missing", "folder"), None),
    (["node", "agent", "--node-name", "n1", "--mig-config", "X"], ("missing", "folder"), None),
    (["node", "agent", "--node-name", "n1", "--regions", "X"], ("missing", "file"), None),
    (["node", "agent", "--node-name", "n1", "--kubeconfig", "X"], ("missing", "folder"), None),
    (["node", "agent", "--node-name", "n1", "--nvidia-config", "X"], ("missing", "folder"),
     None),
    (["node", "exporter", "--simulate", "--kubeconfig", "X"], ("missing", "folder"), None),
    (["node", "dra-plugin", "--node-name", "n1", "--devices", "X"], ("missing", "folder"),
     None),
    (["node", "dra-plugin", "--node-name", "n1", "--kubeconfig", "X"], ("missing", "folder"),
     None),
    (["dra", "publish", "--kubeconfig", "X"], ("missing", "folder"), None),
    (["dra", "governor", "--kubeconfig", "X"], ("missing", "folder"), None),
]
# paths a running component uses later (the kubelet's folders, its state folder, a driver
# library): checked by the component when it starts, not fuzzed here
RUNTIME_PATHS = {("node device-plugin", "--plugin-dir"), ("node device-plugin", "--state-dir"),
                 ("node device-plugin", "--nvml-library"), ("node run", "--state-dir"),
                 ("node run", "--plugin-dir"), ("node run", "--nvml-library"),
                 ("node exporter", "--nvml-library"), ("node agent", "--nvml-library"),
                 ("node agent", "--state-dir"),
                 ("node dra-plugin", "--plugins-dir"), ("node dra-plugin", "--registry-dir"),
                 ("node dra-plugin", "--cdi-dir"), ("node dra-plugin", "--state-dir"),
                 ("dev up", "--dir"), ("dev kubectl", "--dir"), ("dev down", "--dir"),
                 ("verify", "--json")}


def _command_and_option(argv: list[str]) -> tuple[str, str]:
    i = argv.index("X")
    words = [a for a in argv[:i] if not a.startswith("-")]
    leaves = {c for c, _ in _leaves(get_command(app))}
    command = next(" ".join(words[:n]) for n in (2, 1) if " ".join(words[:n]) in leaves)
    option = argv[i - 1] if argv[i - 1].startswith("-") else get_command(app)
    return command, option if isinstance(option, str) else "ARG"


def test_every_path_option_is_in_the_fuzz_table() -> None:
    """A new path option joins the table (or RUNTIME_PATHS, with the reason)."""
    found = {(c, o) for c, o in _options_of_type((Path,))}
    covered = {_command_and_option(argv) for argv, _, _ in PATHS} | RUNTIME_PATHS
    arguments = {("openb-jobs", "pods"), ("crd convert", "sources")}
    assert found - arguments <= covered, sorted(found - arguments - covered)


def error_naming(res, *names: str) -> str:  # type: ignore[no-untyped-def]
    """Exit 2, no traceback; one `error:` line naming one of `names` (indented detail lines
    under it are the same error's list of problems)."""
    assert "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert lines and lines[0].startswith("error:"), res.output
    assert all(line[0].isspace() for line in lines[1:]), res.output
    assert any(n in lines[0] for n in names), (names, res.output)
    return lines[0]


PATH_FUZZ = [(argv, kind, source) for argv, kinds, source in PATHS for kind in kinds]


@pytest.mark.parametrize(("argv", "kind", "source"), PATH_FUZZ,
                         ids=[f"{' '.join(a)} {k}" for a, k, _ in PATH_FUZZ])
def test_hostile_paths_are_one_line_naming_the_path(place: Path, argv: list[str], kind: str,
                                                    source: str | None) -> None:
    _inputs(place)
    path = source if kind == "input" else PATH_CASES[kind]()
    assert path is not None
    before = tree_snapshot(place)
    res = runner.invoke(app, [path if a == "X" else a for a in argv])
    error_naming(res, path)
    assert tree_snapshot(place) == before


# --- loaders --------------------------------------------------------------------------------
CLUSTER = {"nodePools": [{"name": "a", "count": 2, "model": "A100-SXM4-80GB", "gpus": 4,
                          "cpuMilli": 96000, "memoryMiB": 1048576, "devices": [
                              {"index": "0", "mode": "mig", "layout": ["3g.40gb", "3g.40gb"]},
                              {"index": "1", "mode": "timeslice", "replicas": 2}]}]}
QUEUE_DOC = {"queues": [{"name": "a", "quota": {"gpu": 4}}, {"name": "b", "quota": {"gpu": 4}}],
             "tenants": [{"namespace": "ns-a", "queue": "a"}],
             "priorityClasses": [{"name": "low", "value": 10}]}
NODE_DOC = {"defaultMode": "timeslice", "timesliceReplicas": 4, "softSplit": 10}
MIG_DOC = {"version": "v1", "mig-configs": {"all-1g": [
    {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}}
KUBE_DOC = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
            "users": [{"name": "u", "user": {"token": "t"}}]}
HOSTILE: dict[str, bytes] = {
    "empty": b"", "not-utf8": b"\xff\xfe\x00x", "yaml-list": b"- a\n- b\n",
    "broken": b"a: [1, 2\n", "items-5": b"items: 5\n", "null": b"null\n", "text": b"hello\n",
    "deep": b"[" * 5000 + b"]" * 5000, "huge-int": b"count: 1" + b"0" * 400 + b"\n",
    "billion-laughs": b"a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\n"
                      b"d: [*c, *c, *c, *c]\n",
    "csv-garbage": b"name,,\n\x00\x01,\"unclosed\n",
}
# (loader, argv with X for the file, suffix, names the error may carry besides the file: a
# check that runs after a file that happens to be valid)
LOADER_COMMANDS: dict[str, tuple[list[str], str, tuple[str, ...]]] = {
    "cluster.yaml": ([*REPLAY[:2], "X", *REPLAY[3:]], ".yaml", ()),
    "jobs.csv": (["replay", "--nodes", TN, "--jobs", "X", "--queues", "q.yaml"], ".csv", ()),
    "pods CSV": (["openb-jobs", "X", "--out", "o.csv"], ".csv", ()),
    "nodes CSV": (["plan", "mig", "--nodes", "X", "--pods", TP], ".csv", ()),
    "queue config": (["replay", "--nodes", TN, "--jobs", "jobs.csv", "--queues", "X"], ".yaml",
                     ("jobs.csv",)),
    "queue config (crd convert)": (["crd", "convert", "X"], ".yaml", ()),
    "node config": (["node", "run", "--node-name", "n1", "--config", "X", "--kubeconfig",
                     MISSING], ".yaml", ("--kubeconfig",)),
    "mig config": (["node", "run", "--node-name", "n1", "--config", "node.yaml",
                    "--mig-config", "X", "--kubeconfig", MISSING], ".yaml", ("--kubeconfig",)),
    "device inventory": (["node", "device-plugin", "--node-name", "n1", "--devices", "X"],
                         ".json", ()),
    "kubeconfig": (["explain", "pod", "ns/p", "--kubeconfig", "X"], "", ("--kubeconfig",)),
}
LOADER_CASES = [(loader, kind) for loader in LOADER_COMMANDS for kind in HOSTILE]


@pytest.mark.parametrize(("loader", "kind"), LOADER_CASES,
                         ids=[f"{lo} {k}" for lo, k in LOADER_CASES])
def test_hostile_files_are_one_error_naming_the_file(place: Path, loader: str,
                                                     kind: str) -> None:
    _inputs(place)
    argv, suffix, after = LOADER_COMMANDS[loader]
    path = place / f"hostile{suffix}"
    path.write_bytes(HOSTILE[kind])
    before = tree_snapshot(place)
    res = runner.invoke(app, [str(path) if a == "X" else a for a in argv])
    error_naming(res, str(path), *after)  # an empty node.yaml is all defaults
    assert tree_snapshot(place) == before


@pytest.mark.parametrize(("loader", "text"), [
    ("cluster.yaml", "nodePools: [{name: a, count: 1000000000, model: A100-SXM4-80GB, gpus: 8}]"),
    ("node config", "timesliceReplicas: 1000000000000"),
    ("node config", "softSplit: 1000000000000"),
    ("mig config", "version: v1\nmig-configs: {x: [{devices: all, mig-enabled: true, "
                   "mig-devices: {1g.10gb: 1000000000000}}]}"),
    ("queue config", "queues: [{name: a, quota: {gpu: 1e400}}]"),
], ids=["cluster count", "timesliceReplicas", "softSplit", "mig-devices", "quota"])
def test_huge_counts_in_files_are_refused_naming_the_file(place: Path, loader: str,
                                                          text: str) -> None:
    """Every count in a file has an upper bound, named in the error (finding 1's rule)."""
    _inputs(place)
    argv, suffix, _ = LOADER_COMMANDS[loader]
    path = place / f"huge{suffix}"
    path.write_text(text + "\n")
    res = runner.invoke(app, [str(path) if a == "X" else a for a in argv])
    error_naming(res, str(path))


# hypothesis: a valid document with a few values swapped for hostile ones
HOSTILE_VALUES = st.one_of(
    st.sampled_from([None, True, "", "x", -1, 0, 10**30, -(10**30), 1e300, float("nan"),
                     float("inf"), float("-inf"), "1e400", [], {}, [[[]]], "🙂" * 3]),
    st.integers(), st.floats(), st.text(max_size=8))


@st.composite
def mutated(draw, doc):  # type: ignore[no-untyped-def]
    """`doc` (JSON-like) with 1-3 values replaced, keys dropped or unknown keys added."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 3))):
        node = doc
        while True:
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            key = draw(st.sampled_from(keys))
            child = node[key]
            if isinstance(child, (dict, list)) and child and draw(st.booleans()):
                node = child
                continue
            action = draw(st.sampled_from(["replace", "replace", "drop", "add"]))
            if action == "replace":
                node[key] = draw(HOSTILE_VALUES)
            elif action == "drop" and isinstance(node, dict):
                del node[key]
            elif isinstance(node, dict):
                node[draw(st.sampled_from(["extra", "Count", "gpu", "replicas"]))] = \
                    draw(HOSTILE_VALUES)
            break
    return doc


def _dump(doc: object, suffix: str) -> bytes:
    if suffix == ".json":
        return json.dumps(doc).encode()
    return yaml.safe_dump(doc, allow_unicode=True).encode()


def _inventory_doc() -> dict:
    from gpugov.k8s.annotations import Inventory, InventoryDevice, encode_inventory
    from gpugov.model.devices import DeviceMode

    inv = Inventory((InventoryDevice(0, "GPU-0", "A100-SXM4-80GB", 81920),
                     InventoryDevice(1, "GPU-1", "A100-SXM4-80GB", 81920, DeviceMode.SOFT,
                                     replicas=4)))
    return json.loads(encode_inventory(inv))


DOCS = {"cluster.yaml": CLUSTER, "queue config": QUEUE_DOC, "node config": NODE_DOC,
        "mig config": MIG_DOC, "kubeconfig": KUBE_DOC}
FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@pytest.mark.parametrize("loader", sorted(DOCS))
@FUZZ
@given(data=st.data())
def test_mutated_files_are_run_or_refused_naming_the_file(place: Path, loader: str,
                                                          data: st.DataObject) -> None:
    """Accepted (exit 0, or the next check's error) or one error naming the file."""
    if not (place / "jobs.csv").exists():
        _inputs(place)
    argv, suffix, after = LOADER_COMMANDS[loader]
    path = place / f"mutated{suffix}"
    path.write_bytes(_dump(data.draw(mutated(DOCS[loader])), suffix))
    res = runner.invoke(app, [str(path) if a == "X" else a for a in argv])
    assert "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    if res.exit_code != 0:
        error_naming(res, str(path), *after)


@FUZZ
@given(doc=mutated(_inventory_doc()))
def test_mutated_device_inventories_are_loaded_or_refused_naming_the_file(doc) -> None:
    """`--devices` (device plugin): a valid inventory or one ValueError naming the file (the
    command turns it into one `error:` line); never another exception."""
    from gpugov.node.deviceplugin.source import StaticDeviceSource

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "inventory.json"
        path.write_bytes(_dump(doc, ".json"))
        try:
            StaticDeviceSource.from_file(path)
        except ValueError as e:
            assert str(e).startswith(str(path)), e
