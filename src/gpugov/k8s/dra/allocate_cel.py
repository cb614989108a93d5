"""CEL device selectors, evaluated as kube-scheduler evaluates them (docs/dra.md, path 1).

gpugov's scheduler allocates claims itself, so it evaluates the claim's and the DeviceClass's
`cel` selectors against each published device with the maintained `cel-python` package and
Kubernetes' device environment: `device.driver`, `device.attributes[domain].name`,
`device.capacity[domain].name` (a quantity) and the quantity functions (`quantity("10Gi")`,
`compareTo`, `isGreaterThan`, `isLessThan`, `asInteger`, `asApproximateFloat`). Attribute and
capacity names without a domain belong to the device's driver, as in Kubernetes.

Expressions are tenant input: one longer than Kubernetes' own bound (10 KiB) is refused before
compiling; one that does not compile, or fails on a device (a missing attribute, a type
error), is an error naming the expression — the caller shows it on the pod, never raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from functools import lru_cache
from typing import Any

#: resource.k8s.io/v1 CELSelectorExpressionMaxLength
MAX_EXPRESSION = 10 * 1024
#: longest error text kept (cel-python's errors can carry the whole activation)
_MAX_ERROR = 240


class SelectorError(ValueError):
    """An expression that is too long, does not compile or fails to evaluate."""


class Quantity:
    """A resource quantity in CEL (exact, a Fraction); compared only through functions."""

    __slots__ = ("value",)

    def __init__(self, value: Fraction) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


def _q(text: Any) -> Quantity:
    from gpugov.k8s.quantity import parse_quantity

    return Quantity(Fraction(parse_quantity(str(text))))


def _functions() -> dict[str, Any]:
    from celpy import celtypes

    def cmp(a: Quantity, b: Quantity) -> Any:
        return celtypes.IntType((a.value > b.value) - (a.value < b.value))

    def is_quantity(s: Any) -> Any:
        try:
            _q(s)
        except ValueError:
            return celtypes.BoolType(False)
        return celtypes.BoolType(True)

    return {
        "quantity": _q,
        "isQuantity": is_quantity,
        "compareTo": cmp,
        "isGreaterThan": lambda a, b: celtypes.BoolType(a.value > b.value),
        "isLessThan": lambda a, b: celtypes.BoolType(a.value < b.value),
        "asInteger": lambda a: celtypes.IntType(int(a.value)),
        "asApproximateFloat": lambda a: celtypes.DoubleType(float(a.value)),
        "isInteger": lambda a: celtypes.BoolType(a.value.denominator == 1),
    }


@lru_cache(maxsize=512)
def compile_selector(expression: str) -> Any:
    """A compiled program (cached per text); SelectorError when too long or invalid."""
    if not isinstance(expression, str) or not expression.strip():
        raise SelectorError("an empty CEL expression")
    if len(expression) > MAX_EXPRESSION:
        raise SelectorError(f"a CEL expression of {len(expression)} characters is longer "
                            f"than {MAX_EXPRESSION}")
    import celpy

    env = celpy.Environment()
    try:
        ast = env.compile(expression)
        return env.program(ast, functions=_functions())
    except RecursionError:
        raise SelectorError(f"CEL expression {_short(expression)} is nested too deeply") \
            from None
    except Exception as e:  # noqa: BLE001 - cel-python's parse errors have no common base
        raise SelectorError(f"CEL expression {_short(expression)} does not compile: "
                            f"{_first_line(e)}") from None


def _short(expression: str) -> str:
    return repr(expression if len(expression) <= 80 else expression[:77] + "...")


def _first_line(e: BaseException) -> str:
    text = str(e.args[0]) if getattr(e, "args", None) else str(e)
    return text.splitlines()[0][:_MAX_ERROR] if text else type(e).__name__


def activation(driver: str, device: Mapping[str, Any]) -> dict[str, Any]:
    """`device` as Kubernetes' CEL environment shows it (attributes and capacity by domain)."""
    from celpy import celtypes

    attrs: dict[Any, Any] = {}
    for name, value in (device.get("attributes") or {}).items():
        domain, _, short = str(name).rpartition("/")
        v = _attr(value)
        if v is not None:
            attrs.setdefault(celtypes.StringType(domain or driver), {})[
                celtypes.StringType(short)] = v
    caps: dict[Any, Any] = {}
    for name, value in (device.get("capacity") or {}).items():
        domain, _, short = str(name).rpartition("/")
        raw = value.get("value") if isinstance(value, Mapping) else None
        try:
            q = _q(raw)
        except ValueError:
            continue
        caps.setdefault(celtypes.StringType(domain or driver), {})[celtypes.StringType(short)] = q
    return {"device": celtypes.MapType({
        celtypes.StringType("driver"): celtypes.StringType(driver),
        celtypes.StringType("attributes"): celtypes.MapType(
            {k: celtypes.MapType(v) for k, v in attrs.items()}),
        celtypes.StringType("capacity"): celtypes.MapType(
            {k: celtypes.MapType(v) for k, v in caps.items()}),
        celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(
            bool(device.get("allowMultipleAllocations"))),
    })}


def _attr(value: Any) -> Any:
    from celpy import celtypes

    if not isinstance(value, Mapping):
        return None
    if "string" in value:
        return celtypes.StringType(str(value["string"]))
    if "bool" in value:
        return celtypes.BoolType(bool(value["bool"]))
    if "int" in value and isinstance(value["int"], int):
        return celtypes.IntType(value["int"])
    if "version" in value:
        return celtypes.StringType(str(value["version"]))
    return None


def matches(expression: str, driver: str, device: Mapping[str, Any],
            act: dict[str, Any] | None = None) -> bool:
    """Whether the device satisfies the expression; SelectorError when it cannot say."""
    prog = compile_selector(expression)
    try:
        out = prog.evaluate(act if act is not None else activation(driver, device))
    except RecursionError:
        raise SelectorError(f"CEL expression {_short(expression)} is nested too deeply") \
            from None
    except Exception as e:  # noqa: BLE001 - CELEvalError and whatever a function raised
        raise SelectorError(f"CEL expression {_short(expression)} failed on device "
                            f"{device.get('name')!r}: {_first_line(e)}") from None
    if isinstance(out, Exception):
        raise SelectorError(f"CEL expression {_short(expression)} failed on device "
                            f"{device.get('name')!r}: {_first_line(out)}")
    from celpy import celtypes

    if not isinstance(out, bool | celtypes.BoolType):
        raise SelectorError(f"CEL expression {_short(expression)} gives "
                            f"{type(out).__name__}, not a bool")
    return bool(out)
