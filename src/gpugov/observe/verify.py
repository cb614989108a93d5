"""`gpugov verify`: node acceptance — run probe workloads and check each isolation claim.

Each claim is checked by what a probe process *did* (allocations, copies, kernel launches
through the CUDA driver API), not by reading configuration, so a node where the enforcement
library is missing or bypassed fails. Probes run in child processes (`probe.py`) with the
library preloaded; the limits they run under are chosen here from the card's real size.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CLAIMS = ("memory-view", "memory-cap", "scrub", "scrub-between-tenants", "compute-throttle",
          "mig-boundary", "metrics-agree")
CORE_LIMIT = 30  # percent the compute probe runs under
THROTTLE_TOLERANCE = 0.08  # |busy - limit| allowed, as a fraction of one device
MIB = 1 << 20


class VerifyInputError(ValueError):
    """Bad arguments (exit 2): the message names the option, the value and what is allowed."""


@dataclass(frozen=True)
class Claim:
    name: str
    status: str  # pass | fail | skipped
    evidence: str


@dataclass
class Setup:
    cuda_lib: Path | None
    library: Path | None  # None = run without the enforcement library
    seconds: float = 1.5


def resolve(cuda_lib: Path | None, library: str | None) -> Setup:
    """Check the options; `library` None = the installed one, "none" = without."""
    if cuda_lib is not None:
        if not cuda_lib.is_dir():
            raise VerifyInputError(f"--cuda-lib {cuda_lib}: not a folder; expected the folder "
                                   "holding libcuda.so.1 (and libnvidia-ml.so.1)")
        if not (cuda_lib / "libcuda.so.1").exists():
            raise VerifyInputError(f"--cuda-lib {cuda_lib}: has no libcuda.so.1")
        cuda_lib = cuda_lib.resolve()
    if library == "none":
        return Setup(cuda_lib, None)
    if library is None:
        from gpugov.node.native import NativeLibraryMissing, library_path

        try:
            return Setup(cuda_lib, library_path())
        except NativeLibraryMissing as e:
            raise VerifyInputError(f"{e} (or pass --library PATH, or --library none)") from None
    path = Path(library)
    if not path.is_file():
        raise VerifyInputError(f"--library {library}: no such file; expected the path of "
                               "libgpugov.so or 'none'")
    _shared_library(path, f"--library {library}")
    setup = Setup(cuda_lib, path.resolve())
    _loadable(setup, f"--library {library}")
    return setup


def _loadable(setup: Setup, what: str) -> None:
    """dlopen the library in a child (a program, another architecture or a missing
    dependency passes the ELF check but every preload of it would fail)."""
    assert setup.library is not None
    code = "import ctypes, sys\ntry:\n    ctypes.CDLL(sys.argv[1])\nexcept OSError as e:\n" \
        "    print(e)\n    sys.exit(3)\n"
    try:
        r = subprocess.run([sys.executable, "-c", code, str(setup.library)],
                           env=_env(setup, {}, preload=False), capture_output=True, text=True,
                           timeout=60)
    except subprocess.TimeoutExpired:
        return  # a slow start is not the library's fault: the probes will tell
    if r.returncode == 3:
        raise VerifyInputError(f"{what}: not a shared library that can be loaded "
                               f"({r.stdout.strip()}); expected the path of libgpugov.so "
                               "or 'none'")


def _shared_library(path: Path, what: str) -> None:
    """Refuse anything but an ELF shared object before a probe preloads it: a text file or a
    program would fail every probe and look like a broken node."""
    try:
        with path.open("rb") as fh:
            head = fh.read(18)
    except OSError as e:
        raise VerifyInputError(f"{what}: cannot read it: {e.strerror or e}") from None
    if len(head) < 18 or head[:4] != b"\x7fELF":
        raise VerifyInputError(f"{what}: not a shared library (no ELF header); expected the "
                               "path of libgpugov.so or 'none'")
    e_type = int.from_bytes(head[16:18], "little" if head[5] == 1 else "big")
    if e_type != 3:  # ET_DYN
        raise VerifyInputError(f"{what}: not a shared library (ELF type {e_type}, a shared "
                               "object is 3); expected the path of libgpugov.so or 'none'")


def inputs(setup: Setup) -> list[Path]:
    """The files `verify` reads: its report must never replace one of them."""
    files = [setup.library] if setup.library is not None else []
    if setup.cuda_lib is not None:
        files += [setup.cuda_lib / "libcuda.so.1", setup.cuda_lib / "libnvidia-ml.so.1"]
    return [f for f in files if f.exists()]


def check_output(setup: Setup, out: Path) -> None:
    """--json must name a new report, not an input (the library or driver under test)."""
    if not out.parent.is_dir():
        raise VerifyInputError(f"--json {out}: folder {out.parent} does not exist")
    if out.is_dir():
        raise VerifyInputError(f"--json {out}: is a folder; expected a file name")
    for f in inputs(setup):
        same = out.resolve() == f.resolve()
        if not same and out.exists():
            try:
                same = os.path.samefile(out, f)
            except OSError:
                same = False
        if same:
            raise VerifyInputError(f"--json {out}: is an input of verify ({f}); it would "
                                   "be overwritten. Choose another file")


def _env(setup: Setup, extra: dict[str, str], preload: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUGOV_") and k != "LD_PRELOAD"}
    if setup.cuda_lib is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            [str(setup.cuda_lib), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])])
    if preload and setup.library is not None:
        env["LD_PRELOAD"] = str(setup.library)
        env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[2]), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _probe(setup: Setup, args: list[str], extra: dict[str, str], preload: bool = True,
           on_line: Callable[[dict[str, Any], subprocess.Popen], None] | None = None,
           timeout: float = 120.0) -> list[dict[str, Any]]:
    proc = subprocess.Popen([sys.executable, "-m", "gpugov.observe.probe", *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=_env(setup, extra, preload), start_new_session=True)
    lines: list[dict[str, Any]] = []
    try:
        assert proc.stdout is not None and proc.stdin is not None
        for raw in proc.stdout:
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                continue
            lines.append(line)
            if on_line is not None:
                on_line(line, proc)
        proc.stdin.close()
        proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return lines


def _step(lines: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((x for x in lines if x.get("step") == name), None)


def _mib(n: float) -> str:
    return f"{n / MIB:.0f} MiB"


def card_info(setup: Setup) -> dict[str, Any]:
    """The card as the driver reports it without the library (raises VerifyInputError when
    there is no usable driver)."""
    lines = _probe(setup, ["info"], {}, preload=False)
    load = _step(lines, "load")
    if load:
        raise VerifyInputError(f"cannot load the CUDA driver: {load['error']}"
                               + ("" if setup.cuda_lib else "; pass --cuda-lib DIR"))
    info = _step(lines, "info")
    if info is None:  # the probe ended before it answered: say so, do not blame the driver
        raise VerifyInputError("the driver probe ended without an answer (a probe bug or a "
                               "library it could not use); run `python3 -m "
                               "gpugov.observe.probe info` to see its error")
    if info.get("init_rc"):
        rc = info.get("init_rc")
        raise VerifyInputError(f"the CUDA driver did not initialise (cuInit -> {rc}); no GPU "
                               "or driver on this machine?")
    return info


def check_memory(setup: Setup, limit: int, region: Path) -> list[Claim]:
    """memory-view, memory-cap, scrub and metrics-agree from one probe process."""
    seen: dict[str, Any] = {}

    def on_line(line: dict[str, Any], proc: subprocess.Popen) -> None:
        if line.get("step") == "hold":
            seen["region"] = _read_region(region)
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()

    extra = {"GPUGOV_MEMORY_LIMIT": str(limit), "GPUGOV_SHARED_REGION": str(region),
             "GPUGOV_SCRUB": "1"}
    lines = _probe(setup, ["memory", str(limit)], extra, on_line=on_line)
    init = _step(lines, "init")
    if init is None or init["rc"]:
        why = f"the probe's cuInit returned {init['rc']}" if init else "the probe gave no answer"
        return [Claim(n, "fail", why) for n in ("memory-view", "memory-cap", "scrub",
                                                 "metrics-agree")]
    out = []
    view = _step(lines, "view") or {}
    nvml = view.get("nvml") or {}
    totals = {"cuMemGetInfo": view.get("total"), "cuDeviceTotalMem": view.get("device_total")}
    if not nvml.get("rc") and "total" in nvml:
        totals["nvmlDeviceGetMemoryInfo"] = nvml["total"]
    wrong = {k: v for k, v in totals.items() if v != limit}
    shown = ", ".join(f"{k} total {_mib(v or 0)}" for k, v in totals.items())
    out.append(Claim("memory-view", "fail" if wrong else "pass",
                     f"limit {_mib(limit)}; {shown}"))
    cap = _step(lines, "cap") or {}
    allocated, chunk, refusal = cap.get("allocated", 0), cap.get("chunk", 0), cap.get("refusal")
    ok = refusal == 2 and limit - chunk < allocated <= limit
    out.append(Claim("memory-cap", "pass" if ok else "fail",
                     f"allocated {_mib(allocated)} in {_mib(chunk)} chunks under a "
                     f"{_mib(limit)} limit; next allocation "
                     + ("refused with CUDA_ERROR_OUT_OF_MEMORY" if refusal == 2 else
                        f"returned {refusal}" if refusal is not None else "was not refused")))
    scrub = _step(lines, "scrub") or {}
    if scrub.get("rc"):
        out.append(Claim("scrub", "fail", f"allocation for the scrub probe failed "
                         f"({scrub.get('rc')})"))
    else:
        stale = scrub.get("stale_bytes", 0)
        out.append(Claim("scrub", "fail" if stale else "pass",
                         f"wrote a pattern into {_mib(scrub.get('size', 0))}, freed it, "
                         f"allocated again ({'same' if scrub.get('reused') else 'other'} "
                         f"address): {stale} bytes of the old pattern visible"))
    hold = _step(lines, "hold") or {}
    held, reg = hold.get("bytes", 0), seen.get("region")
    if isinstance(reg, str):
        out.append(Claim("metrics-agree", "fail", f"probe held {_mib(held)}; {reg}"))
    else:
        charged = reg or 0
        out.append(Claim("metrics-agree", "pass" if held and charged == held else "fail",
                         f"probe held {_mib(held)}; the accounting region the exporter reads "
                         f"charged {_mib(charged)} to device 0"))
    return out


def _read_region(path: Path) -> int | str:
    """Bytes charged to device 0 in the region, or why it could not be read."""
    from gpugov.node.region import RegionError, read_region

    if not path.exists():
        return "no accounting region was written (is the enforcement library loaded?)"
    try:
        return int(read_region(path).used[0])
    except (RegionError, OSError) as e:
        return f"the accounting region is unreadable: {e}"


def check_handover_scrub(setup: Setup, size: int) -> Claim:
    """scrub-between-tenants: memory a process leaves at exit (no free the library could
    scrub) is zeroed by the node's scrub (gpugov.node.scrub) before the next tenant gets the
    device. Probes run without the library, as whole-GPU and MIG pods do. The node's device
    0 is scrubbed whole: run this on a node that holds no tenant yet."""
    from gpugov.node.scrub import scrub_device

    def peek() -> dict[str, Any]:
        return _step(_probe(setup, ["peek", str(size)], {}, preload=False), "peek") or {}

    left = _step(_probe(setup, ["leave", str(size)], {}, preload=False), "leave") or {}
    if left.get("rc") != 0:
        return Claim("scrub-between-tenants", "fail", "the probe could not leave data in "
                     f"device memory (CUDA error {left.get('rc', 'no answer')})")
    before = peek()
    _probe(setup, ["leave", str(size)], {}, preload=False)
    result = scrub_device(0, setup.cuda_lib)
    after = peek()
    seen = before.get("stale_bytes", "?")
    if not result.ok:
        return Claim("scrub-between-tenants", "fail", f"the node scrub failed: {result.error}")
    stale = after.get("stale_bytes")
    ok = after.get("rc") == 0 and stale == 0
    return Claim("scrub-between-tenants", "pass" if ok else "fail",
                 f"a process wrote a pattern into {_mib(size)} and exited without freeing it; "
                 f"without a scrub the next process saw {seen} bytes of it; the node scrub "
                 f"zeroed {_mib(result.bytes)} in {result.seconds:.3f} s "
                 f"({result.gib_per_second:.1f} GiB/s); after it the next process saw "
                 f"{stale if stale is not None else 'nothing (' + str(after.get('rc')) + ')'}"
                 " bytes of it")


def check_compute(setup: Setup) -> Claim:
    cal = _step(_probe(setup, ["calibrate"], {}, preload=False), "calibrate") or {}
    if cal.get("rc") or not cal.get("kernel_s"):
        return Claim("compute-throttle", "fail", "could not time a kernel without the "
                     f"library: {cal.get('error') or cal.get('rc') or 'no answer'}")
    lines = _probe(setup, ["compute", str(setup.seconds), repr(cal["kernel_s"])],
                   {"GPUGOV_CORE_LIMIT": str(CORE_LIMIT)})
    res = _step(lines, "compute")
    if res is None or "busy" not in res:
        why = (res or {}).get("error") or f"probe returned {(res or {}).get('rc')}"
        return Claim("compute-throttle", "fail", f"could not measure: {why}")
    busy, want = res["busy"], CORE_LIMIT / 100
    ok = abs(busy - want) <= THROTTLE_TOLERANCE
    return Claim("compute-throttle", "pass" if ok else "fail",
                 f"device busy {busy:.1%} of {res['wall_s']:.2f} s launching flat out under a "
                 f"{CORE_LIMIT} % limit ({res['launches']} kernels of "
                 f"{res['kernel_s'] * 1000:.2f} ms; allowed {want - THROTTLE_TOLERANCE:.0%}–"
                 f"{want + THROTTLE_TOLERANCE:.0%})")


def check_mig(info: dict[str, Any]) -> Claim:
    nvml = info.get("nvml") or {}
    if "error" in nvml:
        return Claim("mig-boundary", "skipped", f"NVML not available: {nvml['error']}")
    if nvml.get("mig_missing"):
        return Claim("mig-boundary", "skipped", "this NVML has no MIG functions (no "
                     f"{', '.join(nvml['mig_missing'])}): an older or minimal NVML")
    if nvml.get("mig_rc"):
        return Claim("mig-boundary", "skipped", f"device 0 has no MIG support "
                     f"(nvmlDeviceGetMigMode -> {nvml['mig_rc']})")
    if nvml.get("mig_mode") != 1:
        return Claim("mig-boundary", "skipped", "MIG is not enabled on device 0")
    sizes = nvml.get("mig_instance_bytes") or []
    if not sizes:
        return Claim("mig-boundary", "skipped", "MIG is enabled but no instance exists")
    total = info.get("total", 0)
    ok = total <= max(sizes)
    return Claim("mig-boundary", "pass" if ok else "fail",
                 f"CUDA device 0 shows {_mib(total)}; MIG instances hold "
                 f"{', '.join(_mib(s) for s in sizes)}")


def run(setup: Setup, say: Callable[[str], None] = lambda _step: None) -> list[Claim]:
    """Every claim of CLAIMS, in that order. `say(step)` as each probe begins (the run takes
    seconds: the compute probe alone launches for `setup.seconds`)."""
    say("reading the card (cuda, nvml)")
    info = card_info(setup)
    card = int(info.get("total") or 0)
    limit = max(16 * MIB, min(256 * MIB, (card // 4) // MIB * MIB))
    say(f"memory: view, cap, scrub, metrics under a {_mib(limit)} limit")
    with tempfile.TemporaryDirectory(prefix="gpugov-verify-") as tmp:
        memory = {c.name: c for c in check_memory(setup, limit, Path(tmp) / "region")}
    say(f"compute-throttle: kernels for {setup.seconds:g} s under a {CORE_LIMIT} % limit")
    compute = check_compute(setup)
    say("scrub-between-tenants: a process leaves memory, the node scrubs it")
    claims = {**memory, "compute-throttle": compute,
              "mig-boundary": check_mig(info),
              "scrub-between-tenants": check_handover_scrub(setup, min(64 * MIB, limit))}
    return [claims[n] for n in CLAIMS]


def report(claims: list[Claim]) -> dict[str, Any]:
    return {"claims": [asdict(c) for c in claims]}


def write_json(claims: list[Claim], path: Path) -> None:
    """Atomic: a reader sees the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(report(claims), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def exit_code(claims: list[Claim]) -> int:
    return 1 if any(c.status == "fail" for c in claims) else 0
