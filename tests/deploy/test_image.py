"""The chart's image (deploy/Dockerfile): its steps run outside a container engine, and, where
buildah and Debian's mirror are at hand, the image itself is built from a Debian root
filesystem (mmdebstrap) and `gpugov --version` and the exporter run inside it.

Every RUN step of the Dockerfile is `sh /usr/local/lib/gpugov-image/<script>` with a script
from deploy/image/, so the first test runs exactly those scripts on the files the Dockerfile
COPYs: a change that breaks the image breaks here, with or without an engine.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "Dockerfile"
SCRIPTS = REPO / "deploy" / "image"
TAG = "ghcr.io/gpugov/gpugov:0.1.0"
OFFLINE = ("No matching distribution", "CERTIFICATE_VERIFY_FAILED", "Failed to establish",
           "Temporary failure in name resolution", "Network is unreachable")


def _instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    return [(m.group(1).upper(), m.group(2).strip()) for m in
            re.finditer(r"^\s*([A-Za-z]+)\s+(.*)$", text, re.M) if not m.group(0).lstrip()
            .startswith("#")]


def _copy_context(dest: Path) -> None:
    """What the build stage COPYs from the context, and only that."""
    for op, arg in _instructions():
        if op != "COPY" or arg.startswith("--from"):
            continue
        *sources, _ = arg.split()
        for s in sources:
            src = REPO / s
            target = dest / s
            target.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, target, ignore=shutil.ignore_patterns(
                    "__pycache__", "*.so", "*.egg-info"))
            else:
                shutil.copy2(src, target)


def test_every_run_step_is_a_script_the_dockerfile_copies() -> None:
    steps = _instructions()
    runs = [arg for op, arg in steps if op == "RUN"]
    assert runs, "no RUN steps"
    copied = " ".join(arg for op, arg in steps if op == "COPY")
    for run in runs:
        words = shlex.split(run.split("&&")[0])
        assert words[:1] == ["sh"] and words[1].startswith("/usr/local/lib/gpugov-image/"), run
        script = SCRIPTS / Path(words[1]).name
        assert script.exists() and f"deploy/image/{script.name}" in copied, run
    # the wheel is built by setup.py (the enforcement library): it must be in the context
    assert re.search(r"^COPY .*\bsetup\.py\b", DOCKERFILE.read_text(), re.M)
    assert TAG.rsplit(":", 1)[1] in (REPO / "deploy/helm/gpugov/Chart.yaml").read_text()


def test_the_dockerfile_steps_build_and_install_gpugov_outside_an_engine(tmp_path: Path) -> None:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc): the wheel builds the enforcement library")
    ctx = tmp_path / "src"
    _copy_context(ctx)
    wheels, venv = tmp_path / "wheels", tmp_path / "opt-gpugov"
    build = subprocess.run(["sh", str(SCRIPTS / "build-wheels.sh"), str(ctx), str(wheels)],
                           capture_output=True, text=True, timeout=900)
    if build.returncode and any(s in build.stdout + build.stderr for s in OFFLINE):
        pytest.skip("no package index reachable for the dependency wheels: "
                    + (build.stdout + build.stderr).strip().splitlines()[-1])
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    inst = subprocess.run(["sh", str(SCRIPTS / "install.sh"), str(wheels), str(venv)],
                          capture_output=True, text=True, timeout=900)
    assert inst.returncode == 0, inst.stdout[-3000:] + inst.stderr[-3000:]
    assert inst.stdout.strip().splitlines()[-1] == "gpugov 0.1.0"
    lib = list(venv.glob("lib/python*/site-packages/gpugov/_native/libgpugov.so"))
    assert lib, "the installed package lacks the enforcement library"


# --- with an engine ---------------------------------------------------------------------

def _engine_missing() -> str | None:
    for tool in ("buildah", "mmdebstrap"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: apt-get install buildah mmdebstrap)"
    if os.geteuid() != 0:
        return "buildah's chroot isolation and mmdebstrap need root here"
    return None


def _buildah(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(["buildah", "--storage-driver", "vfs", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    why = _engine_missing()
    if why:
        pytest.skip(why)
    work = tmp_path_factory.mktemp("image")
    base = "localhost/gpugov-test-base:bookworm"
    if _buildah("inspect", base, timeout=60).returncode:
        root = work / "base.tar"
        made = subprocess.run(["mmdebstrap", "--variant=minbase",
                               "--include=python3,python3-venv,ca-certificates", "bookworm",
                               str(root)], capture_output=True, text=True, timeout=900)
        if made.returncode:
            pytest.skip(f"mmdebstrap could not build a Debian root: {made.stderr[-300:]}")
        (work / "Containerfile").write_text("FROM scratch\nADD base.tar /\n")
        got = _buildah("bud", "--isolation", "chroot", "-t", base, str(work))
        assert got.returncode == 0, got.stderr[-2000:]
    args = ["bud", "--isolation", "chroot", "--layers=false", "--build-arg", f"BASE={base}",
            "-f", str(DOCKERFILE), "-t", TAG]
    ca = Path("/etc/ssl/certs/ca-certificates.crt")
    if ca.exists():  # the host's CA bundle (a TLS-intercepting proxy's CA, if any)
        args += ["-v", f"{ca}:/etc/ssl/certs/host-ca.crt:ro",
                 "--build-arg", "PIP_CERT=/etc/ssl/certs/host-ca.crt"]
    got = _buildah(*args, str(REPO))
    if got.returncode and any(s in got.stdout + got.stderr for s in OFFLINE):
        pytest.skip("no package index reachable from the build: "
                    + (got.stdout + got.stderr).strip().splitlines()[-1])
    assert got.returncode == 0, (got.stdout + got.stderr)[-4000:]
    return TAG


@pytest.fixture
def container(image: str):
    name = _buildah("from", image, timeout=300).stdout.strip()
    yield name
    _buildah("rm", name, timeout=120)


def test_gpugov_runs_in_the_image_as_non_root(container: str) -> None:
    got = _buildah("run", "--isolation", "chroot", container, "--", "gpugov", "--version",
                   timeout=120)
    assert got.returncode == 0 and got.stdout.strip() == "gpugov 0.1.0", got.stderr
    who = _buildah("run", "--isolation", "chroot", container, "--", "id", "-u", timeout=120)
    assert who.stdout.strip() == "65532"
    webhook = _buildah("run", "--isolation", "chroot", container, "--", "gpugov", "webhook",
                       "--help", timeout=120)
    assert webhook.returncode == 0 and "--cert" in webhook.stdout


def test_the_exporter_serves_metrics_from_the_image(container: str, tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "tests" / "node"))
    from nvml_fake import A100_80, FakeNode, build_fakes, compiler

    if compiler() is None:
        pytest.skip("no C compiler (cc): the fake NVML needs one")
    libs = build_fakes(tmp_path / "nvml-build")
    node = FakeNode(tmp_path / "node")
    node.gpu(A100_80, "util 33 5")
    env = node.write()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mounts = ["-v", f"{libs.current}:/fake-nvml:ro", "-v", f"{node.dir}:{node.dir}:ro"]
    envs = ["--env", "LD_LIBRARY_PATH=/fake-nvml",
            *[x for k, v in env.items() for x in ("--env", f"{k}={v}")]]
    proc = subprocess.Popen(["buildah", "--storage-driver", "vfs", "run", "--isolation",
                             "chroot", *mounts, *envs, container, "--", "gpugov", "node",
                             "exporter", "--listen", f"127.0.0.1:{port}", "--hostname", "n1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        body = ""
        while not body:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    body = r.read().decode()
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"no metrics: {proc.stdout.read()}") from None
                time.sleep(0.5)
        assert re.search(r'^DCGM_FI_DEV_GPU_UTIL\{[^}]*gpu="0"[^}]*\} 33\.0$', body, re.M), body
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)
