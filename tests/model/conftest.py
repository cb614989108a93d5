"""Make the state oracle importable as `state_oracle` from the model tests."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
