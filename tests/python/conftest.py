"""pytest configuration shared by all Python tests (markers live here, not in pyproject.toml)."""

import pytest


def pytest_configure(config: pytest.Config) -> None:
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
