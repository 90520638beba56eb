"""pytest configuration shared by all Python tests (markers live here, not in pyproject.toml)."""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    import torch_plugin

    # Every torch call capture folds to a constant is checked to have changed no tensor.
    torch_plugin.config.debug_check_pure = True
    config.addinivalue_line(
        "markers",
        "slow: takes more than about 10 s on a 2-core CPU machine (deselect: -m 'not slow')",
    )


@pytest.fixture
def fresh_capture():
    """Forget compiled frames and counters before and after a test (torch_plugin.reset)."""
    import torch_plugin

    torch_plugin.reset()
    yield
    torch_plugin.reset()
