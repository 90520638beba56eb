"""Regression tests for the silent wrong results of issue #10, by mechanism.

Each case runs eager and each backend on deep copies of fresh random inputs, over several
calls (the compiling call, cached calls, calls that recompile), and compares the result and
every argument after the call (in-place mutations included).
"""

import copy

import pytest
import torch

import torch_plugin

BACKENDS = ["eager", "aot_eager", "plugin"]


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
        )
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def run_against_eager(backend, fn, argsets, state=None):
    """Call ``fn`` eagerly and optimized on copies of each argument tuple in ``argsets``;
    compare results, arguments after the call, and ``state()`` (globals the function
    touches) after each call."""
    torch_plugin.reset()
    opt = torch_plugin.optimize(backend)(fn)
    for i, args in enumerate(argsets):
        eager_args, opt_args = copy.deepcopy(args), copy.deepcopy(args)
        before = copy.deepcopy(state()) if state else None
        expected = fn(*eager_args)
        eager_state = copy.deepcopy(state()) if state else None
        if state:
            _restore(state(), before)
        got = opt(*opt_args)
        assert _same(expected, got), f"call {i}: result {got} != eager {expected}"
        assert _same(list(eager_args), list(opt_args)), f"call {i}: arguments differ after call"
        if state:
            assert _same(eager_state, state()), f"call {i}: state {state()} != {eager_state}"
    torch_plugin.reset()


def _restore(live: dict, saved: dict) -> None:
    for k, v in saved.items():
        if isinstance(live[k], list):
            live[k][:] = v
        elif isinstance(live[k], dict):
            live[k].clear()
            live[k].update(v)


# --- 1. dropped effects: every call with an effect is a graph node or a graph break ------
def _setitem_local(x):
    m = torch.zeros(4, 4)
    m[1:3, 1:3] = 1.0
    return x * m


def _setitem_input(x, i):
    x[i] = 5.0
    return x + 1


def _setitem_through_view(x):
    v = x[0]
    v[1:] = 3
    return x * 2


def _setitem_tensor_value(x, y):
    out = torch.zeros_like(x)
    out[:, 1] = y.sum(0)
    out[0] += x[1]
    return out


def _masked_fill_swin(x):
    # torchvision swin_t's shifted-window mask is built this way
    mask = x.new_zeros(6, 6)
    for j, s in enumerate(((0, -2), (-2, -1), (-1, None))):
        mask[slice(*s), :] = j
    return x + mask


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn,make",
    [
        (_setitem_local, lambda: (torch.randn(4, 4),)),
        (_setitem_input, lambda: (torch.randn(4, 4), 2)),
        (_setitem_through_view, lambda: (torch.randn(4, 4),)),
        (_setitem_tensor_value, lambda: (torch.randn(3, 3), torch.randn(2, 3))),
        (_masked_fill_swin, lambda: (torch.randn(6, 6),)),
    ],
    ids=["local", "input", "view", "tensor_value", "swin_mask"],
)
def test_setitem_is_not_dropped(backend, fn, make):
    run_against_eager(backend, fn, [make() for _ in range(3)])


def test_unknown_call_without_tensor_result_breaks_the_graph():
    """A torch call that returns no tensor and is neither known pure nor in-place is not
    folded: the graph breaks there and CPython runs it, so its effect happens
    (``increment_version`` bumps the tensor's version counter and returns None)."""

    def f(x):
        y = x + 1
        torch.autograd.graph.increment_version(x)
        return y * 2

    torch_plugin.reset()
    opt = torch_plugin.optimize("eager")(f)
    for _ in range(2):
        x = torch.randn(3)
        before = x._version
        assert torch.equal(opt(x), f(x.clone()))
        assert x._version == before + 1
    assert any("not known to be pure" in reason for _, reason, _ in torch_plugin.stats.graph_breaks)
    torch_plugin.reset()


# --- 4. specialisation without a guard ---------------------------------------------------
def _times_int(x, k):
    return torch.sin(x) * k


