"""Model tests. Their shared helper, hf_tiny.py (tiny Hugging Face configs), is in this folder;
tests are imported with --import-mode=importlib, which leaves sys.path alone, so the folder is
put on it here."""

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
