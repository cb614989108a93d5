"""Reading the text files users hand us (CSV exports, YAML), with one set of rules.

Users feed gpugov exports from their own clusters: Excel CSVs with a byte-order mark,
latin-1 bytes, huge or non-finite numbers, ragged rows. Every loader reads through this
module so each of those is refused the same way: one `InputFileError` naming the file, the
line, the field, the bad value and what is accepted. Nothing here raises anything else for
bad content.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: refuse files larger than this before reading them (a trace of millions of rows is ~100 MB)
MAX_FILE_BYTES = 2 * 1024**3


class InputFileError(ValueError):
    """An input file that cannot be used, with the place of the problem."""

    def __init__(self, path: Path | str, line: int | None, field: str | None, message: str):
        where = f"{path}" + (f", line {line}" if line is not None else "")
        where += f", field '{field}'" if field else ""
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.field = str(path), line, field


def read_text(path: Path | str) -> str:
    """The file as text: UTF-8 (a leading byte-order mark is dropped), else an error naming
    the line of the first byte that is not UTF-8."""
    path = Path(path)
    try:
        if path.is_dir():
            raise InputFileError(path, None, None, "is a folder, expected a file")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise InputFileError(path, None, None, f"{size} bytes; files up to "
                                 f"{MAX_FILE_BYTES} bytes are accepted")
        data = path.read_bytes()
    except OSError as exc:
        raise InputFileError(path, None, None, f"cannot read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        offset = exc.start + (3 if data.startswith(b"\xef\xbb\xbf") else 0)
        line = data[:offset].count(b"\n") + 1
        raise InputFileError(path, line, None,
                             f"byte 0x{data[offset]:02x} is not UTF-8 text; save the file as "
                             "UTF-8 (CSV UTF-8 in Excel)") from None


def csv_rows(path: Path | str, text: str | None = None) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of every row of a CSV file, stripped; blank rows skipped."""
    path = Path(path)
    text = read_text(path) if text is None else text
    lines = text.splitlines(keepends=True)
    reader = csv.reader(lines)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise InputFileError(path, reader.line_num, None, f"not valid CSV: {exc}") from None
        if not row or all(not c.strip() for c in row):
            continue
        yield reader.line_num, [c.strip() for c in row]


def read_table(path: Path | str, required: tuple[str, ...], text: str | None = None,
               optional: tuple[str, ...] | None = None) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row by column name) of a CSV whose header must hold `required`.

    Every row must have as many cells as the header; extra cells are accepted only when
    empty (trailing separators Excel writes). With `optional`, a header column that is
    neither required nor optional is refused with the closest known name: a misspelled
    optional column (`node_selectr`) would otherwise be ignored silently.
    """
    path = Path(path)
    rows = csv_rows(path, text)
    first = next(rows, None)
    if first is None:
        raise InputFileError(path, 1, None,
                             f"empty file; expected a header with {','.join(required)}")
    _, header = first
    missing = [c for c in required if c not in header]
    if missing:
        raise InputFileError(path, 1, missing[0],
                             f"missing column(s) {', '.join(missing)}; the header must "
                             f"contain {','.join(required)} (got {','.join(header)[:200]})")
    if optional is not None:
        known = (*required, *optional)
        unknown = [h for h in header if h and h not in known]
        if unknown:
            import difflib

            close = difflib.get_close_matches(unknown[0], known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InputFileError(path, 1, unknown[0],
                                 f"unknown column{hint} allowed: {', '.join(known)}")
    dupes = sorted({h for h in header if h and header.count(h) > 1})
    if dupes:
        raise InputFileError(path, 1, dupes[0], "column appears more than once in the header")
    width = len(header)
    for line, row in rows:
        if len(row) < width:
            raise InputFileError(path, line, header[len(row)],
                                 f"row has {len(row)} fields, the header has {width}")
        if len(row) > width and any(row[width:]):
            raise InputFileError(path, line, None,
                                 f"row has {len(row)} fields, the header has {width}")
        yield line, dict(zip(header, row, strict=False))


_INT = re.compile(r"[+-]?\d+")


def number(path: Path | str, line: int | None, row: dict[str, str], field: str, *,
           lo: float, hi: float, whole: bool = False, default: float | None = None) -> float:
    """The cell `field` as a finite number in [lo, hi] (and whole when `whole`).

    An empty cell is `default`, or an error when there is none. Whole numbers are parsed
    exactly (no float rounding), so 99999999999999999999 is reported as out of range.
    """
    raw = row.get(field, "").strip()
    if not raw:
        if default is not None:
            return default
        raise InputFileError(path, line, field, f"empty; expected a number in {_range(lo, hi)}")
    value: float
    if _INT.fullmatch(raw):
        value = int(raw)
    else:
        try:
            value = float(raw)
        except ValueError:
            raise InputFileError(path, line, field,
                                 f"{_show(raw)} is not a number; expected {_range(lo, hi)}"
                                 ) from None
        if not math.isfinite(value):
            raise InputFileError(path, line, field, f"{_show(raw)} is not a finite number; "
                                 f"expected {_range(lo, hi)}")
        if whole and not value.is_integer():
            raise InputFileError(path, line, field, f"{_show(raw)} must be a whole number")
    if not lo <= value <= hi:
        raise InputFileError(path, line, field,
                             f"{_show(raw)} is out of range; accepted: {_range(lo, hi)}")
    return int(value) if whole else float(value)


def _range(lo: float, hi: float) -> str:
    def fmt(x: float) -> str:
        return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"
    return f"{fmt(lo)}..{fmt(hi)}"


def _show(raw: str) -> str:
    return repr(raw if len(raw) <= 40 else raw[:37] + "...")


def _yaml_loader() -> type:
    """PyYAML's safe loader, plus YAML 1.2 floats: `1e18` is a number, not a string."""
    from gpugov.model.validation import yaml_loader

    return yaml_loader()


def load_yaml(path: Path | str) -> Any:
    """Parse a YAML file read through `read_text`; syntax errors name the line."""
    import yaml

    path = Path(path)
    text = read_text(path)
    try:
        return yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputFileError(path, line, None, f"not valid YAML: {problem}") from None
    except (ValueError, OverflowError, RecursionError) as exc:  # e.g. a bad timestamp
        raise InputFileError(path, None, None, f"not valid YAML: {exc}") from None
