"""Graph breaks in frames without parameters, whose inputs are closure cells and globals.

A resume function's first parameter is a stack value (``__stack0``) when the frame it
continues has no parameters; a graph break inside that resume function took it for the
user's first argument (kept alive for zero-argument ``super()``) and named its own stack
parameter ``__stack0`` too: "co_varnames is too small" from CPython, and the rest of the
frame ran uncaptured (a zero-argument training step's optimizer step never compiled).
Each case runs through the differential harness (every backend, three calls: compile,
cached, recompile; parameters, gradients, optimizer state, globals and closure cells
compared with eager) with internal capture errors raised (conftest).
"""

from __future__ import annotations

import io

import pytest
import torch
from differential import check

import torch_plugin
from torch_plugin.capture import resume_execution
from torch_plugin.compiler import optimizer_step

pytestmark = pytest.mark.usefixtures("fresh_capture")

BUF = io.StringIO()
MODEL = torch.nn.Linear(4, 3)
OPT = torch.optim.AdamW(MODEL.parameters(), lr=1e-2)
BATCH = torch.randn(8, 4)


def _new_batch(rows: int):
    """A call's argument factory: a fresh global batch of ``rows`` rows (a recompile when
    the row count changes); the call itself takes no arguments."""

    def call():
        global BATCH
        BATCH = torch.randn(rows, 4)
        return ()

    return call


CALLS = (_new_batch(8), _new_batch(8), _new_batch(5))


def _observe():
    return {"globals": globals(), "model": MODEL, "opt": OPT}


# --------------------------------------------------------------------------- training steps


def _global_step():
    loss = MODEL(BATCH).square().mean()
    loss.backward()
    OPT.step()
    OPT.zero_grad()
    return loss


def _global_step_keeps_grads():
    # grads accumulate over the calls (no zero_grad): .grad is compared after each call
    loss = MODEL(BATCH).sum()
    loss.backward()
    OPT.step()
    return loss.detach()


def _global_step_printing():
    out = MODEL(BATCH)
    print("forward", out.shape, file=BUF)
    loss = out.square().mean()
    loss.backward()
    print("backward", file=BUF)
    OPT.step()
    OPT.zero_grad()
    return loss


@pytest.mark.parametrize(
    "step",
    [_global_step, _global_step_keeps_grads, _global_step_printing],
    ids=lambda f: f.__name__,
)
def test_zero_argument_step_over_globals(step):
    check(step, *CALLS, observe=_observe())


