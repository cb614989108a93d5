"""One wording for pydantic's validation errors, so every YAML a user writes (queue config,
cluster.yaml) names the bad field the same way: `nodePools[0].gpus: … (got -1)`."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


def field_path(loc: tuple[Any, ...]) -> str:
    """`("queues", 0, "quota")` -> `queues[0].quota` (`<root>` for the document itself)."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out or "<root>"


def pydantic_problems(exc: ValidationError) -> list[str]:
    """One line per error: path, what is wrong, and the offending value when it is short."""
    problems = []
    for err in exc.errors():
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        value = err.get("input")
        shown = "" if isinstance(value, dict | list) else f" (got {value!r})"
        problems.append(f"{field_path(tuple(err['loc']))}: {msg}{shown}")
    return problems
