"""Each guard kind fails when it should and only then (torch_plugin/capture/guards.py and
csrc/capture/{guards,leaf_guards}.cpp, through ``torch_plugin.optimize``).

Every test changes the input in one respect and expects exactly one recompile and the
eager answer; the unchanged input afterwards hits an existing entry (no recompile). Also:
the recompile log names the failing guard in source terms, the cache-size limit warns once
and keeps using the entries, and the most-failed check moves first.
"""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch

import torch_plugin
from torch_plugin import _C, config


@pytest.fixture(autouse=True)
def fresh():
    torch_plugin.reset()
    yield
    torch_plugin.reset()


class Recompiles:
    """Calls ``opt`` and ``eager`` on the same inputs and counts recompiles."""

    def __init__(self, fn, backend: str = "eager") -> None:
        self.eager = fn
        self.opt = torch_plugin.optimize(backend)(fn)

    def __call__(self, *args, recompiles: int) -> None:
        before = torch_plugin.stats.recompiles
        got = self.opt(*args)
        expected = self.eager(*args)
        assert torch_plugin.stats.recompiles - before == recompiles
        torch.testing.assert_close(got, expected)


def add_one(x):
    return x + 1


# --- TENSOR_MATCH ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda x: torch.randn(5, 3), id="size"),
        pytest.param(lambda x: torch.randn(4, 3, dtype=torch.float64), id="dtype"),
        pytest.param(lambda x: torch.randn(3, 4).t(), id="stride"),
        pytest.param(lambda x: torch.randn(4, 3, requires_grad=True), id="requires_grad"),
        pytest.param(lambda x: torch.randn(4, 3).unsqueeze(0), id="dim"),
    ],
)
def test_tensor_match(change):
    f = Recompiles(add_one)
    f(torch.randn(4, 3), recompiles=0)
    f(torch.randn(4, 3), recompiles=0)
    f(change(None), recompiles=1)
    f(torch.randn(4, 3), recompiles=0)


def test_tensor_match_dispatch_keys():
    f = Recompiles(lambda x: x * 2)
    x = torch.randn(3, dtype=torch.complex64)
    f(x, recompiles=0)
    f(torch.randn(3, dtype=torch.complex64).conj(), recompiles=1)  # Conjugate key
    f(x, recompiles=0)


# --- constants, types, containers -----------------------------------------------------


def test_equals_match_on_a_constant_argument():
    f = Recompiles(lambda x, n: x * n)
    f(torch.randn(3), 2, recompiles=0)
    f(torch.randn(3), 3, recompiles=1)
    f(torch.randn(3), 2, recompiles=0)


def test_type_match_int_vs_float():
    f = Recompiles(lambda x, n: x * n)
    f(torch.randn(3), 2, recompiles=0)
    f(torch.randn(3), 2.0, recompiles=1)  # 2 == 2.0, but another type
    f(torch.randn(3), 2, recompiles=0)


def test_len_match_on_a_list_of_tensors():
    f = Recompiles(lambda xs: sum(x * 2 for x in xs))
    f([torch.randn(3), torch.randn(3)], recompiles=0)
    f([torch.randn(3), torch.randn(3), torch.randn(3)], recompiles=1)
    f([torch.randn(3), torch.randn(3)], recompiles=0)


def test_dict_keys_match():
    f = Recompiles(lambda d: d["a"] + d["b"])
    f({"a": torch.randn(3), "b": torch.randn(3)}, recompiles=0)
    f({"b": torch.randn(3), "a": torch.randn(3)}, recompiles=1)  # key order
    f({"a": torch.randn(3), "b": torch.randn(3)}, recompiles=0)


SCALE = 2


def scaled(x):
    return x * SCALE


def test_global_value():
    global SCALE
    f = Recompiles(scaled)
    f(torch.randn(3), recompiles=0)
    SCALE = 3
    try:
        f(torch.randn(3), recompiles=1)
    finally:
        SCALE = 2
    f(torch.randn(3), recompiles=0)


