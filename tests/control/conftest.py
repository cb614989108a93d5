"""Make the scenario helpers importable as `cp_helpers` from the control tests."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
