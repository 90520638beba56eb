"""pytest configuration shared by all Python tests (markers live here, not in pyproject.toml)."""

import sys
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    import torch_plugin

    # Every torch call capture folds to a constant is checked to have changed no tensor.
    torch_plugin.config.debug_check_pure = True
    # A bug of the translator fails the test that meets it (instead of running the frame
    # unmodified with a logged warning, as users get).
    torch_plugin.config.debug_raise_internal_errors = True
    config.addinivalue_line(
        "markers",
        "slow: takes more than about 10 s on a 2-core CPU machine (deselect: -m 'not slow')",
    )


@pytest.fixture
def tensor_branches_capture():
    """Branches on a one-element tensor are captured as conditionals
    (``config.capture_tensor_branches`` on, the default; the fixture keeps such tests
    independent of the default and of tests that change it)."""
    import torch_plugin

    before = torch_plugin.config.capture_tensor_branches
    torch_plugin.config.capture_tensor_branches = True
    yield
    torch_plugin.config.capture_tensor_branches = before


@pytest.fixture
def tensor_branches_break():
    """A branch on a tensor breaks the graph (``config.capture_tensor_branches`` off), as
    before issue #31: for tests that use such a branch to make a graph break."""
    import torch_plugin

    before = torch_plugin.config.capture_tensor_branches
    torch_plugin.config.capture_tensor_branches = False
    yield
    torch_plugin.config.capture_tensor_branches = before


@pytest.fixture
def no_tf32():
    """fp32 products and convolutions in full fp32 (TF32 off for cuBLAS and cuDNN) during the
    test, restored after: tests comparing fp32 results at tight tolerances."""
    import torch

    prior = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = prior


@pytest.fixture
def fresh_capture():
    """Forget compiled frames and counters before and after a test (torch_plugin.reset)."""
    import torch_plugin

    torch_plugin.reset()
    yield
    torch_plugin.reset()


# The differential harnesses (differential.py, its one-graph checks one_graph.py,
# against_eager.py) and the program generator live in tests/fuzz/ (shared with the fuzzing
# script tests/fuzz/run.py). Tests are imported
# with --import-mode=importlib, which leaves sys.path alone, so the folder is put on it here;
# it holds only those helpers.
_FUZZ_DIR = str(Path(__file__).resolve().parent.parent / "fuzz")
if _FUZZ_DIR not in sys.path:
    sys.path.insert(0, _FUZZ_DIR)
