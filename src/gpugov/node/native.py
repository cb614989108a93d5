"""Where the enforcement library (libgpugov.so) and its region layout live.

The package build installs both under gpugov/_native/; an editable install has the
library there too but reads the layout header from the checkout's native/ folder.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_NATIVE = Path(__file__).resolve().parent.parent / "_native"
CHECKOUT_NATIVE = Path(__file__).resolve().parents[3] / "native"
LIBRARY_NAME = "libgpugov.so"
LAYOUT_NAME = "region_layout.h"


class NativeLibraryMissing(RuntimeError):
    """The package was installed without its compiled enforcement library."""


def library_path() -> Path:
    """Absolute path of the installed libgpugov.so, for LD_PRELOAD or ld.so.preload."""
    path = PACKAGE_NATIVE / LIBRARY_NAME
    if not path.is_file():
        raise NativeLibraryMissing(
            f"{path} does not exist: the enforcement library was not built. Reinstall with "
            "`pip install .` (or `pip install -e .`) on a machine with a C compiler (cc)."
        )
    return path


def layout_header_path() -> Path:
    """The region layout header: the installed copy, else the checkout's native/."""
    for candidate in (PACKAGE_NATIVE / LAYOUT_NAME, CHECKOUT_NATIVE / LAYOUT_NAME):
        if candidate.is_file():
            return candidate
    raise NativeLibraryMissing(
        f"{LAYOUT_NAME} found neither in {PACKAGE_NATIVE} nor in {CHECKOUT_NATIVE}"
    )