def test_closure_cell():
    k = 2

    def g(x):
        return x * k

    f = Recompiles(g)
    f(torch.randn(3), recompiles=0)
    k = 5
    f(torch.randn(3), recompiles=1)
    k = 2
    f(torch.randn(3), recompiles=0)


def helper_a(x):
    return x + 1


def helper_b(x):
    return x - 1


HELPER = helper_a


def calls_helper(x):
    return HELPER(x) * 2


def test_id_match_on_a_global_function():
    global HELPER
    f = Recompiles(calls_helper)
    f(torch.randn(3), recompiles=0)
    HELPER = helper_b
    try:
        f(torch.randn(3), recompiles=1)
    finally:
        HELPER = helper_a
    f(torch.randn(3), recompiles=0)


# --- nn.Module: identity, training, parameters and buffers ---------------------------


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)
        self.drop = torch.nn.Dropout(0.5)
        self.register_buffer("shift", torch.randn(3))

    def forward(self, x):
        return self.drop(self.fc(x)) + self.shift


def test_module_training_flag():
    net = Net().eval()
    f = Recompiles(net)
    f(torch.randn(2, 3), recompiles=0)
    net.train()
    before = torch_plugin.stats.recompiles
    f.opt(torch.randn(2, 3))  # dropout: compare shapes only
    assert torch_plugin.stats.recompiles - before == 1
    net.eval()
    f(torch.randn(2, 3), recompiles=0)


def test_module_identity():
    net_a, net_b = Net().eval(), Net().eval()

    def run(net, x):
        return net(x)

    f = Recompiles(run)
    f(net_a, torch.randn(2, 3), recompiles=0)
    f(net_b, torch.randn(2, 3), recompiles=1)
    f(net_a, torch.randn(2, 3), recompiles=0)


@pytest.mark.parametrize("what", ["parameter of a submodule", "buffer"])
def test_parameter_and_buffer_identity(what):
    net = Net().eval()
    f = Recompiles(net)
    f(torch.randn(2, 3), recompiles=0)
    if what == "buffer":
        net.shift = torch.randn(3)
    else:
        net.fc.weight = torch.nn.Parameter(torch.randn(3, 3))
    f(torch.randn(2, 3), recompiles=1)
    f(torch.randn(2, 3), recompiles=0)


# --- global state ---------------------------------------------------------------------


@contextlib.contextmanager
def deterministic():
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)


@contextlib.contextmanager
def default_dtype(dtype):
    saved = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(saved)


@contextlib.contextmanager
def flag(obj, name, value):
    saved = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, saved)


@contextlib.contextmanager
def matmul_precision(value):
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(value)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)


@contextlib.contextmanager
def _autocast_dtype_only():
    """Autocast stays disabled; only its CPU dtype changes."""
    saved = torch.get_autocast_dtype("cpu")
    torch.set_autocast_dtype("cpu", torch.float16)
    try:
        yield
    finally:
        torch.set_autocast_dtype("cpu", saved)


GLOBAL_STATE_CHANGES = {
    "grad mode": lambda: torch.no_grad(),
    "autocast cpu": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    "autocast cpu dtype": lambda: _autocast_dtype_only(),
    "default dtype": lambda: default_dtype(torch.float64),
    "deterministic algorithms": deterministic,
    "cudnn.allow_tf32": lambda: flag(torch.backends.cudnn, "allow_tf32", False),
    "cudnn.benchmark": lambda: flag(torch.backends.cudnn, "benchmark", True),
    "cudnn.deterministic": lambda: flag(torch.backends.cudnn, "deterministic", True),
    "cudnn.enabled": lambda: flag(torch.backends.cudnn, "enabled", False),
    "cuda.matmul.allow_tf32": lambda: flag(torch.backends.cuda.matmul, "allow_tf32", True),
    "float32_matmul_precision": lambda: matmul_precision("medium"),
}


