"""The `gpugov` command run as a user runs it: in its own process, so a test sees its exit
status and output, and the servers `dev up` leaves behind, as a shell would."""

from __future__ import annotations

import subprocess
import sys


def gpugov(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`gpugov ARGS` in a fresh interpreter; output captured, the exit status left to check."""
    return subprocess.run([sys.executable, "-c", "from gpugov.cli import app; app()", *args],
                          capture_output=True, text=True, timeout=timeout, check=False)
