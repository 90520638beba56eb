"""Regression tests for internal errors of the translator and the wrong results found with
them (a hunt with small Python-semantics programs, as outside test suites write them).

Each case runs eager and each backend on deep copies of fresh random inputs over several
calls (compiling, cached, and a call with another shape that recompiles with dynamic
shapes) and compares results, arguments after the call and identity relations. conftest.py
turns on ``debug_raise_internal_errors``, so a translator crash fails the test.

1. MAKE_FUNCTION with a constant defaults tuple (one LOAD_CONST) or constant kwdefaults
   crashed (AttributeError: 'ConstantVariable' object has no attribute 'items');
2. text of a symbolic size (str, repr, f-strings, format specs, ``%``, str.format/join) is
   the concrete number (it was the symbol's name, ``s0``, after the dynamic recompile);
   operators SymInt/SymBool lack (``~n``, ``divmod``, ``b ^ True``, ``-b``) compute;
3. a set display is a ``set`` (it was a frozenset constant: type and in-place operators
   wrong); an in-place operator on a set does not make a new object;
4. in-place ``list += iterable``, ``list *= n`` and ``dict |= d`` mutate the object that
   every alias sees (they built new objects; ``+=`` of a tuple or range raised TypeError);
5. dict views are views: ``keys() | keys()``, ``keys() == {..}`` (a list stood in).
"""

import functools

import pytest
import torch
from against_eager import run_against_eager

import torch_plugin

BACKENDS = ["eager", "aot_eager"]


def _tensor_args(shapes=((4, 3), (4, 3), (4, 3), (5, 2))):
    return [(torch.randn(s),) for s in shapes]


# --- 1. MAKE_FUNCTION with constant defaults --------------------------------------------------
def _mf_defaults(x):
    def f(a, b=2, *, c=3):
        return a * b + c

    return f(x), f(x, 3, c=1)


def _mf_annotated_defaults(x):
    def f(a: torch.Tensor, b: int = 2) -> torch.Tensor:
        return a * b

    return f(x), f(x, 4)


def _mf_partial_of_local(x):
    def f(a, b, c=1):
        return a * b + c

    p = functools.partial(f, x, c=2)
    return p(3), p(b=4)


def _mf_mixed_defaults(x):
    k = x.shape[1]

    def f(a, b=1, c="s", *, d=k, e=(1, 2)):
        return a * b + d + len(c) + len(e)

    return f(x), f(x, 2, "abc", d=1, e=())


# --- 2. text and operators of symbolic sizes --------------------------------------------------
def _fmt_fstring(x):
    n = x.shape[0]
    return x + 1, f"{n}", f"{x.shape}", f"{n:03d}", f"{n:>5}", f"{n!r}", f"{n / 2}"


def _fmt_str_repr(x):
    return x + 1, str(x.shape[0]), repr(x.shape[1]), str(x.shape), repr(x.size()), str([x.shape[0]])


def _fmt_percent(x):
    n = x.shape[0]
    return x + 1, "%d" % n, "%s-%d" % (x.shape, n), "%r" % (tuple(x.shape),)  # noqa: UP031


def _fmt_str_methods(x):
    n = x.shape[0]
    return x + 1, "{} {}".format(*x.shape), f"{n:>4}", "x".join(map(str, x.shape))


def _sym_operators(x):
    n = x.shape[0]
    b = n > 3
    return x * b, ~n, divmod(n, 2), divmod(n, 3.0), b ^ True, -b, n ^ 1


# --- 3. sets ----------------------------------------------------------------------------------
def _set_display(x):
    s = {1, 2}
    return x + 1, type(s) is set, isinstance(s, frozenset), sorted(s | {3})


def _set_alias_ior(x):
    s = {1}
    t = s
    t |= {2}
    return x + 1, sorted(s), t is s


def _set_arg_ior(x, t, u):
    t |= u
    return x + len(t)


# --- 4. in-place list and dict operators ------------------------------------------------------
def _list_imul_alias(x):
    a = [x]
    m = a
    a *= 2
    return len(m), m is a, m


def _list_iadd_iterables(x):
    a = [x]
    m = a
    a += (1, 2)
    a += range(2)
    a += "ab"
    return m, a is m


def _dict_ior_alias(x):
    d = {"a": x}
    e = d
    d |= {"b": 1}
    return e, d is e


def _dict_ior_arg(x, d):
    d |= {"b": x}
    return x + 1


def _n_times_list(x):
    return x + 1, 2 * [1, 2], 3 * (x.shape[0],)