def _closure_step(model_cls=torch.nn.Linear):
    model = model_cls(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = {"x": torch.randn(8, 4)}

    def step():
        loss = model(data["x"]).tanh().sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    def batch(rows):
        def call():
            data["x"] = torch.randn(rows, 4)  # the closure's dict: shared with step's copy
            return ()

        return call

    return step, (batch(8), batch(8), batch(6)), {"model": model, "opt": opt, "data": data}


def test_zero_argument_step_over_closure_cells():
    step, calls, observe = _closure_step()
    check(step, *calls, observe=observe)


# --------------------------------------------------------------------------- print() breaks


def _two_prints():
    y = BATCH @ MODEL.weight.detach().t()
    print("a", y.shape, file=BUF)
    z = y.relu()
    print("b", file=BUF)
    return z.sum() + y.sum()


def _three_prints_nested():
    # a resume function's resume function's resume function
    y = BATCH.sin()
    print("a", file=BUF)
    y = y * 2
    print("b", file=BUF)
    y = y + BATCH
    print("c", file=BUF)
    return y.cos()


def _dead_local_between_breaks():
    # The second resume function's parameters were (__stack0, __stack0, y, z): `bytecode`
    # kept one __stack0 and filled the count with `tmp`, so every argument after the first
    # bound to the parameter before its own (y got print()'s None): a wrong result, where
    # a frame without such a spare local failed with "co_varnames is too small".
    y = BATCH.sin()
    print("a", file=BUF)
    tmp = y * 3
    z = tmp + 1
    print("b", file=BUF)
    return y + z


def _user_local_named_like_a_stack_parameter():
    __stack0 = BATCH * 2  # a parameter name of the resume functions
    print("a", file=BUF)
    __stack1 = __stack0 + 1
    print("b", file=BUF)
    return __stack0 - __stack1


@pytest.mark.parametrize(
    "fn",
    [
        _two_prints,
        _three_prints_nested,
        _dead_local_between_breaks,
        _user_local_named_like_a_stack_parameter,
    ],
    ids=lambda f: f.__name__,
)
def test_zero_argument_print_breaks_over_globals(fn):
    check(fn, *CALLS, observe={"globals": globals()})
    assert torch_plugin.stats.frames_failed == 0, torch_plugin.stats.failures


def _closure_printing():
    w = torch.randn(4, 4)
    log = []
    box = {"x": torch.randn(8, 4)}

    def f():
        y = box["x"] @ w
        print("a", file=BUF)
        log.append(y.shape[0])
        y = y * 2
        print("b", len(log), file=BUF)
        return y.sum(0)

    def call(rows):
        def make():
            box["x"] = torch.randn(rows, 4)
            return ()

        return make

    return f, (call(8), call(8), call(3)), {"log": log, "box": box}


def test_zero_argument_print_breaks_over_closure_cells():
    f, calls, observe = _closure_printing()
    check(f, *calls, observe=observe)


# --------------------------------------------------------------------------- counters


def _compiled_steps(zero_argument: bool) -> int:
    """optimizer.step() calls that ran compiled over three calls of a training step under
    "plugin"; no frame may fail but the last (after zero_grad(): nothing to capture)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(8, 4)

    def step_x(x):
        loss = model(x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    def step():
        loss = model(x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    torch_plugin.reset()
    before = optimizer_step.counters["compiled_steps"]
    f = torch_plugin.optimize(step if zero_argument else step_x, backend="plugin")
    for _ in range(3):
        f() if zero_argument else f(x)
    failed = [f for f in torch_plugin.stats.failures if f[1] != "no tensor operations to capture"]
    assert not failed, failed
    return optimizer_step.counters["compiled_steps"] - before


def test_zero_argument_step_compiles_the_optimizer_step():
    """The optimizer step of a zero-argument training step runs compiled under "plugin", as
    for the same step taking its batch as an argument (before: the resume function after
    backward() failed to build its own resume function, the step ran eager)."""
    with_argument = _compiled_steps(zero_argument=False)
    assert with_argument >= 2
    assert _compiled_steps(zero_argument=True) == with_argument


# --------------------------------------------------------------------------- the mechanism


def test_stack_parameters_never_share_a_local_name():
    """ResumeSpec names its stack parameters apart from the locals it passes and the code's
    cell and free variables."""
    spec = resume_execution.ResumeSpec(0, ("value", "null", "value"), ("__stack0", "a"))
    assert spec.stack_argnames(frozenset({"__stack1"})) == ("__stack2", "__stack3")
    assert spec.argnames() == ("__stack1", "__stack2", "__stack0", "a")
    lead = resume_execution.ResumeSpec(0, ("value",), ("self", "__stack0"), lead=True)
    assert lead.argnames() == ("self", "__stack1", "__stack0")


def test_user_first_argument_of_resume_functions():
    def method_like(self, x):
        print("a", file=BUF)
        return x + 1

    def no_args():
        y = BATCH + 1
        print("a", file=BUF)
        return y

    assert resume_execution.user_first_argument(method_like.__code__) == "self"
    assert resume_execution.user_first_argument(no_args.__code__) is None
    target = next(
        i.offset
        for i in __import__("dis").get_instructions(no_args)
        if i.opname == "POP_TOP"  # after print(): the resume point
    )
    spec = resume_execution.ResumeSpec(target, ("value",), ("y",))
    rcode = resume_execution.resume_code(no_args.__code__, spec)
    assert rcode.co_varnames[:2] == ("__stack0", "y")
    assert resume_execution.user_first_argument(rcode) is None  # not __stack0
    copy = rcode.replace(co_filename="elsewhere.py")  # not the recorded code object
    assert resume_execution.user_first_argument(copy) is None
