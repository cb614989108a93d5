"""Numbers in output files: exact, and without float noise.

`f"{x:g}"` keeps 6 significant digits, so a trace time like 12537496 s would be written as
1.25375e+07 and lose 4 seconds; output files use `csv_number` instead.
"""

from __future__ import annotations

import math


def csv_number(x: float) -> str:
    """Whole numbers without a decimal point, others to microsecond-level precision."""
    if math.isnan(x):
        return ""
    if float(x).is_integer():
        return str(int(x))
    return repr(round(float(x), 6))
