"""typer without its two slow imports on the common paths, with the same results.

typer builds a pydantic TypeAdapter to coerce every option value, even one not given (a
`None` it returns untouched), so every command, `--help` included, imported pydantic (about
0.1 s of CPU). And its help formatter imports rich's Markdown and Traceback at module level
(markdown-it, pygments, attrs: about 0.07 s), though gpugov's help never renders Markdown and
a traceback is only drawn when a command crashes.

`install()` changes two things, both falling back to typer's own code whenever in doubt:
- a value of the plain kinds gpugov's options use (str, int, float, bool, Path and lists of
  them, without min/max, parsers or files) that is already well formed is converted the way
  typer's adapter converts it (`fast_value`); anything else goes through typer's adapter, so
  errors read exactly as before. tests/test_cli_startup.py checks both paths agree.
- while `typer.rich_utils` is imported, `rich.markdown` and `rich.traceback` are stand-ins
  whose classes import the real module when first used.
Every step is guarded: another typer layout leaves typer as it is.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

#: what typer's int and float adapters accept from the command line and how they read it,
#: restricted to the plainest spellings (everything else, e.g. " 1_0", goes to pydantic)
_INT = re.compile(r"-?[0-9]{1,18}")
_FLOAT = re.compile(r"-?[0-9]{1,15}(\.[0-9]{1,15})?")
_NOT_FAST = object()


def _leaf(value: Any, kind: type, path_type: type | None) -> Any:
    """`value` as typer's adapter for `kind` returns it, or _NOT_FAST."""
    vt = type(value)
    if kind is str:
        return value if vt is str else _NOT_FAST
    if kind is bool:
        return value if vt is bool else _NOT_FAST
    if kind is int:
        if vt is int:
            return value
        return int(value) if vt is str and _INT.fullmatch(value) else _NOT_FAST
    if kind is float:
        if vt is float:
            return value
        if vt is int and abs(value) < 2**53:
            return float(value)
        return float(value) if vt is str and _FLOAT.fullmatch(value) else _NOT_FAST
    if kind is Path and path_type is Path:  # a str becomes Path(str), as pydantic's Path does
        if vt is str and value and "\x00" not in value:
            return Path(value)
        return value if isinstance(value, Path) else _NOT_FAST
    return _NOT_FAST


def _plain_kind(descriptor: Any) -> tuple[type, bool, type | None] | None:
    """(leaf kind, is a list, Path type) when `descriptor` is one `fast_value` handles."""
    from typing import get_args, get_origin

    info = descriptor.parameter_info
    if descriptor.file_annotation is not None or info.parser is not None:
        return None
    annotation, many = descriptor.annotation, False
    if get_origin(annotation) is list:
        (annotation,), many = get_args(annotation), True
    if annotation in (int, float) and (info.min is not None or info.max is not None
                                       or info.clamp):
        return None
    if annotation in (str, int, float, bool):
        return annotation, many, None
    if annotation is Path:
        return Path, many, info.path_type if info.path_type is not None else Path
    return None


def fast_value(descriptor: Any, value: Any, param: Any, ctx: Any) -> Any:
    """What typer's coercion returns for `value`, without pydantic; _NOT_FAST when unsure."""
    kind = _plain_kind(descriptor)
    if kind is None:
        return _NOT_FAST
    leaf, many, path_type = kind
    items = (list(value) if isinstance(value, (list, tuple)) else [value]) if many else [value]
    out = [_leaf(v, leaf, path_type) for v in items]
    if any(v is _NOT_FAST for v in out):
        return _NOT_FAST
    if leaf is Path:  # typer's own checks (exists, resolve_path ...) on the Path
        from typer._param_types import coerce_cli_path

        try:
            out = [coerce_cli_path(v, descriptor.parameter_info, path_type=path_type,
                                   param=param, ctx=ctx) for v in out]
        except Exception:  # noqa: BLE001 - typer's adapter raises it in its own words
            return _NOT_FAST
    return out if many else out[0]


def _lean_runtime_params() -> None:
    try:
        from typer import _coercion
        from typer.core import _TyperParameter
    except ImportError:  # pragma: no cover - another typer layout
        return
    base = getattr(_coercion, "RuntimeParam", None)
    build = getattr(_coercion, "build_runtime_param", None)
    if base is None or build is None or not hasattr(_TyperParameter, "get_runtime_param"):
        return  # pragma: no cover

    class LeanRuntimeParam(base):  # type: ignore[misc, valid-type]
        """typer's coercion contract (None, lists: the base class), the plain kinds without
        pydantic, everything else through the runtime param typer would have built."""

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            got = fast_value(param.type_descriptor, value, param, ctx)
            if got is not _NOT_FAST:
                return got
            real = self.__dict__.get("real")
            if real is None:  # what typer would have built in the first place
                real = build(param.type_descriptor)
                object.__setattr__(self, "real", real)  # a frozen dataclass
            return real._coerce_value(value, param=param, ctx=ctx)

    def get_runtime_param(self):  # type: ignore[no-untyped-def]
        if self._runtime_param is None:
            d = self.type_descriptor
            self._runtime_param = LeanRuntimeParam(parameter_info=d.parameter_info,
                                                   annotation=d.annotation)
        return self._runtime_param

    _TyperParameter.get_runtime_param = get_runtime_param  # type: ignore[method-assign]


class _Deferred:
    """Stands in for a class of a module not imported yet; the real class on first use."""

    _module = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._real()(*args, **kwargs)

    @classmethod
    def _real(cls) -> Any:
        import importlib

        return getattr(importlib.import_module(cls._module), cls.__name__)


class Markdown(_Deferred):
    _module = "rich.markdown"


class Traceback(_Deferred):
    _module = "rich.traceback"

    @classmethod
    def from_exception(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._real().from_exception(*args, **kwargs)


_STAND_INS = {"rich.markdown": Markdown, "rich.traceback": Traceback}


class _RichUtilsLoader(importlib.abc.Loader):
    """Runs typer.rich_utils with the stand-ins in place, then removes them (a later
    `import rich.markdown` gets the real module); runs it plainly if that fails."""

    def __init__(self, real: importlib.abc.Loader) -> None:
        self.real = real

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return self.real.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        placed = []
        for name, cls in _STAND_INS.items():
            if name not in sys.modules:
                stand_in = types.ModuleType(name, f"gpugov stand-in for {name}")
                setattr(stand_in, cls.__name__, cls)
                sys.modules[name] = stand_in
                placed.append((name, stand_in))
        try:
            self.real.exec_module(module)
        except Exception:  # noqa: BLE001 - a typer that needs more of them: the real ones
            self._remove(placed)
            placed = []
            self.real.exec_module(module)
        finally:
            self._remove(placed)

    @staticmethod
    def _remove(placed: list[tuple[str, types.ModuleType]]) -> None:
        for name, stand_in in placed:
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]


class _RichUtilsFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname != "typer.rich_utils":
            return None
        sys.meta_path.remove(self)  # once; find_spec below must not find us again
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _RichUtilsLoader(spec.loader)
        return spec


def _lean_help_imports() -> None:
    if "typer.rich_utils" in sys.modules or any(
            isinstance(f, _RichUtilsFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _RichUtilsFinder())


def install() -> None:
    """Make typer skip pydantic for plain values and rich's Markdown/Traceback until used."""
    _lean_runtime_params()
    _lean_help_imports()