@pytest.mark.parametrize("name", list(GLOBAL_STATE_CHANGES))
def test_global_state(name):
    f = Recompiles(lambda x: x @ x.t() + 1)
    f(torch.randn(3, 3), recompiles=0)
    with GLOBAL_STATE_CHANGES[name]():
        f(torch.randn(3, 3), recompiles=1)
        f(torch.randn(3, 3), recompiles=0)
    f(torch.randn(3, 3), recompiles=0)


def test_global_state_failure_reason_names_the_flag():
    root = _C.RootGuardManager()
    root.add_global_state_match()
    with flag(torch.backends.cudnn, "allow_tf32", not torch.backends.cudnn.allow_tf32):
        reason = root.failure_reason([], {}, {}, None)
    assert reason.startswith("torch.backends.cudnn.allow_tf32 == ")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        reason = root.failure_reason([], {}, {}, None)
    assert reason == "torch.is_autocast_enabled('cpu') == False failed: got True"
    assert root.failure_reason([], {}, {}, None) is None


# --- recompile log, failure records, cache-size limit --------------------------------


def test_recompile_log_names_the_failing_guard_and_entry_count(capsys):
    torch_plugin.set_logs("recompiles")
    try:
        f = Recompiles(add_one)
        f(torch.randn(8), recompiles=0)
        f(torch.randn(16), recompiles=1)
    finally:
        torch_plugin.set_logs("")
    err = capsys.readouterr().err
    assert "recompiling <lambda>" in err or "recompiling add_one" in err
    assert "L['x'].size()[0] == 8 failed: got 16" in err
    assert "1 compiled entries" in err


def test_failed_lookup_records_the_failing_guard():
    opt = torch_plugin.optimize("eager")(add_one)
    opt(torch.randn(4))
    opt(torch.randn(4, dtype=torch.float64))
    entries = _C.cache_entries(add_one.__code__)
    assert len(entries) == 2
    older = entries[1][1]
    assert older.failures() == 1
    assert "L['x']" in older.last_failure()


def test_cache_size_limit_warns_once_and_keeps_the_entries(monkeypatch):
    monkeypatch.setattr(config, "cache_size_limit", 2)

    def g(x):
        return x * 3

    # Static shapes, so that each size is a new entry (dynamic shapes would serve them all).
    opt = torch_plugin.optimize("eager", dynamic=False)(g)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (1, 2, 3, 4, 1, 2):
            x = torch.randn(n)
            torch.testing.assert_close(opt(x), g(x))
    messages = [str(w.message) for w in caught if "cache_size_limit" in str(w.message)]
    assert len(messages) == 1
    assert "L['x'].size()[0] == 2 failed: got 3" in messages[0]
    assert _C.is_code_run_only(g.__code__)
    assert len(_C.cache_entries(g.__code__)) == 2
    captured = torch_plugin.stats.frames_captured
    opt(torch.randn(5))  # a miss past the limit: eager, without asking the translator
    assert torch_plugin.stats.frames_captured == captured


def test_most_failed_check_moves_first():
    root = _C.RootGuardManager()
    a = root.local(0, "L['a']")
    b = root.local(1, "L['b']")
    a.add_equals_match(1, "L['a'] == 1")
    b.add_equals_match(2, "L['b'] == 2")
    assert root.child_order() == ["L['a']", "L['b']"]
    assert root.check([1, 2], {}, {}, None)
    assert not root.check([1, 3], {}, {}, None)
    assert root.child_order() == ["L['b']", "L['a']"]
    assert root.last_failure() == "L['b'] == 2"


