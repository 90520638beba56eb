"""Regression tests for the silent wrong results of issue #10, one file per mechanism; their
harness is eager_comparison.py in this folder. Tests are imported with --import-mode=importlib,
which leaves sys.path alone, so the folder is put on it here."""

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
