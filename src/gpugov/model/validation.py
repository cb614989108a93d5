"""One wording for pydantic's validation errors, so every YAML a user writes (queue config,
cluster.yaml) names the bad field the same way: `nodePools[0].gpus: … (got -1)`."""

from __future__ import annotations

import re
from typing import Any

import yaml
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


def yaml_loader() -> type:
    """PyYAML's safe loader plus YAML 1.2 floats: `1e18` is a number, not a string (PyYAML
    follows YAML 1.1, which wants a dot: `1.0e18`). Every YAML gpugov reads goes through it."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:\d[\d_]*)?(?:\.\d*)?[eE][-+]?\d+$"),
        list("-+0123456789."))
    return Loader
