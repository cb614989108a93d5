"""Build the upstream control-plane binaries from their Go modules, once, into a versioned cache.

No release binaries can be downloaded on the project's machines, so kube-apiserver,
kube-controller-manager, kube-scheduler, kubectl (k8s.io/kubernetes), etcd and kwok are built
from the Go module proxy, the way controller-runtime's envtest would use downloaded ones.
k8s.io/kubernetes has `replace` directives, so it is built through a small wrapper module that
replaces every staging module with its published version (derived from the served go.mod, not
hard-coded); etcd gets its own wrapper (their otel pins conflict). Outputs go to
`${XDG_CACHE_HOME:-~/.cache}/gpugov/k8s-v<VERSION>/bin`, never into the repo. A file lock keeps two
concurrent builds apart; `build.json` beside the binaries records build times and sizes.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

K8S_VERSION = "1.34.2"
ETCD_VERSION = "3.6.5"
KWOK_VERSION = "0.7.0"
HELM_VERSION = "3.22.0"
K8S_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
ALL_BINARIES = (*K8S_COMMANDS, "etcd", "kwok")


class BuildError(RuntimeError):
    """A build step failed; the message carries the command and the tail of its output."""


def cache_root() -> Path:
    """`${XDG_CACHE_HOME:-~/.cache}/gpugov/k8s-v<VERSION>`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpugov" / f"k8s-v{K8S_VERSION}"


def bin_dir() -> Path:
    return cache_root() / "bin"


def cache_problem(e: OSError) -> str:
    """One line for an OSError on the binary cache, naming the variable that chose it."""
    var = (f"XDG_CACHE_HOME={os.environ['XDG_CACHE_HOME']}" if os.environ.get("XDG_CACHE_HOME")
           else f"HOME={Path.home()}")
    return (f"cannot use the binary cache {cache_root()} ({var}): "
            f"{e.strerror or e}{f': {e.filename}' if e.filename else ''}; "
            "set XDG_CACHE_HOME to a writable folder")


def ensure_cache_root() -> Path:
    """Create the cache folder now, so a bad XDG_CACHE_HOME is one clear line (BuildError)."""
    try:
        cache_root().mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BuildError(cache_problem(e)) from None
    return cache_root()


def go_binary() -> str | None:
    """The `go` command, or None when Go is not installed."""
    found = shutil.which("go")
    if found:
        return found
    fallback = Path("/usr/local/go/bin/go")
    return str(fallback) if fallback.exists() else None


def missing(names: tuple[str, ...] = ALL_BINARIES, where: Path | None = None) -> list[str]:
    where = where or bin_dir()
    return [n for n in names if not os.access(where / n, os.X_OK)]


@dataclass
class BuildReport:
    """What one `ensure_binaries` did: seconds per step (0 = cached) and binary sizes."""

    steps: dict[str, float]
    sizes: dict[str, int]
    total_s: float

    def as_dict(self) -> dict:
        return {"steps_s": self.steps, "sizes_bytes": self.sizes, "total_s": self.total_s}


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> str:
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(argv)}  (in {cwd})\n")
        out.flush()
        proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
        out.write(proc.stdout)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-25:])
        raise BuildError(f"`{' '.join(argv)}` failed (exit {proc.returncode}) in {cwd}; "
                         f"full log: {log}\n{tail}")
    return proc.stdout


def _go_env(go: str) -> dict[str, str]:
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"
    env.setdefault("GOTOOLCHAIN", "local")
    env.setdefault("GOFLAGS", "-buildvcs=false")
    env["PATH"] = f"{Path(go).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _k8s_wrapper(go: str, src: Path, env: dict[str, str], log: Path) -> None:
    """The wrapper module requiring k8s.io/kubernetes with every staging module replaced."""
    src.mkdir(parents=True, exist_ok=True)
    if (src / ".ready").exists():
        return
    if not (src / "go.mod").exists():
        _run([go, "mod", "init", "gpugov.local/k8sbin"], src, env, log)
    info = json.loads(_run([go, "mod", "download", "-json", f"k8s.io/kubernetes@v{K8S_VERSION}"],
                           src, env, log).split("\n$")[0])
    gomod = Path(info["GoMod"]).read_text()
    staging = re.findall(r"^\s*(k8s\.io/[a-z0-9-]+)\s+=>\s+\./staging", gomod, re.M)
    if not staging:
        raise BuildError(f"no staging replaces found in {info['GoMod']}")
    minor = K8S_VERSION.split(".", 1)[1]
    _run([go, "mod", "edit", *[f"-replace={m}={m}@v0.{minor}" for m in staging]], src, env, log)
    godebug = re.findall(r"^godebug .*$", gomod, re.M)
    if godebug:
        with open(src / "go.mod", "a") as fh:
            fh.write("\n" + "\n".join(godebug) + "\n")
    _run([go, "get", "-tool",
          *[f"k8s.io/kubernetes/cmd/{c}@v{K8S_VERSION}" for c in K8S_COMMANDS]], src, env, log)
    (src / ".ready").write_text(f"{len(staging)} staging modules\n")


