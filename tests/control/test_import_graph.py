"""The control modules import one another without a circle (issue 8 item 7).

Reads every `import` of src/gpugov/control, at module level, inside functions and under
`if TYPE_CHECKING:` alike (a function-level import that dodges a circle is still a circle), and
checks the graph is acyclic; then imports every module in a fresh interpreter in two orders.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import gpugov.control

CONTROL = Path(gpugov.control.__file__).parent
PACKAGE = "gpugov.control"


def _modules() -> list[str]:
    return sorted(p.stem for p in CONTROL.glob("*.py") if p.stem != "__init__")


def _imports(name: str) -> set[str]:
    """Control modules that module `name` imports, anywhere in its source."""
    tree = ast.parse((CONTROL / f"{name}.py").read_text(encoding="utf-8"))
    found: set[str] = set()
    known = set(_modules())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == PACKAGE:  # from gpugov.control import reasons
                found |= {a.name for a in node.names if a.name in known}
            elif node.module.startswith(PACKAGE + "."):
                found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(PACKAGE + "."):
                    found.add(a.name.split(".")[2])
    return found - {name}


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of `graph` as a path (first == last), or [] when there is none."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str]:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return []

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return []


def test_the_finder_sees_a_cycle_when_there_is_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_parser_sees_imports_inside_functions() -> None:
    graph = {m: _imports(m) for m in _modules()}
    assert "preemption" in graph["cycle"] and "bookkeeping" in graph["preemption"]
    assert "tree" in graph["config"] and "reasons" in graph["bookkeeping"]


def test_control_modules_import_no_circle() -> None:
    graph = {m: _imports(m) for m in _modules()}
    assert _cycle(graph) == [], " -> ".join(_cycle(graph))


def test_every_control_module_imports_alone_in_either_order() -> None:
    mods = [f"{PACKAGE}.{m}" for m in _modules()]
    for order in (mods, mods[::-1]):
        code = "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in order)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
