"""`gpugov verify` on the fake driver: every claim passes with the enforcement library, the
isolation claims fail without it, and bad input exits 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpugov.cli import app
from gpugov.observe.verify import CLAIMS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native"))
from native_build import build_all, compiler  # noqa: E402

ISOLATION = {"memory-view", "memory-cap", "scrub", "compute-throttle", "metrics-agree"}


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory):
    if compiler() is None:
        pytest.skip("no C compiler (cc) on PATH: the fake driver and library need one")
    return build_all(tmp_path_factory.mktemp("verify-native"), test_hooks=False)


def _verify(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, ["verify", *args])
    return r.exit_code, r.output


def test_all_claims_pass_with_the_library(fake, tmp_path: Path) -> None:
    out = tmp_path / "verify.json"
    code, text = _verify("--cuda-lib", str(fake.dir), "--library", str(fake.lib),
                         "--json", str(out))
    claims = json.loads(out.read_text())["claims"]
    assert [c["name"] for c in claims] == list(CLAIMS)
    assert all(set(c) == {"name", "status", "evidence"} for c in claims)
    status = {c["name"]: c["status"] for c in claims}
    assert {status[n] for n in ISOLATION} == {"pass"}, text
    # the fake NVML has no MIG: skipped, and says why
    mig = next(c for c in claims if c["name"] == "mig-boundary")
    assert mig["status"] == "skipped" and "MIG" in mig["evidence"]
    assert code == 0, text
    for c in claims:  # one human-readable line per claim, with its evidence
        assert f"{c['status'].upper():8} {c['name']:17} {c['evidence']}" in text


def test_verify_in_a_pipe_prints_its_probes_as_plain_lines(fake, monkeypatch) -> None:
    """Issue 23: the probes take seconds (more on a real card); each shows on stderr as it
    begins, also in a pipe; stdout keeps one line per claim and nothing else."""
    from gpugov.sim import progress

    real = progress.Steps
    monkeypatch.setattr(progress, "Steps", lambda *a, **k: real(
        *a, **{**k, "first_after": 0, "every": 3600}))
    r = CliRunner().invoke(app, ["verify", "--cuda-lib", str(fake.dir), "--library",
                                 str(fake.lib)])
    assert r.exit_code == 0, r.output
    lines = r.stderr.splitlines()
    begins = ["verify: starting, ", "verify: reading the card ", "verify: memory: ",
              "verify: compute-throttle: ", "verify: scrub-between-tenants: "]
    assert len(lines) == len(begins), r.stderr
    assert all(line.startswith(b) for line, b in zip(lines, begins, strict=True)), r.stderr
    assert [line.split()[1] for line in r.stdout.splitlines()] == list(CLAIMS)


def test_isolation_claims_fail_without_the_library(fake, tmp_path: Path) -> None:
    out = tmp_path / "verify.json"
    code, text = _verify("--cuda-lib", str(fake.dir), "--library", "none", "--json", str(out))
    status = {c["name"]: c for c in json.loads(out.read_text())["claims"]}
    assert code == 1, text
    for name in ISOLATION:
        assert status[name]["status"] == "fail", (name, status[name]["evidence"])
    assert "1024 MiB" in status["memory-view"]["evidence"]  # the whole card shows
    assert "no accounting region" in status["metrics-agree"]["evidence"]


@pytest.mark.parametrize("args, words", [
    (["--cuda-lib", "/nonexistent-dir"], "not a folder"),
    (["--library", "/nonexistent/libgpugov.so"], "no such file"),
])
def test_bad_input_exits_2(fake, args, words) -> None:
    if args[0] == "--library":
        args = ["--cuda-lib", str(fake.dir), *args]
    code, text = _verify(*args)
    assert code == 2 and words in text, text


def test_a_folder_without_the_driver_exits_2(tmp_path: Path) -> None:
    code, text = _verify("--cuda-lib", str(tmp_path), "--library", "none")
    assert code == 2 and "has no libcuda.so.1" in text


def test_json_into_a_missing_folder_exits_2(fake, tmp_path: Path) -> None:
    code, text = _verify("--cuda-lib", str(fake.dir), "--library", "none",
                         "--json", str(tmp_path / "no" / "r.json"))
    assert code == 2 and "does not exist" in text


@pytest.mark.parametrize("cuda_gib, status", [(80, "fail"), (30, "pass")])
def test_mig_boundary_fails_when_cuda_sees_more_than_the_instance(fake, tmp_path: Path,
                                                                  monkeypatch, cuda_gib,
                                                                  status) -> None:
    """MIG on (one 3g.40gb instance): CUDA showing the whole 80 GiB card means the container
    is not confined to its instance; a device no larger than the instance passes."""
    conf = tmp_path / "nvml.conf"
    conf.write_text("driver 550.107.02 12040\n"
                    "device GPU-00000000-1111-2222-3333-000000000000 0x20B210DE "
                    "00000000:10:00.0 81920 NVIDIA A100-SXM4-80GB\n"
                    "mig-mode 0 1\ngi 0 9 0\n")
    (tmp_path / "nvml.events").touch()
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(conf))
    monkeypatch.setenv("FAKE_NVML_EVENTS", str(tmp_path / "nvml.events"))
    monkeypatch.setenv("FAKECUDA_MEM_BYTES", str(cuda_gib << 30))
    out = tmp_path / "verify.json"
    _verify("--cuda-lib", str(fake.dir), "--library", str(fake.lib), "--json", str(out))
    mig = next(c for c in json.loads(out.read_text())["claims"] if c["name"] == "mig-boundary")
    assert mig["status"] == status, mig
    assert f"shows {cuda_gib * 1024} MiB" in mig["evidence"] and "40192 MiB" in mig["evidence"]


def test_class13_verify_checks_the_scrub_between_tenants(fake, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # the fake's device memory outlives its processes here, as a GPU's does: what a process
    # leaves at exit is visible to the next one unless the node scrubs the device
    monkeypatch.setenv("FAKECUDA_DEVICE_FILE", str(tmp_path / "gpu0.mem"))
    out = tmp_path / "verify.json"
    code, text = _verify("--cuda-lib", str(fake.dir), "--library", "none", "--json", str(out))
    claim = next(c for c in json.loads(out.read_text())["claims"]
                 if c["name"] == "scrub-between-tenants")
    assert claim["status"] == "pass", claim
    ev = claim["evidence"]
    assert "without a scrub the next process saw 67108864 bytes" in ev  # the residue is real
    assert "after it the next process saw 0 bytes" in ev and "GiB/s" in ev


def test_finding16_a_text_file_as_library_exits_2_not_a_shared_library(fake,
                                                                      tmp_path: Path) -> None:
    text_file = tmp_path / "libgpugov.so"
    text_file.write_text("this is not a library\n")
    code, text = _verify("--cuda-lib", str(fake.dir), "--library", str(text_file))
    assert code == 2 and "not a shared library" in text, text
    assert "enforcement library loaded" not in text
    code, text = _verify("--cuda-lib", str(fake.dir), "--library", str(fake.dir / "drvtest"))
    assert code == 2 and "not a shared library" in text, text  # a program (PIE), not a .so


@pytest.mark.parametrize("which", ["library", "libcuda.so.1", "libnvidia-ml.so.1"])
def test_finding16_json_never_overwrites_an_input(fake, tmp_path: Path, which: str) -> None:
    lib = tmp_path / "libgpugov.so"
    lib.write_bytes(fake.lib.read_bytes())
    target = lib if which == "library" else fake.dir / which
    before = target.read_bytes()
    code, text = _verify("--cuda-lib", str(fake.dir), "--library", str(lib),
                         "--json", str(target))
    assert code == 2, text
    assert str(target) in text and "input" in text, text
    assert target.read_bytes() == before


def test_finding16_an_nvml_without_mig_functions_skips_that_check(fake,
                                                                 tmp_path: Path) -> None:
    """An older or minimal NVML (no nvmlDeviceGetMigMode...) degrades mig-boundary alone;
    the driver is not blamed."""
    import subprocess

    from native_build import WARN

    src = tmp_path / "minimal_nvml.c"
    src.write_text(
        "#define EXPORT __attribute__((visibility(\"default\")))\n"
        "typedef struct { unsigned long long total, free, used; } mem_t;\n"
        "EXPORT int nvmlInit_v2(void) { return 0; }\n"
        "EXPORT int nvmlShutdown(void) { return 0; }\n"
        "EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) {\n"
        "  if (i) { return 2; }\n  *h = (void *)1;\n  return 0;\n}\n"
        "EXPORT int nvmlDeviceGetMemoryInfo(void *h, mem_t *m) {\n"
        "  (void)h; m->total = 1024ull << 20; m->free = m->total; m->used = 0; return 0; }\n")
    drv = tmp_path / "driver"
    drv.mkdir()
    (drv / "libcuda.so.1").symlink_to(fake.dir / "libcuda.so.1")
    subprocess.run([compiler(), *WARN, "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
                    "-o", str(drv / "libnvidia-ml.so.1"), str(src)], check=True)
    out = tmp_path / "verify.json"
    code, text = _verify("--cuda-lib", str(drv), "--library", "none", "--json", str(out))
    assert "did not initialise" not in text and code != 2, text
    mig = next(c for c in json.loads(out.read_text())["claims"] if c["name"] == "mig-boundary")
    assert mig["status"] == "skipped", mig
    assert "this NVML has no MIG functions" in mig["evidence"], mig
