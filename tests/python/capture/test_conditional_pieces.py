"""Wrong results the program generator (tests/fuzz/run.py --tensor-branches) found with
``config.capture_tensor_branches`` on, each fixed by mechanism:

- seed 249: an unused random draw lost on a recompile with symbolic sizes (also with the flag
  off): torch.fx's dead-code elimination removes random ops inside a TracingContext unless
  Inductor's ``fallback_random`` is on; the "aot_eager" and "plugin" backends now compile
  with random ops kept (``torch_plugin.compiler.backward_graphs.random_ops_kept``);
- seed 635: a graph with a Conditional is compiled in pieces, and each piece was compiled
  with fresh example inputs, so AOTAutograd took two inputs of one storage (a view and its
  base) as unaliased and read the base without the write made through the view
  (``torch_plugin.contract.stand_ins`` keeps the recorded aliasing);
- seed 636: a compiled piece does not run its ``_set_grad_enabled`` switches, so the grad
  mode a ``torch.no_grad()`` block leaves was lost between pieces (the "plugin" backend left
  grad mode off after the call), and a piece was compiled in the grad mode of the compile,
  not the one it runs in (``conditional_execution.compile_with_conditionals``).

Every case goes through the differential harness (all backends, three calls: compiling,
cached, recompiling; outputs, arguments, globals, the RNG state and grad mode after each call
compared with eager).
"""

from __future__ import annotations

import pytest
import torch
from differential import check

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture")

STATE = {"a": torch.zeros(3), "n": 0}


# --------------------------------------------------------------------------- seed 249


def _unused_draw_beside_a_global_write(x, n):
    torch.rand([])
    STATE["a"].add_(x)
    STATE["n"] += n  # an int global: the next call recompiles, with symbolic sizes
    return (n,)


def _unused_predicate_draw(x, n):  # seed 249 as the generator wrote it
    drop = False
    if torch.rand([]) < 0.5:
        drop = True
    if not drop:
        x = x  # noqa: PLW0127 - as generated
    STATE["a"].add_(x - 1)
    STATE["n"] += n
    return (n,)


def _unused_draws_in_training(x, w, n):
    torch.rand([])
    y = (x * w).sum()
    torch.randn(2)
    STATE["n"] += n
    y.backward()
    return (y.detach(), w.grad)


def _x_n(n):
    return lambda: (torch.randn(3), n)


def _x_w_n(n):
    return lambda: (torch.randn(3), torch.randn(3, requires_grad=True), n)


@pytest.mark.parametrize("tensor_branches", [False, True], ids=["branches_break", "captured"])
@pytest.mark.parametrize(
    "fn, calls",
    [
        (_unused_draw_beside_a_global_write, (_x_n(3), _x_n(3), _x_n(0))),
        (_unused_predicate_draw, (_x_n(3), _x_n(3), _x_n(0))),
        (_unused_draws_in_training, (_x_w_n(3), _x_w_n(3), _x_w_n(0))),
    ],
    ids=["global_write", "predicate_draw", "training"],
)
def test_an_unused_random_draw_is_kept_on_recompiles(fn, calls, tensor_branches, monkeypatch):
    """Random ops advance the generator: never dead code, also in a graph compiled with
    symbolic sizes (the recompile), where AOTAutograd's dead-code elimination runs inside
    the capture's TracingContext."""
    monkeypatch.setattr(torch_plugin.config, "capture_tensor_branches", tensor_branches)
    check(fn, *calls, observe={"globals": globals()})


# --------------------------------------------------------------------------- seed 635


def _write_through_view_then_read_base_random(x, v, y):
    v.add_(y[0])
    t = torch.sin(x)
    if torch.rand([]) < 0.5:  # draws: a Conditional, the graph compiled in pieces
        y = y + 1
    return (t, y)


def _write_through_view_then_read_base(x, v, y):
    v.add_(x.sum())
    t = torch.sin(x)
    if y.sum() < 0.5:  # torch.cond, a Conditional once sizes are symbolic
        y = y + 1
    return (t, y)


def _view_written_after_layerdrop(x, y):  # seed 635's shape: the view made before
    v = x.reshape(-1)[:3]
    for _ in range(2):
        if torch.rand([]) < 0.5:
            continue
        y = y * 0.5 + torch.sigmoid(x[0])
    v.add_(y[0] - x.sum())  # a later piece: x and v are two of its inputs
    t = torch.sin(x).t().contiguous().t()
    return (t, y)


def _x_view_y(rows):
    def make():
        x = torch.randn(rows, 3)
        return (x, x.reshape(-1)[:3], torch.randn(3))

    return make


def _x_y(rows):
    return lambda: (torch.randn(rows, 3), torch.randn(3))


@pytest.mark.usefixtures("tensor_branches_capture")
@pytest.mark.parametrize(
    "fn, calls",
    [
        (_write_through_view_then_read_base_random, (_x_view_y(5), _x_view_y(5), _x_view_y(4))),
        (_write_through_view_then_read_base, (_x_view_y(5), _x_view_y(5), _x_view_y(4))),
        (_view_written_after_layerdrop, (_x_y(5), _x_y(5), _x_y(4))),
    ],
    ids=["random_predicate", "tensor_predicate", "layerdrop_loop"],
)
def test_pieces_around_a_conditional_see_aliased_inputs(fn, calls):
    """A piece reading a tensor after a write through a view of it (two inputs of one
    storage) is compiled knowing they alias."""
    check(fn, *calls)


# --------------------------------------------------------------------------- seed 636


def _layerdrop_in_no_grad(x, y):  # seed 636's shape
    with torch.no_grad():
        for _ in range(2):
            if torch.rand([]) < 0.5:
                continue
            y = y * 0.5 + y
        t = x.sum(1).mean()
    return (y, t)


def _tensor_branch_in_no_grad(x, y):
    with torch.no_grad():
        if x.sum() < 0.5:
            y = y * 0.5 + y
    return (y,)


def _training_after_a_no_grad_branch(x, w):
    with torch.no_grad():
        if torch.rand([]) < 0.5:
            x = x * 2 + w
    y = (x * w).sum()
    y.backward()
    return (y.detach(), w.grad, torch.is_grad_enabled())


def _enable_grad_after_a_no_grad_branch(x, w):
    y = x * w
    with torch.no_grad():
        if y.sum() < 0.5:
            y = y * 2
    with torch.enable_grad():
        z = (y * w).sum()
    return (z.detach(), z.requires_grad, y.requires_grad)


def _x_w(rows):
    return lambda: (torch.randn(rows, 2), torch.randn(2, requires_grad=True))


def _x_y2(rows):
    return lambda: (torch.randn(rows, 2), torch.randn(2))


@pytest.mark.usefixtures("tensor_branches_capture")
@pytest.mark.parametrize(
    "fn, calls",
    [
        (_layerdrop_in_no_grad, (_x_y2(3), _x_y2(3), _x_y2(4))),
        (_tensor_branch_in_no_grad, (_x_y2(3), _x_y2(3), _x_y2(4))),
        (_training_after_a_no_grad_branch, (_x_w(3), _x_w(3), _x_w(4))),
        (_enable_grad_after_a_no_grad_branch, (_x_w(3), _x_w(3), _x_w(4))),
    ],
    ids=["layerdrop_loop", "tensor_predicate", "training_after", "enable_grad_after"],
)
def test_pieces_around_a_conditional_keep_grad_mode(fn, calls):
    """Grad mode after the call, and in each piece, is eager's."""
    check(fn, *calls)