def _ldflags() -> str:
    major, minor, _ = K8S_VERSION.split(".")
    return (f"-s -w -X k8s.io/component-base/version.gitVersion=v{K8S_VERSION} "
            f"-X k8s.io/component-base/version.gitMajor={major} "
            f"-X k8s.io/component-base/version.gitMinor={minor}")


def _build_k8s(go: str, root: Path, out: Path, env: dict[str, str], log: Path,
               names: list[str]) -> None:
    src = root / "src" / "kubernetes"
    _k8s_wrapper(go, src, env, log)
    _run([go, "build", "-trimpath", "-ldflags", _ldflags(), "-o", str(out) + "/",
          *[f"k8s.io/kubernetes/cmd/{c}" for c in names]], src, env, log)


def _build_etcd(go: str, root: Path, out: Path, env: dict[str, str], log: Path) -> None:
    src = root / "src" / "etcd"
    src.mkdir(parents=True, exist_ok=True)
    if not (src / "go.mod").exists():
        _run([go, "mod", "init", "gpugov.local/etcdbin"], src, env, log)
    if not (src / ".ready").exists():
        _run([go, "get", "-tool", f"go.etcd.io/etcd/server/v3@v{ETCD_VERSION}"], src, env, log)
        (src / ".ready").write_text("ok\n")
    _run([go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(out / "etcd"),
          "go.etcd.io/etcd/server/v3"], src, env, log)


def _go_install(go: str, pkg: str, out: Path, env: dict[str, str], log: Path) -> None:
    env = dict(env, GOBIN=str(out))
    _run([go, "install", "-trimpath", "-ldflags", "-s -w", pkg], out, env, log)


def ensure_binaries(names: tuple[str, ...] = ALL_BINARIES,
                    progress: Callable[[str], None] | None = None,
                    include_helm: bool = False) -> BuildReport:
    """Build whatever of `names` is not in the cache yet (and helm if asked); returns timings.

    Raises BuildError when Go is absent or a build fails.
    """
    go = go_binary()
    wanted = tuple(names) + (("helm",) if include_helm else ())
    root = cache_root()
    out = root / "bin"
    steps: dict[str, float] = {}
    t0 = time.monotonic()
    if missing(wanted, out):
        if go is None:
            raise BuildError("Go is not installed: gpugov builds kube-apiserver, etcd and kwok "
                             "from their Go modules (install Go >= 1.24)")
        env = _go_env(go)
        log = root / "build.log"
        with _locked(root / "build.lock"):
            out.mkdir(parents=True, exist_ok=True)
            say = progress or (lambda _msg: None)
            k8s = [n for n in K8S_COMMANDS if n in wanted and n in missing(wanted, out)]
            if k8s:
                say(f"building {', '.join(k8s)} v{K8S_VERSION} from k8s.io/kubernetes")
                t = time.monotonic()
                _build_k8s(go, root, out, env, log, k8s)
                steps["kubernetes"] = round(time.monotonic() - t, 1)
            if "etcd" in wanted and missing(("etcd",), out):
                say(f"building etcd v{ETCD_VERSION}")
                t = time.monotonic()
                _build_etcd(go, root, out, env, log)
                steps["etcd"] = round(time.monotonic() - t, 1)
            if "kwok" in wanted and missing(("kwok",), out):
                say(f"building kwok v{KWOK_VERSION}")
                t = time.monotonic()
                _go_install(go, f"sigs.k8s.io/kwok/cmd/kwok@v{KWOK_VERSION}", out, env, log)
                steps["kwok"] = round(time.monotonic() - t, 1)
            if "helm" in wanted and missing(("helm",), out):
                say(f"building helm v{HELM_VERSION}")
                t = time.monotonic()
                _go_install(go, f"helm.sh/helm/v3/cmd/helm@v{HELM_VERSION}", out, env, log)
                steps["helm"] = round(time.monotonic() - t, 1)
    sizes = {n: (out / n).stat().st_size for n in wanted if (out / n).exists()}
    report = BuildReport(steps, sizes, round(time.monotonic() - t0, 1))
    if steps:
        record = root / "build.json"
        history = json.loads(record.read_text()) if record.exists() else []
        history.append({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        **report.as_dict()})
        record.write_text(json.dumps(history, indent=1))
    return report


def main(argv: list[str] | None = None) -> int:
    """`python -m gpugov.k8s.devcluster.build [--helm | --helm-only]` (CI setup scripts)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    names: tuple[str, ...] = () if "--helm-only" in args else ALL_BINARIES
    helm = "--helm" in args or "--helm-only" in args
    try:
        report = ensure_binaries(names, progress=lambda m: print(m, flush=True),
                                 include_helm=helm)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"bin": str(bin_dir()), **report.as_dict()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
