"""The plugin's record of a prepared claim, `<state>/dra/<uid>.json`, read back safely.

Why: the record is what makes prepare idempotent and what unprepare and the sweep of gone
claims (`sweep.py`) remove from; a record that is truncated, hand-edited, huge or names
paths that are not the claim's own must fail alone, with a message naming the file, and must
never make the plugin delete anything but the claim's own files. So the read is bounded
(`MAX_RECORD_BYTES`), only a regular file is read (no symlink, FIFO or device), every field's
type is checked, the namespace and name must be Kubernetes names, the file name must be the
one the plugin gives that UID, and only board paths of the claim's own shape are kept.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from pathlib import Path

from gpugov.node.dra.prepare import NodePaths, Prepared, board_name

#: a record holds one claim's devices (at most 32 results) and its CDI spec: a few KiB
MAX_RECORD_BYTES = 1 << 20
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_UID = re.compile(r"^[A-Za-z0-9-]{1,128}$")


class RecordError(ValueError):
    """Why a record file cannot be used (names the file and what is wrong)."""


def record_path(state: Path, uid: str) -> Path:
    """`<state>/dra/<uid>.json`, the UID with anything but [A-Za-z0-9-_] as `_`."""
    return state / f"{''.join(c if c.isalnum() or c in '-_' else '_' for c in uid)}.json"


def read_bounded(path: Path, limit: int = MAX_RECORD_BYTES) -> str:
    """The text of a regular file of at most `limit` bytes; RecordError otherwise (a
    symlink, FIFO or device is not opened for reading, so a planted one cannot block)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RecordError(f"{path}: a symbolic link, not a record") from None
        raise RecordError(f"{path}: cannot be opened: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RecordError(f"{path}: not a regular file")
        if st.st_size > limit:
            raise RecordError(f"{path}: {st.st_size} bytes; allowed: at most {limit}")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise RecordError(f"{path}: over {limit} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise RecordError(f"{path}: not UTF-8 text") from None


def read_record(path: Path) -> Prepared:
    """The record at `path`, checked (RecordError naming the file and the field)."""
    text = read_bounded(path)
    try:
        prepared = Prepared.from_json(text)
    except ValueError as e:  # json.JSONDecodeError is one
        raise RecordError(f"{path}: {e}") from None
    if not _UID.match(prepared.uid):
        raise RecordError(f"{path}: uid {prepared.uid[:80]!r}; allowed: 1..128 of "
                          "[A-Za-z0-9-]")
    if record_path(path.parent, prepared.uid).name != path.name:
        raise RecordError(f"{path}: holds the record of UID {prepared.uid}, whose file is "
                          f"{record_path(path.parent, prepared.uid).name}")
    if not _NAMESPACE.match(prepared.namespace):
        raise RecordError(f"{path}: namespace {prepared.namespace[:80]!r} is not a "
                          "Kubernetes namespace name")
    if not _NAME.match(prepared.name):
        raise RecordError(f"{path}: name {prepared.name[:80]!r} is not a Kubernetes "
                          "object name")
    return prepared


def own_boards(paths: NodePaths, prepared: Prepared) -> tuple[list[Path], list[str]]:
    """(the record's board files that are the claim's own — `<state>/qos/<device>/
    claim_<ns>_<claim>_<uid>` —, the others, which are never removed)."""
    own = board_name(prepared.namespace, prepared.name, prepared.uid)
    qos = paths.state_dir / "qos"
    keep: list[Path] = []
    other: list[str] = []
    for b in prepared.boards:
        p = Path(b)
        if p.is_absolute() and p.name == own and p.parent.parent == qos \
                and p.parent.name not in ("", ".", ".."):
            keep.append(p)
        else:
            other.append(b)
    return keep, other


def remove_claim_files(paths: NodePaths, record: Path, namespace: str, name: str, uid: str,
                       prepared: Prepared | None) -> list[str]:
    """Remove what prepare wrote for a claim — its own board files (from the record), its CDI
    spec, its region folder, then the record — and return the board paths left because they
    are not the claim's own. Missing files are no error (unprepare may run twice); an OSError
    other than a missing file is raised (the caller reports it)."""
    left: list[str] = []
    if prepared is not None:
        boards, left = own_boards(paths, prepared)
        for board in boards:
            with contextlib.suppress(FileNotFoundError):
                board.unlink()
    with contextlib.suppress(FileNotFoundError):
        paths.spec_file(uid).unlink()
    region = paths.region_dir(namespace, name, uid)
    try:
        st = region.lstat()
    except FileNotFoundError:
        st = None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            import shutil

            shutil.rmtree(region)  # fd-based on Linux: links inside are not followed
        else:
            region.unlink()
    with contextlib.suppress(FileNotFoundError):
        record.unlink()
    return left
