"""Fixtures for the observation tests: helper modules beside this file are importable."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
