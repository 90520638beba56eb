"""Issue #10 regressions: one Python object, one variable. Globals, attributes and arguments
reached through two paths, arguments that alias each other on some calls, objects rebuilt
across a graph break, and inputs or results returned and stored keep their identity.

Each case runs eager and each backend on deep copies of fresh random inputs, over several
calls (the compiling call, cached calls, calls that recompile), and compares the result and
every argument after the call (in-place mutations included): eager_comparison.py.
"""

import pytest
import torch
from eager_comparison import BACKENDS, run_against_eager, same

import torch_plugin

# a branch on a tensor is these tests' graph break (conftest.py)
pytestmark = pytest.mark.usefixtures("tensor_branches_break")

# --- 2. one Python object, one variable -------------------------------------------------
GLOBAL_LIST: list = []
GLOBAL_DICT: dict = {}


def _global_list_appended_twice(x):
    GLOBAL_LIST.append(1)
    y = x + len(GLOBAL_LIST)
    alias = GLOBAL_LIST
    alias.append(2)
    GLOBAL_LIST.append(3)
    return y * len(GLOBAL_LIST)


def _global_dict_store_then_read(x):
    GLOBAL_DICT["a"] = x + 1
    return GLOBAL_DICT["a"] * 2 + len(GLOBAL_DICT)


class _Inner:
    def __init__(self):
        self.items = []


class _Outer:
    def __init__(self):
        self.inner = _Inner()


def _nested_attribute_list(x, o):
    o.inner.items.append(x + 1)
    n = len(o.inner.items)
    o.inner.items.append(x * n)
    return sum(o.inner.items)


def _same_list_two_args(x, a, b):
    a.append(x)
    b.append(x + 1)
    return len(a) + len(b) + x


def _same_tensor_two_args(x, y):
    x.add_(1)
    return y * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_global_list_mutated_through_two_paths(backend):
    GLOBAL_LIST.clear()
    run_against_eager(
        backend,
        _global_list_appended_twice,
        [(torch.randn(3),) for _ in range(3)],
        state=lambda: {"L": GLOBAL_LIST},
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_global_dict_store_then_read(backend):
    GLOBAL_DICT.clear()
    run_against_eager(
        backend,
        _global_dict_store_then_read,
        [(torch.randn(3),) for _ in range(3)],
        state=lambda: {"D": GLOBAL_DICT},
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_attribute_list(backend):
    def check(o_eager, o_opt):
        assert same(o_eager.inner.items, o_opt.inner.items)

    torch_plugin.reset()
    opt = torch_plugin.optimize(backend)(_nested_attribute_list)
    for _ in range(3):
        x = torch.randn(3)
        o1, o2 = _Outer(), _Outer()
        assert same(_nested_attribute_list(x, o1), opt(x, o2))
        check(o1, o2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_argument_aliasing_changes_between_calls(backend):
    """Compiled with two distinct lists, then called with one list twice (and back)."""
    torch_plugin.reset()
    opt = torch_plugin.optimize(backend)(_same_list_two_args)
    for shared in (False, True, False, True):
        x = torch.randn(2)
        a1, a2 = [], []
        b1, b2 = (a1, a2) if shared else ([], [])
        assert same(_same_list_two_args(x, a1, b1), opt(x, a2, b2))
        assert same(a1, a2) and same(b1, b2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_argument_aliasing_changes_between_calls(backend):
    torch_plugin.reset()
    opt = torch_plugin.optimize(backend)(_same_tensor_two_args)
    for shared in (False, True, False, True):
        x1 = torch.randn(3)
        x2 = x1.clone()
        y1, y2 = (x1, x2) if shared else (torch.ones(3), torch.ones(3))
        assert same(_same_tensor_two_args(x1, y1), opt(x2, y2))
        assert same(x1, x2)


# --- 2b. a ModelOutput reached twice across a graph break is one object --------------------
def _model_output_attribute_write_across_break(x, proj):
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    out = BaseModelOutputWithPooling(last_hidden_state=x * 2, pooler_output=x.sum(0))
    keep = [out]
    print(end="")  # a graph break: `out` is rebuilt for the resume function, once
    out.pooler_output = proj(out.pooler_output)
    return keep[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_model_output_rebuilt_once_across_graph_break(backend):
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    proj = torch.nn.Linear(4, 2)

    torch_plugin.reset()
    opt = torch_plugin.optimize(backend)(_model_output_attribute_write_across_break)
    for _ in range(3):
        x = torch.randn(3, 4)
        want = _model_output_attribute_write_across_break(x, proj)
        got = opt(x, proj)
        assert type(got) is type(want)
        assert same(got.pooler_output, want.pooler_output)
        assert same(got.last_hidden_state, want.last_hidden_state)
    torch_plugin.reset()


# --- a source rebound by a replayed side effect keeps its old value in live locals --------
G_TENSOR = torch.zeros(3)


def _old_global_survives_break(x):
    global G_TENSOR
    old = G_TENSOR
    G_TENSOR = G_TENSOR + x
    if x.sum() > 0:  # a graph break: `old` is rebuilt for the resume function
        G_TENSOR.add_(1)
    return old * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_rebound_global_keeps_old_object_across_break(backend):
    """fuzz seed 496: `old` was rebuilt from G['G_TENSOR'] after the replay had rebound it."""
    global G_TENSOR
    torch_plugin.reset()
    opt = torch_plugin.optimize(backend)(_old_global_survives_break)
    for i in range(4):
        x = torch.randn(3) + (4 if i % 2 else -4)
        start = torch.randn(3)
        G_TENSOR = start.clone()
        want = _old_global_survives_break(x)
        want_global = G_TENSOR
        G_TENSOR = start.clone()
        got = opt(x)
        assert same(want, got), f"call {i}: {got} != {want}"
        assert same(want_global, G_TENSOR)
    torch_plugin.reset()


STORE: dict = {}


def _returns_and_stores_inputs(x, y):
    t = x[:, 0]
    STORE["x"] = x
    y.add_(1)
    return t, x, y


@pytest.mark.parametrize("backend", BACKENDS)
def test_inputs_returned_or_stored_keep_identity(backend):
    """An input returned or stored as is is the very object (AOTAutograd's output for it was
    another tensor object: `out is x` and `STORE["x"] is x` differed from eager)."""
    torch_plugin.reset()
    opt = torch_plugin.optimize(backend)(_returns_and_stores_inputs)
    for n in (3, 3, 4):
        x, y = torch.randn(n, 2), torch.randn(2)
        y0 = y.clone()
        t, rx, ry = opt(x, y)
        assert rx is x and ry is y and STORE["x"] is x
        assert same(t, x[:, 0]) and same(y, y0 + 1)
    torch_plugin.reset()


def _returns_and_stores_a_view(x, d):
    t = x[1, 0] * 1 if x.dim() == 3 else x[1, 0]
    d["b"] = t
    return t, t


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_returned_and_stored_is_one_object(backend):
    """fuzz seeds 766, 1799: a tensor returned and stored in a dict came back as two objects
    (AOTAutograd regenerates each output that aliases an intermediate)."""
    torch_plugin.reset()
    opt = torch_plugin.optimize(backend)(_returns_and_stores_a_view)
    for n in (3, 3, 4):
        x, d = torch.randn(n, 3), {}
        a, b = opt(x, d)
        assert a is b and d["b"] is a
        assert same(a, x[1, 0])
    torch_plugin.reset()