# --- 5. dict views ----------------------------------------------------------------------------
def _view_ops(x):
    d1 = {"a": 1, "b": 2}
    d2 = {"b": 2, "c": 3}
    return (
        x + len(d1.keys() & d2.keys()),
        sorted(d1.keys() | d2.keys()),
        sorted(d1.keys() - d2.keys()),
        d1.keys() == {"a", "b"},
        d1.keys() == ["a", "b"],
        d1.values() == d1.values(),
        d1.items() == {("a", 1), ("b", 2)},
        type(d1.keys()).__name__,
    )


CASES = [
    (_mf_defaults, _tensor_args),
    (_mf_annotated_defaults, _tensor_args),
    (_mf_partial_of_local, _tensor_args),
    (_mf_mixed_defaults, _tensor_args),
    (_fmt_fstring, _tensor_args),
    (_fmt_str_repr, _tensor_args),
    (_fmt_percent, _tensor_args),
    (_fmt_str_methods, _tensor_args),
    (_sym_operators, _tensor_args),
    (_set_display, _tensor_args),
    (_set_alias_ior, _tensor_args),
    (_set_arg_ior, lambda: [(a, {1}, {2, 3}) for (a,) in _tensor_args()]),
    (_list_imul_alias, _tensor_args),
    (_list_iadd_iterables, _tensor_args),
    (_dict_ior_alias, _tensor_args),
    (_dict_ior_arg, lambda: [(a, {"a": 1}) for (a,) in _tensor_args()]),
    (_n_times_list, _tensor_args),
    (_view_ops, _tensor_args),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn,make", CASES, ids=[c[0].__name__.lstrip("_") for c in CASES])
def test_against_eager(backend, fn, make):
    run_against_eager(backend, fn, make())


def test_make_function_defaults_captured():
    """The function with constant defaults is captured in one graph (it was an internal
    error, which left the frame uncaptured)."""
    torch_plugin.reset()
    try:
        torch_plugin.optimize("eager", nopython=True)(_mf_defaults)(torch.randn(3))
        assert torch_plugin.stats.graphs_compiled == 1
    finally:
        torch_plugin.reset()


def test_symbolic_size_text_after_recompile():
    """After the recompile that makes the size dynamic, its text is the new size."""
    torch_plugin.reset()
    try:
        opt = torch_plugin.optimize("eager")(_fmt_fstring)
        for n in (4, 4, 5, 7):
            _, text, shape, *_ = opt(torch.randn(n, 2))
            assert text == str(n) and shape == f"torch.Size([{n}, 2])"
    finally:
        torch_plugin.reset()


# --- 6. min/max with key= ---------------------------------------------------------------------
def _minmax_key(x):
    d = {"b": 2, "a": 3}
    pairs = [(2, "b"), (1, "a")]
    return x + 1, min(d, key=d.get), max(pairs, key=lambda p: p[1]), max([], default=7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_minmax_key(backend):
    """min/max with key=/default= raised TypeError inside the translator (call_max() got an
    unexpected keyword argument 'key'); now a clean graph break."""
    run_against_eager(backend, _minmax_key, _tensor_args())


# --- 7. a symbolic size as a dict key ---------------------------------------------------------
def _size_keyed_dict(x):
    n = x.shape[0]
    d = {n: 1, "k": 2}  # BUILD_MAP with a symbolic key after the dynamic recompile
    d[n + 1] = 3  # STORE_SUBSCR
    by_size = {m: m * 2 for m in x.shape}  # MAP_ADD
    return x + d[n] + d.get(n + 1, 0), list(d), by_size, n in d


@pytest.mark.parametrize("backend", BACKENDS)
def test_symbolic_size_as_dict_key(backend):
    """``{n: 1}`` with a symbolic ``n`` raised TypeError (unhashable SymInt) inside the
    translator, hidden as a graph break; the key is now the concrete size, under a guard."""
    shapes = ((4, 3), (4, 3), (5, 3), (6, 2), (5, 3))
    run_against_eager(backend, _size_keyed_dict, _tensor_args(shapes))
    # one graph per size, no graph break: nopython=True raises CaptureError at a break
    torch_plugin.reset()
    try:
        opt = torch_plugin.optimize(backend, nopython=True)(_size_keyed_dict)
        for shape in shapes:
            x = torch.randn(shape)
            assert opt(x)[1] == _size_keyed_dict(x)[1]
    finally:
        torch_plugin.reset()
