"""Differential tests: each case runs under eager PyTorch and under the backends "eager",
"aot_eager" and "plugin" over several calls (compile, cached, recompile), comparing the
result and everything observable afterwards (tests/fuzz/differential.py).

The first group checks the harness itself (it must catch a wrong backend); the rest are
reduced programs, hand-written or found by the program generator (tests/fuzz), each one
mechanism by which a compiled frame could give a wrong result silently (issue #10).
"""

import pytest
import torch
from differential import DifferentialError, World, check, run_case, snapshot

pytestmark = pytest.mark.usefixtures("fresh_capture")


def rand(*shape, **kw):
    """Arguments built lazily: the harness seeds the RNG before each call."""
    return lambda: (torch.randn(*shape, **kw),)


# --------------------------------------------------------------------------- the harness


def _off_by(eps):
    def backend(gm, example_inputs):
        def run(*args):
            out = gm(*args)
            return type(out)(o + eps if isinstance(o, torch.Tensor) else o for o in out)

        return run

    return backend


def test_harness_catches_a_wrong_backend():
    def f(x):
        return x.sin() * 2

    check(f, rand(3), rand(3), rand(4), backends=[_off_by(0.0)])
    with pytest.raises(DifferentialError, match="call 0: out"):
        check(f, rand(3), rand(3), rand(4), backends=[_off_by(1e-3)])


def test_harness_compares_identity_and_state():
    a, b = [1], [1]
    assert snapshot([a, a]) != snapshot([a, b])  # aliasing is part of the snapshot
    t = torch.zeros(2)
    s1 = snapshot({"t": t})
    t.add_(1)
    assert not torch.equal(s1[2][0][1][2], t)  # tensors are copied


LOG = []
COUNT = 0


def test_harness_restores_globals_and_compares_them():
    def f(x):
        global COUNT
        LOG.append(x.sum())
        COUNT += 1
        return x * COUNT

    check(f, rand(3), rand(3), rand(4), observe={"globals": globals()})
    assert LOG == [] and COUNT == 0  # every run started from (and left) the original state


def test_harness_exceptions_must_match():
    def f(x):
        if x.shape[0] == 4:
            raise KeyError("four")
        return x + 1

    check(f, rand(3), rand(3), rand(4))


def test_harness_module_state_rng_and_global_state():
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))

    def build():
        mod = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
        mod.load_state_dict(m.state_dict())
        return World(mod, [rand(2, 4), rand(2, 4), rand(3, 4)], {"model": mod})

    assert run_case(build) == []


# --------------------------------------------------------------------------- known bugs
# (being fixed in the capture frontend; these fail until then)


def test_setitem_on_local_tensor():
    def f(x, n):
        y = x * n
        y[0] = 5.0
        return y

    check(f, (torch.randn(3), 2), (torch.randn(3), 2), (torch.randn(4), 3))


def test_setitem_on_input_tensor():
    def f(x):
        x[1:3] = 0.0
        return x.sum()

    check(f, rand(4), rand(4), rand(5))


def test_setitem_through_a_view():
    def f(x):
        v = x[1]
        v[0] = 9.0
        return x + 1

    check(f, rand(3, 2), rand(3, 2), rand(4, 2))


def test_int_argument_0_1_value_guard():
    def f(x, n):
        return x.sum() * n

    # n = 0, 1, 2: the second recompile is automatic-dynamic in n
    check(f, (torch.randn(3), 0), (torch.randn(3), 1), (torch.randn(3), 2))
    check(f, (torch.randn(3), 1), (torch.randn(3), 0), (torch.randn(3), 2))


G_LIST = [1]
G_DICT = {"a": 1}


class Holder:
    def __init__(self):
        self.items = G_LIST


HOLDER = Holder()


def test_list_through_global_and_local_alias():
    def f(x):
        al = G_LIST
        al.append(x.sum())
        return x + len(G_LIST)

    check(f, rand(3), rand(3), rand(4), observe={"globals": globals()})


def test_list_through_global_and_attribute():
    def f(x, h):
        G_LIST.append(1)
        h.items.append(x.sum())
        return x * len(h.items)

    check(
        f,
        lambda: (torch.randn(3), HOLDER),
        lambda: (torch.randn(3), HOLDER),
        lambda: (torch.randn(4), HOLDER),
        observe={"globals": globals()},
    )


def test_argument_that_is_a_global_list():
    def f(x, lst):
        G_LIST.append(2)
        lst.append(x.sum())
        return x * len(lst)

    check(
        f,
        lambda: (torch.randn(3), G_LIST),
        lambda: (torch.randn(3), G_LIST),
        lambda: (torch.randn(4), G_LIST),
        observe={"globals": globals()},
    )


def test_batchnorm_train_mode_counts_batches_once():
    m = torch.nn.BatchNorm1d(4)

    def build():
        mod = torch.nn.BatchNorm1d(4)
        mod.load_state_dict(m.state_dict())
        mod.train()
        return World(mod, [rand(8, 4), rand(8, 4), rand(6, 4)], {"model": mod})

    assert run_case(build) == []


def test_autocast_region():
    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
        return y, y.dtype

    check(
        f,
        lambda: (torch.randn(3, 4), torch.randn(4, 4)),
        lambda: (torch.randn(3, 4), torch.randn(4, 4)),
        lambda: (torch.randn(5, 4), torch.randn(4, 4)),
    )


def _gen(t, log):
    log.append("g0")
    yield t * 2
    log.append("g1")
    yield t + 1


def test_generator_partially_consumed():
    def f(x, log):
        g = _gen(x, log)
        return next(g)

    check(
        f, lambda: (torch.randn(3), []), lambda: (torch.randn(3), []), lambda: (torch.randn(4), [])
    )


_NESTED = """
import sys, torch
sys.path.insert(0, sys.argv[1])
from differential import check

inner = torch.compile(lambda t: t.cos() + 1, backend="eager")

def f(x):
    return inner(x * 2) - 1

rand = lambda: (torch.randn(3),)
check(f, rand, rand, lambda: (torch.randn(4),))
"""


def test_torch_compile_nested():
    """A torch.compile'd function called from captured code. Today this spins forever
    inside the C++ frame hook (_C.so), so the case runs in a subprocess with a timeout:
    a hang fails the test instead of the whole run."""
    import os
    import subprocess
    import sys

    fuzz_dir = os.path.join(os.path.dirname(__file__), "..", "..", "fuzz")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _NESTED, os.path.abspath(fuzz_dir)],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("torch.compile nested in captured code hangs (no result in 120 s)")
    assert proc.returncode == 0, proc.stderr[-3000:]


# --------------------------------------------------------------------------- found by tests/fuzz


def test_global_dict_same_key_written_twice_last_write_wins():
    def f(x):
        G_DICT["b"] = x.sum()
        G_DICT["b"] = x.sum() * 2
        return x

    check(f, rand(3), rand(3), rand(4), observe={"globals": globals()})


def test_global_list_len_after_append():
    def f(x):
        G_LIST.append(x.sum())
        return x + len(G_LIST)

    check(f, rand(3), rand(3), rand(4), observe={"globals": globals()})