class Stack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(2, 2) for _ in range(3))
        self.head = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(2, 1))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def test_module_guards_run_no_python_code():
    """Attribute and container reads on nn.Modules bypass Module.__getattr__ and the
    containers' __getitem__ (the guard tree reads their dicts directly)."""
    import builtins
    import sys

    net = Stack().eval()
    f = Recompiles(net)
    f(torch.randn(4, 2), recompiles=0)
    (_, root), *_ = _C.cache_entries(Stack.forward.__code__)
    assert root.num_checks() > 10
    calls: list = []

    def profiler(frame, event, arg):
        if event == "call":
            calls.append(frame.f_code.co_qualname)

    args = [net, torch.randn(4, 2)]
    sys.setprofile(profiler)
    try:
        passed = root.check(args, globals(), builtins.__dict__, None)
    finally:
        sys.setprofile(None)
    assert passed
    assert calls == []


# --- user objects: type and attributes read; identity only where it is used -----------


class Settings:
    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.calls = 0


class OtherSettings(Settings):
    pass


def scale_by_settings(x, s):
    s.calls = s.calls + 1
    s.last = x * s.scale
    return s.last, s


def test_user_object_guarded_by_type_and_attributes_not_identity():
    f = Recompiles(lambda x, s: scale_by_settings(x, s)[0])
    f(torch.randn(3), Settings(2.0), recompiles=0)
    f(torch.randn(3), Settings(2.0), recompiles=0)  # a new object, same class and values
    f(torch.randn(3), Settings(3.0), recompiles=1)  # an attribute read has another value
    f(torch.randn(3), OtherSettings(3.0), recompiles=1)  # another class


def test_user_object_attribute_writes_land_on_this_calls_object():
    opt = torch_plugin.optimize("eager")(scale_by_settings)
    opt(torch.randn(3), Settings(2.0))
    for _ in range(3):
        s = Settings(2.0)
        x = torch.randn(3)
        out, returned = opt(x, s)
        assert returned is s
        assert s.calls == 1
        torch.testing.assert_close(s.last, x * 2.0)
        torch.testing.assert_close(out, x * 2.0)
    assert torch_plugin.stats.recompiles == 0


def same_or_not(x, a, b):
    if a is b:
        return x + 1
    return x - 1


def test_identity_comparison_of_user_objects_is_guarded():
    f = Recompiles(same_or_not)
    one, two = Settings(1.0), Settings(1.0)
    f(torch.randn(3), one, one, recompiles=0)
    f(torch.randn(3), two, Settings(1.0), recompiles=1)
    # the first entry holds: it was captured for one object passed twice (an ALIAS guard
    # between the arguments, not the identity of `one`)
    f(torch.randn(3), two, two, recompiles=0)
    f(torch.randn(3), one, Settings(1.0), recompiles=1)


def test_is_none_on_a_user_object_does_not_guard_identity():
    def f(x, s):
        if s is None:
            return x
        return x * s.scale

    check = Recompiles(f)
    check(torch.randn(3), Settings(2.0), recompiles=0)
    check(torch.randn(3), Settings(2.0), recompiles=0)
    check(torch.randn(3), None, recompiles=1)


class WithMethod:
    def factor(self):
        return 2.0


def test_instance_attribute_shadowing_a_method_recompiles():
    def f(x, obj):
        return x * obj.factor()

    check = Recompiles(f)
    check(torch.randn(3), WithMethod(), recompiles=0)
    check(torch.randn(3), WithMethod(), recompiles=0)
    shadowed = WithMethod()
    shadowed.factor = lambda: 3.0  # an instance attribute hides the method
    check(torch.randn(3), shadowed, recompiles=1)


class MaybeCached:
    def __init__(self, with_cache: bool) -> None:
        if with_cache:
            self.cache = 1.5


def test_hasattr_on_a_user_object_is_guarded_by_its_answer():
    def f(x, obj):
        if hasattr(obj, "cache"):
            return x * obj.cache
        return x - 1

    check = Recompiles(f)
    check(torch.randn(3), MaybeCached(False), recompiles=0)
    check(torch.randn(3), MaybeCached(False), recompiles=0)  # another object, same answer
    check(torch.randn(3), MaybeCached(True), recompiles=1)  # the answer changes
    check(torch.randn(3), MaybeCached(True), recompiles=0)
