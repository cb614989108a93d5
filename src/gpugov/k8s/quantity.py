"""Kubernetes resource quantities (`20k`, `1Gi`, `500m`, `1e3`) as exact numbers.

The apiserver stores quantities in canonical form, so a pod written with
`nvidia.com/gpumem: 20000` reaches the webhook as `20k`; GPU counts and MiB must be read the
way Kubernetes reads them before they are translated.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction

_SUFFIX = {
    "": 1, "m": Fraction(1, 1000), "u": Fraction(1, 10**6), "n": Fraction(1, 10**9),
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))"
                       r"(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


def parse_quantity(value: object) -> Fraction:
    """The exact value of a quantity; ValueError names the value and the allowed forms."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    text = str(value).strip()
    m = _QUANTITY.match(text)
    if not m:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 1, 20000, 20k, 1Gi)")
    try:
        number = Fraction(Decimal(m.group(1)))
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from None
    if m.group(2):
        return number * Fraction(10) ** int(m.group(2)[1:])
    return number * _SUFFIX[m.group(3) or ""]


def plain(value: object) -> object:
    """An integral quantity as a plain int (`20k` -> 20000); anything else unchanged, so the
    translator reports it with its own message."""
    try:
        q = parse_quantity(value)
    except ValueError:
        return value
    return int(q) if q.denominator == 1 else value
