"""Kubernetes resource quantities (`20k`, `1Gi`, `500m`, `1e3`) as exact numbers, bounded.

The apiserver stores quantities in canonical form, so a pod written with
`nvidia.com/gpumem: 20000` reaches the webhook as `20k`; GPU counts and MiB must be read the
way Kubernetes reads them before they are translated.

Quantities are tenant input, and the apiserver accepts values no GPU, CPU or byte count can
have (`1e400`, `1e8000000`). Exact arithmetic on those is slow (a 10**8000000 takes seconds)
and their integers overflow every fixed-width array downstream, so the size is checked on the
text before any arithmetic: at most `MAX_TEXT` characters, an exponent within
±`MAX_EXPONENT`, and a value of at most `MAX_VALUE` (beyond any real amount of anything a pod
can ask for; int64 like Kubernetes' own milli-values). Anything outside is a ValueError that
names the value and the range.
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
#: longest quantity text read (Kubernetes' own canonical forms are far shorter)
MAX_TEXT = 64
#: largest decimal exponent accepted (`1e30` is already beyond any real amount)
MAX_EXPONENT = 30
#: largest value accepted, in the quantity's base unit (bytes, cores, devices)
MAX_VALUE = 2**63 - 1


def parse_quantity(value: object) -> Fraction:
    """The exact value of a quantity; ValueError names the value and the allowed forms.

    Bounded before any arithmetic (see the module docstring), so a hostile value costs
    microseconds and never yields a number too large for the engine's arrays."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        if abs(value) > MAX_VALUE:
            raise ValueError(f"{_short(value)} is out of range (at most {MAX_VALUE})")
        return Fraction(value)
    if isinstance(value, float):
        value = repr(value)
    text = str(value).strip()
    if len(text) > MAX_TEXT:
        raise ValueError(f"{_short(text)} is not a quantity gpugov reads (longer than "
                         f"{MAX_TEXT} characters)")
    if text.isascii() and text.isdigit():  # the common `1`, `20000`: no regex, no Decimal
        number = int(text)
        if number > MAX_VALUE:
            raise ValueError(f"{text!r} is out of range (at most {MAX_VALUE})")
        return Fraction(number)
    m = _QUANTITY.match(text)
    if not m:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 1, 20000, 20k, 1Gi)")
    if m.group(2) and abs(int(m.group(2)[1:])) > MAX_EXPONENT:
        raise ValueError(f"{text!r} is out of range (exponent beyond ±{MAX_EXPONENT})")
    try:
        number = Fraction(Decimal(m.group(1)))
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from None
    if m.group(2):
        number *= Fraction(10) ** int(m.group(2)[1:])
    else:
        number *= _SUFFIX[m.group(3) or ""]
    if abs(number) > MAX_VALUE:
        raise ValueError(f"{text!r} is out of range (at most {MAX_VALUE})")
    return number


def parse_decimal(value: object) -> Decimal:
    """`parse_quantity` as a Decimal (exact for every quantity: their denominators divide
    10**9, and the bounds keep the digits few)."""
    q = parse_quantity(value)
    return Decimal(q.numerator) / Decimal(q.denominator)


def plain(value: object) -> object:
    """An integral quantity as a plain int (`20k` -> 20000); anything else unchanged, so the
    translator reports it with its own message (an out-of-range value comes back as text,
    which the translator refuses as not a whole number)."""
    if isinstance(value, str) and len(value) <= MAX_TEXT:
        text = value.strip()
        if text.isascii() and text.isdigit():  # fast path, same answer as below
            number = int(text)
            return number if number <= MAX_VALUE else value
    try:
        q = parse_quantity(value)
    except ValueError:
        return value
    return int(q) if q.denominator == 1 else value


def _short(value: object, limit: int = 40) -> str:
    text = str(value)
    return repr(text if len(text) <= limit else text[:limit] + "…")
