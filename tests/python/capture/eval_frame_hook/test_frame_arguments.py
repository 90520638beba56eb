"""What transformed code runs with: the frame's arguments in slot order, its closure cells, its
globals, its ``self``.

See conftest.py and frame_callbacks.py in this folder."""

from __future__ import annotations

import sys

from frame_callbacks import Compiler, capturing

import torch_plugin._C as C


def test_varargs_kwargs_kwonly_and_defaults():
    def original(a, /, b, c=3, *rest, d, e=5, **extra):
        raise AssertionError("not run")

    def transformed(a, /, b, c, d, e, rest, extra):  # positional-only is allowed
        return (a, b, c, d, e, rest, extra)

    cb = Compiler().add(original, transformed)
    with capturing(cb):
        assert original(1, 2, d=4) == (1, 2, 3, 4, 5, (), {})
        assert original(1, 2, 30, 40, 50, d=4, e=6, f=7) == (1, 2, 30, 4, 6, (40, 50), {"f": 7})
        assert original(1, b=2, d=4, g=8) == (1, 2, 3, 4, 5, (), {"g": 8})
    assert cb.calls == [original.__code__]


def make_closure_pair(k):
    def original(x):
        return ("original", x, k)

    def transformed(x):
        return ("transformed", x, k)

    return original, transformed


def test_closures_each_run_with_their_own_cells():
    orig_1, trans_1 = make_closure_pair(10)
    orig_2, _ = make_closure_pair(20)
    assert orig_1.__code__ is orig_2.__code__
    cb = Compiler().add(orig_1, trans_1)
    with capturing(cb):
        assert orig_1(1) == ("transformed", 1, 10)
        assert orig_2(1) == ("transformed", 1, 20)  # same entry, other closure
        assert orig_1(2) == ("transformed", 2, 10)
    assert cb.calls == [orig_1.__code__]


def test_cell_arguments_and_cell_contents_changes():
    def original(a, b):
        def get():
            return a + b

        return ("original", get())

    def transformed(a, b):
        def get():
            return a + b

        a = a * 10
        return ("transformed", get())

    counter = 0

    def original_reads_free(x):
        return ("original", x + counter)

    def transformed_reads_free(x):
        return ("transformed", x + counter)

    cb = Compiler().add(original, transformed).add(original_reads_free, transformed_reads_free)
    with capturing(cb):
        assert original(1, 2) == ("transformed", 12)
        assert original_reads_free(1) == ("transformed", 1)
        counter = 5
        assert original_reads_free(1) == ("transformed", 6)


def test_transformed_code_runs_with_the_frames_globals():
    namespace = {"K": 5}
    exec("def original(x):\n    return ('original', x, K)\n", namespace)  # noqa: S102
    original = namespace["original"]

    def transformed(x):
        return ("transformed", x, K)  # noqa: F821 -- resolved in the frame's globals

    cb = Compiler().add(original, transformed)
    with capturing(cb):
        assert original(1) == ("transformed", 1, 5)
        namespace["K"] = 6
        assert original(1) == ("transformed", 1, 6)
    fn = C.cache_entries(original.__code__)
    assert len(fn) == 1


def test_methods_and_name_of_the_running_function():
    class Model:
        def forward(self, x):
            return ("original", x)

    def forward_t(self, x):
        return ("transformed", x, sys._getframe().f_code.co_name, type(self).__name__)

    cb = Compiler().add(Model.forward, forward_t)
    with capturing(cb):
        assert Model().forward(1) == ("transformed", 1, "forward_t", "Model")
