"""One line for a YAML error: PyYAML's own message spans six lines of context and a caret,
which breaks the rule that an input error is one line naming the file."""

from __future__ import annotations


def one_line(exc: BaseException) -> str:
    """`line L, column C: problem` for a syntax error; the first line of anything else
    (RecursionError for input nested thousands deep, a bad timestamp, ...)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is not None and problem:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
