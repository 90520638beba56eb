"""Tests of the C++ PEP 523 hook in ``torch_plugin._C`` (csrc/capture/eval_frame.cpp), one file
per topic; their shared test double (Compiler, capturing) is frame_callbacks.py in this folder.
Tests are imported with --import-mode=importlib, which leaves sys.path alone, so the folder is
put on it here."""

import sys
from pathlib import Path

import pytest

import torch_plugin._C as C

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture(autouse=True)
def no_callback_left():
    """Each test starts with no callback and leaves none (and the hook uninstalled)."""
    assert C.get_eval_frame_callback() is None
    yield
    C.set_eval_frame_callback(None)
    assert not C.is_hook_installed()
