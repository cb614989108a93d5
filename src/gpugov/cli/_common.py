"""Helpers every command group shares: input errors (exit 2), option checks, the
kubeconfig rule, output-path checks. Heavy imports stay inside the functions."""

from __future__ import annotations

from pathlib import Path

import typer

MODEL_HELP = ("GPU model, e.g. A100-SXM4-40GB, H100-SXM5-80GB (NVML names such as "
              "'NVIDIA H100 80GB HBM3' and any letter case work too)")


#: the longest interval, timeout or grace an option takes: more is a typo, and 1e300 s
#: overflows the event loop's timers
MAX_SECONDS = 7 * 24 * 3600


def _positive_seconds(value: float) -> float:
    """Option callback: seconds, a finite number > 0 and at most a week (NaN and ±inf pass
    click's float parsing)."""
    import math

    if value is not None and (not math.isfinite(value) or not 0 < value <= MAX_SECONDS):
        raise typer.BadParameter(f"must be a finite number > 0 and <= {MAX_SECONDS} (a week), "
                                 f"got {value!r}")
    return value


def _nonnegative_seconds(value: float) -> float:
    """Option callback: seconds, a finite number >= 0 and at most a week."""
    import math

    if value is not None and (not math.isfinite(value) or not 0 <= value <= MAX_SECONDS):
        raise typer.BadParameter(f"must be a finite number >= 0 and <= {MAX_SECONDS} (a week), "
                                 f"got {value!r}")
    return value


def _finite_nonnegative(value: float) -> float:
    """Option callback: a finite number >= 0."""
    import math

    if value is not None and (not math.isfinite(value) or value < 0):
        raise typer.BadParameter(f"must be a finite number >= 0 (got {value!r})")
    return value


def _fail(message: str) -> typer.Exit:
    """Print an input error and return the exit for `raise` (code 2 = bad input)."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _warn(message: str) -> None:
    typer.echo(f"warning: {message}", err=True)


def _renamed(new_value, old_value, old: str, new: str, default=None):  # type: ignore[no-untyped-def]
    """A deprecated option spelling still works (hidden from --help) and says what to use."""
    if old_value is None:
        return new_value
    _warn(f"{old} is deprecated; use {new}")
    if new_value is not None and new_value != default and new_value != old_value:
        raise _fail(f"give {new} or {old}, not both")
    return old_value


def _console():  # type: ignore[no-untyped-def]
    """A console as wide as the terminal (tables wrap their cells instead of the screen)."""
    from rich.console import Console

    return Console()


def _check_out_folder(out: Path, inputs: list[Path | None], names=()) -> None:  # type: ignore[no-untyped-def]
    from gpugov.sim.output_files import OutputError, check_folder

    try:
        check_folder(out, inputs, names)
    except OutputError as e:
        raise _fail(str(e)) from None


def _check_out_file(out: Path, inputs: list[Path | None]) -> None:
    from gpugov.sim.output_files import OutputError, check_file

    try:
        check_file(out, inputs)
    except OutputError as e:
        raise _fail(str(e)) from None


def _kubeconfig_file(kubeconfig: Path | None) -> Path | None:
    """The kubeconfig, checked (`k8s/kubeconfig.py`): a broken, empty or missing one exits 2
    with one line, never a traceback. None (in-cluster credentials) passes through."""
    from gpugov.k8s.kubeconfig import KubeconfigError, check_kubeconfig

    if kubeconfig is None:
        return None
    try:
        return check_kubeconfig(kubeconfig)
    except KubeconfigError as e:
        raise _fail(str(e)) from None


def _policy_name(policy: str) -> str:
    from gpugov.placement.registry import get_policy

    try:
        return get_policy(policy).name
    except KeyError as e:
        raise _fail(str(e.args[0])) from None


def _listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise _fail(f"--listen {value!r}: expected HOST:PORT, e.g. 0.0.0.0:9402")
    return host.strip("[]"), int(port)


def _label_pairs(text: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise _fail(f"--node-selector {text!r}: expected key=value[,key=value]")
        pairs.append((key, value))
    return tuple(pairs)


def _mig_geometry(model: str):  # type: ignore[no-untyped-def]
    """(catalog name, MIG geometry) of a model as the user spelled it; exit 2 if unknown."""
    from gpugov.model.catalog import canonical_model
    from gpugov.model.mig import get_geometry

    name = canonical_model(model)
    try:
        return name, get_geometry(name)
    except KeyError as e:
        raise _fail(f"--model: {e.args[0]}") from None
