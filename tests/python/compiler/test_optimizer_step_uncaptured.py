"""The optimizer step's compile (torch_plugin.compiler.optimizer_step) runs inside the user's
compiled frame with capture off: what it calls back into user code is not captured."""

from __future__ import annotations

import copy

import pytest
import torch

import torch_plugin
from torch_plugin.compiler import optimizer_step

pytestmark = pytest.mark.usefixtures("fresh_capture")


def test_log_handlers_called_by_the_compile_not_captured():
    """The optimizer step's compile runs with capture off: a user's logging handler that its
    log line reaches runs as plain Python (before, capture tried the handler's ``emit`` frame
    and gave up on it: a failure in ``torch_plugin.stats``), and the step equals eager's."""
    import logging

    seen: list[str] = []

    class Handler(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = Handler(logging.INFO)
    logger = logging.getLogger("torch_plugin")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        ref = copy.deepcopy(model)
        opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, ref)]

        def step(m, opt, x):
            loss = m(x).square().sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        fast = torch_plugin.optimize(step)
        for _ in range(3):
            x = torch.randn(3, 4)
            torch.testing.assert_close(fast(model, opts[0], x), step(ref, opts[1], x))
            for p, q in zip(model.parameters(), ref.parameters()):
                torch.testing.assert_close(p, q)
                assert p.grad is None and q.grad is None  # zero_grad ran
                for k, v in opts[1].state[q].items():  # the momentum buffers
                    torch.testing.assert_close(opts[0].state[p][k], v, msg=k)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert any("optimizer step (sgd) kernel" in m for m in seen), seen  # the compile logged
    assert optimizer_step.counters["compiled_steps"] > 0
    emits = [f for f in torch_plugin.stats.failures if f[0].endswith("emit")]
    assert not emits, emits
