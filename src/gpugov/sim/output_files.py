"""Writing results: check the destination before any work, then all files or none.

Every command that writes goes through here, so the rules are the same everywhere:

- `check_folder` / `check_file` run *before* computing: a destination that is a file where a
  folder is expected (or the reverse), a device such as /dev/null, a place that cannot be
  created or written, or one of the command's own input files is refused at once.
- `write_folder` / `write_file` render nothing themselves: they take finished bytes, write
  them into a temporary folder beside the destination, and only then rename them into place.
  A full disk or any other write error leaves the destination as it was (no half-written
  files, no partial folder) and raises `OutputError` with one line to show the user.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path


class OutputError(ValueError):
    """A destination that cannot be used; the message names it and says why."""


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _writable_parent(path: Path, what: str) -> None:
    """The nearest existing ancestor of `path` must be a folder we may create things in."""
    parent = path.parent
    while not parent.exists():
        if parent == parent.parent:
            break
        parent = parent.parent
    if not parent.is_dir():
        raise OutputError(f"{what} {path}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{what} {path}: {parent} is not writable")


def _probe(folder: Path, what: str, path: Path) -> None:
    """Creating a file is the only honest test (read-only mounts, /proc, quotas)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".gpugov-probe-", dir=folder)
    except OSError as exc:
        raise OutputError(f"{what} {path}: cannot write in {folder}: "
                          f"{exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(name)


def check_folder(path: Path, inputs: Iterable[Path | None] = (), names: Iterable[str] = (),
                 what: str = "--out") -> None:
    """`path` is, or can become, a folder we can write; none of the files it will receive
    (`names`) is one of `inputs`."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{what} {path} exists and is not a folder")
    names = list(names)
    for src in inputs:
        if src is None:
            continue
        if _same(path, Path(src)):
            raise OutputError(f"{what} {path} is an input of this command; choose another "
                              "folder")
        for name in names:
            if _same(path / name, Path(src)):
                raise OutputError(f"{what} {path}: writing {name} would overwrite the input "
                                  f"{src}; choose another folder")
    if path.is_dir():
        _probe(path, what, path)
    else:
        _writable_parent(path, what)
        existing = path.parent
        while not existing.exists():
            existing = existing.parent
        _probe(existing, what, path)


def check_file(path: Path, inputs: Iterable[Path | None] = (), what: str = "--out") -> None:
    """`path` is, or can become, a regular file we can write; it is none of `inputs`."""
    path = Path(path)
    for src in inputs:
        if src is not None and (_same(path, Path(src))
                                or path.resolve() == Path(src).resolve()):
            raise OutputError(f"{what} {path} is an input of this command; refusing to "
                              "overwrite it (choose another file)")
    if path.exists():
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise OutputError(f"{what} {path} is a folder; give a file name")
        if not stat.S_ISREG(mode):
            raise OutputError(f"{what} {path} exists and is not a regular file")
    if str(path).endswith(("/", os.sep)):
        raise OutputError(f"{what} {path} names a folder; give a file name")
    _writable_parent(path, what)
    existing = path.parent
    while not existing.exists():
        existing = existing.parent
    _probe(existing, what, path)


def _fail(path: Path, exc: OSError) -> OutputError:
    return OutputError(f"cannot write {path}: {exc.strerror or exc}")


def write_folder(folder: Path, files: Mapping[str, bytes], stale: Iterable[str] = ()) -> list[Path]:
    """Put `files` (name -> bytes) into `folder` all together; delete the `stale` names a
    previous run may have left there (e.g. plots this run did not make)."""
    folder = Path(folder)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _fail(folder, exc) from None
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{folder} exists and is not a folder")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.gpugov-", dir=folder.parent))
    except OSError as exc:
        raise _fail(folder, exc) from None
    try:
        for name, data in files.items():
            with open(tmp / name, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        if not folder.exists():
            os.chmod(tmp, 0o777 & ~_umask())
            os.rename(tmp, folder)  # the whole folder appears at once
        else:
            for name in files:
                os.replace(tmp / name, folder / name)
        for name in stale:
            if name not in files:
                (folder / name).unlink(missing_ok=True)
    except OSError as exc:
        raise _fail(folder, exc) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [folder / n for n in files]


def write_file(path: Path, data: bytes) -> Path:
    """Write one file atomically (a temporary file beside it, then a rename)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.gpugov-", dir=path.parent)
    except OSError as exc:
        raise _fail(path, exc) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(name, 0o666 & ~_umask())
        os.replace(name, path)
    except OSError as exc:
        Path(name).unlink(missing_ok=True)
        raise _fail(path, exc) from None
    return path


def write_files(paths: Mapping[Path, bytes]) -> list[Path]:
    """Several single files (e.g. a plan and its labels): all written to temporaries first,
    renamed only when every one is complete."""
    temps: list[tuple[str, Path]] = []
    try:
        for path, data in paths.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f".{path.name}.gpugov-", dir=path.parent)
            temps.append((name, path))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(name, 0o666 & ~_umask())
        for name, path in temps:
            os.replace(name, path)
    except OSError as exc:
        for name, _ in temps:
            Path(name).unlink(missing_ok=True)
        raise _fail(next(iter(paths)), exc) from None
    return list(paths)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