@pytest.mark.parametrize("backend", BACKENDS)
def test_int_argument_zero_one_and_others(backend):
    x = torch.randn(4)
    run_against_eager(backend, _times_int, [(x, k) for k in (0, 1, 2, 3, 1, 0, 5)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_int_argument_other_order(backend):
    run_against_eager(backend, _times_int, [(torch.randn(4), k) for k in (2, 3, 1, 0, 7)])


def test_plugin_graph_cache_not_shared_between_static_and_dynamic():
    """A graph recompiled with symbolic sizes has the code of its static twin; the plugin
    graph cache must not replay the static recipe for it (outputs of the old size)."""

    def f(x):
        return torch.relu(x) * 2 + 1

    run_against_eager("plugin", f, [(torch.randn(n, 8),) for n in (4, 5, 6, 4, 7)])
    # and in a fresh capture state (the disk cache is filled now)
    run_against_eager("plugin", f, [(torch.randn(n, 8),) for n in (5, 4, 9)])


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


class _Recorder:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, *exc):
        self.log.append("exit")
        return False


def _context_manager_appends(x, log):
    with _Recorder(log):
        y = x * 2
    log.append("after")
    return y + len(log)


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
        assert _same(o_eager.inner.items, o_opt.inner.items)

    torch_plugin.reset()
    opt = torch_plugin.optimize(backend)(_nested_attribute_list)
    for _ in range(3):
        x = torch.randn(3)
        o1, o2 = _Outer(), _Outer()
        assert _same(_nested_attribute_list(x, o1), opt(x, o2))
        check(o1, o2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_user_context_manager_exit_effect(backend):
    run_against_eager(backend, _context_manager_appends, [(torch.randn(3), []) for _ in range(3)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_argument_aliasing_changes_between_calls(backend):
    """Compiled with two distinct lists, then called with one list twice (and back)."""
    torch_plugin.reset()
    opt = torch_plugin.optimize(backend)(_same_list_two_args)
    for shared in (False, True, False, True):
        x = torch.randn(2)
        a1, a2 = [], []
        b1, b2 = (a1, a2) if shared else ([], [])
        assert _same(_same_list_two_args(x, a1, b1), opt(x, a2, b2))
        assert _same(a1, a2) and _same(b1, b2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_argument_aliasing_changes_between_calls(backend):
    torch_plugin.reset()
    opt = torch_plugin.optimize(backend)(_same_tensor_two_args)
    for shared in (False, True, False, True):
        x1 = torch.randn(3)
        x2 = x1.clone()
        y1, y2 = (x1, x2) if shared else (torch.ones(3), torch.ones(3))
        assert _same(_same_tensor_two_args(x1, y1), opt(x2, y2))
        assert _same(x1, x2)


# --- 5. generators run as far as eager runs them -----------------------------------------
def _gen_with_effects(x, log):
    for i in range(4):
        log.append(i)
        yield x * i


def _partially_consumed_generator(x, log):
    total = x
    for i, y in enumerate(_gen_with_effects(x, log)):
        total = total + y
        if i == 1:
            break
    return total + len(log)


def _next_on_generator(x, log):
    g = _gen_with_effects(x, log)
    a = next(g)
    b = next(g)
    return a + b + len(log)


def _any_stops_early(x, log):
    found = any(y.shape[0] == 3 for y in _gen_with_effects(x, log))
    return x + len(log) + int(found)


def _zip_with_generator(x, log):
    out = x
    for y, k in zip(_gen_with_effects(x, log), [1, 2]):
        out = out + y * k
    return out + len(log)


def _generator_then_graph_break(x, log):
    g = _gen_with_effects(x, log)
    a = next(g)
    print(end="")  # a graph break while the generator is suspended
    b = next(g)
    return a + b + len(log)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn",
    [
        _partially_consumed_generator,
        _next_on_generator,
        _any_stops_early,
        _zip_with_generator,
        _generator_then_graph_break,
    ],
    ids=["for_break", "next", "any", "zip", "graph_break"],
)
def test_generator_runs_as_far_as_eager(backend, fn):
    run_against_eager(backend, fn, [(torch.randn(3), []) for _ in range(3)])


# --- 6. TorchScript never runs on FakeTensors ---------------------------------------------
@torch.jit.script
def _scripted_bucket(rel: torch.Tensor, n: int) -> torch.Tensor:
    mid = n // 2
    return torch.where(rel.abs() < mid, rel, torch.sign(rel) * mid)


class _ScriptedScale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 3


_SCRIPTED_MODULE = torch.jit.script(_ScriptedScale())


def _calls_scripted_function(x):
    # HF DeBERTa-v2's make_log_bucket_position is a torch.jit.script function: run on
    # FakeTensors at capture it read data pointers (an illegal memory access on CUDA), and
    # the graph called the class torch.jit.ScriptFunction by name
    rel = torch.arange(x.shape[0])[:, None] - torch.arange(x.shape[1])[None, :]
    return x + _scripted_bucket(rel, 6)


def _calls_scripted_module(x):
    return _SCRIPTED_MODULE(x + 1) - 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn", [_calls_scripted_function, _calls_scripted_module], ids=["function", "module"]
)
def test_torchscript_is_inlined_or_breaks(backend, fn):
    run_against_eager(backend, fn, [(torch.randn(n, n),) for n in (8, 8, 10)])


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
        assert _same(got.pooler_output, want.pooler_output)
        assert _same(got.last_hidden_state, want.last_hidden_state)
    torch_plugin.reset()


# --- resume functions that start inside a `with` block ------------------------------------
class _Suppress(_Recorder):
    def __exit__(self, *exc):
        self.log.append("exit")
        return True  # swallows the exception: CPython unwinds to the block's handler


def _raise_inside_with(x, log):
    y = x + 1
    with _Suppress(log):  # built by capture (new_object.py), then a graph break at the `with`
        y = y * 2
        if x.sum() > 0:  # data-dependent: the resume function inside the block runs as is
            raise ValueError("swallowed by __exit__")
        y = y - 1
    return y + len(log)


@pytest.mark.parametrize("backend", BACKENDS)
def test_exception_inside_with_block_of_a_resume_function(backend):
    """A resume function entered inside a `with` block had no stack depth for the block's
    exception-table entry (32768): the first exception unwound into garbage (a segfault,
    fuzz seed 230)."""
    argsets = [(torch.randn(3) + (1 if i % 2 else -1) * 5, []) for i in range(4)]
    run_against_eager(backend, _raise_inside_with, argsets)


def test_resume_functions_have_sane_exception_table_depths():
    """Every exception-table entry of every resume function made while running the case above
    has a stack depth within the code's stack size (an unset depth was 32768)."""
    import dis

    from torch_plugin.capture import resume_execution

    torch_plugin.reset()
    opt = torch_plugin.optimize("eager")(_raise_inside_with)
    for sign in (1, -1):
        opt(torch.randn(3) + sign * 5, [])
    codes = [
        c
        for (code, _), c in resume_execution._cache.items()
        if code.co_name.endswith("_raise_inside_with") or "_raise_inside_with" in code.co_qualname
    ]
    assert codes
    for code in codes:
        for entry in dis._parse_exception_table(code):
            assert entry.depth <= code.co_stacksize, (code.co_qualname, entry)
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
        assert _same(want, got), f"call {i}: {got} != {want}"
        assert _same(want_global, G_TENSOR)
    torch_plugin.reset()


# --- in-place writes from an overlapping argument: eager decides --------------------------
def _copy_from_own_element(x):
    y = x * 2
    x.copy_(x[2, 1])  # eager raises: the source overlaps the written tensor
    return y


def _add_own_transpose(x):
    x.add_(x.t())  # eager raises too
    return x


def _assign_own_row(x):
    x[0] = x[1]  # same storage, no overlap: eager computes it
    x.add_(x)  # the same tensor: fine in eager and in the graph
    return x * 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn",
    [_copy_from_own_element, _add_own_transpose, _assign_own_row],
    ids=["copy_element", "add_transpose", "assign_row"],
)
def test_inplace_with_overlapping_argument_matches_eager(backend, fn):
    """A functionalized graph computed `x.copy_(x[2, 1])` where eager raises (fuzz seed
    1869); such calls now break the graph and CPython runs them."""
    torch_plugin.reset()
    opt = torch_plugin.optimize(backend)(fn)
    for _ in range(3):
        x = torch.randn(4, 4)
        x2 = x.clone()
        try:
            want = fn(x)
        except RuntimeError as e:
            with pytest.raises(RuntimeError, match="single memory location"):
                opt(x2)
            assert "single memory location" in str(e)
            continue
        got = opt(x2)
        assert _same(want, got) and _same(x, x2)
    torch_plugin.reset()


def test_inplace_with_a_distinct_tensor_stays_in_the_graph():
    """The overlap rule breaks only for arguments sharing the written tensor's memory: a
    residual `out += identity` and `x[0] = y` stay in one graph."""

    def f(x, y):
        out = x * 2
        out += y
        out[0] = y[1]
        out.add_(out)
        return out

    torch_plugin.reset()
    opt = torch_plugin.optimize("eager")(f)
    x, y = torch.randn(3, 3), torch.randn(3, 3)
    assert _same(opt(x, y), f(x, y))
    assert torch_plugin.stats.graphs_compiled == 1
    assert not torch_plugin.stats.graph_breaks and not torch_plugin.stats.failures
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
        assert _same(t, x[:, 0]) and _same(y, y0 + 1)
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
        assert _same(a, x[1, 0])
    torch_plugin.reset()


# --- boolean-mask assignment in training: no crash, same values and gradients --------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_mask_assignment_under_autograd_matches_eager(backend):
    """``h[mask] = emb`` while autograd records it (wav2vec2's SpecAugment): its backward
    gathers through nonzero(mask), which AOTAutograd cannot trace; compiling the graph
    raised BackendCompilerFailed. Now a graph break: outputs and gradients equal eager's."""
    torch.manual_seed(0)
    emb = torch.nn.Parameter(torch.randn(4))

    def f(x, m):
        h = x * 2
        h[m] = emb
        return (h * h).sum()

    opt = torch_plugin.optimize(backend)(f)
    for _ in range(3):
        x = torch.randn(3, 5, 4, requires_grad=True)
        m = torch.rand(3, 5) > 0.5
        got = opt(x, m)
        gx, ge = torch.autograd.grad(got, (x, emb))
        want = f(x, m)
        wx, we = torch.autograd.grad(want, (x, emb))
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(gx, wx)
        torch.testing.assert_close(ge, we)


# --- t.requires_grad = ...: a graph break; eager decides (it raises on a non-leaf) ----------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("x_grad", [True, False])
def test_setting_requires_grad_matches_eager(backend, x_grad):
    w = torch.nn.Parameter(torch.randn(4))

    def f(x):
        h = x[:, None]
        h.requires_grad = True  # wav2vec2's feature encoder in training
        return h * w, h

    opt = torch_plugin.optimize(backend)(f)
    for _ in range(3):
        x = torch.randn(3, 4, requires_grad=x_grad)
        if x_grad:  # h is not a leaf: eager raises, and so does the compiled call
            for fn in (opt, f):
                with pytest.raises(RuntimeError, match="leaf"):
                    fn(x)
            continue
        (got, gh), (want, wh) = opt(x), f(x)
        torch.testing.assert_close(got, want)
        assert gh.requires_grad and wh.requires_grad and got.requires_grad == want.requires_grad


# --- inference tensors as inputs: no version counter, captured all the same ----------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_inference_tensor_inputs(backend):
    """Tensors made under torch.inference_mode() keep no version counter; capture read it and
    failed internally (the frame ran unmodified, with a traceback on stderr)."""

    def g(a, b):
        return a * b + 1

    opt = torch_plugin.optimize(backend)(g)
    for _ in range(3):
        with torch.inference_mode():
            a, b = torch.randn(3), torch.randn(3)
        torch.testing.assert_close(opt(a, b), g(a, b))
        torch.testing.assert_close(opt(a, a), g(a, a))
    assert torch_plugin.stats.failures == []
