"""Regression tests for silent wrong results of capture, round 2, by mechanism.

Each case runs eager and each backend on deep copies of fresh random inputs, over several
calls (the compiling call, cached calls, a call that recompiles with another shape), and
compares the result, the identity relations among the result and the arguments (``is``),
every argument after the call, and object state the function touches.

1. an in-place op's result is its ``self`` (one variable per Python object);
2. ``hasattr`` on a tensor answers from the real tensor, not its FakeTensor;
3. an attribute write through a data descriptor or a custom ``__setattr__`` runs its code;
4. a named tuple subclass built in the frame keeps an instance attribute set on it;
5. a NumPy scalar constant in the graph.
"""

import typing

import numpy as np
import pytest
import torch
from against_eager import argsets as _argsets
from against_eager import run_against_eager

BACKENDS = ["eager", "aot_eager", "plugin"]


# --- 1. an in-place op's result is its self --------------------------------------------------
def _add_is_self(x):
    return x.add_(1) is x


def _mul_is_self(x):
    return x.mul_(2) is x


def _tensor_add_is_self(x):
    return torch.Tensor.add_(x, 1) is x


def _relu_inplace_is_self(x):
    return torch.nn.functional.relu(x, inplace=True) is x, x * 2


def _clone_add_is_self(x):
    z = x.clone()
    return z.add_(1) is z


def _identity_across_break(x):
    y = x.add_(1)
    c = x is y
    x.add_(1)
    print(end="")  # a graph break: a resume function runs the rest
    x.add_(1)
    return x is y, c


def _return_inplace_result(x):
    return x.add_(1)


def _return_inplace_result_and_self(x):
    y = x.mul_(3)
    return y, x


def _intermediate_inplace_returned(x):
    z = x * 2
    w = z.add_(1)
    return z, w, w.sum()


def _intermediate_inplace_result_unused(x):
    z = x * 2
    z.add_(1)  # the result is not used: the mutation must still happen
    return z + 1


def _inplace_result_in_containers(x):
    a = x.add_(1)
    b = x.clone().mul_(2)
    return [a, b], {"self": a, "other": b}


def _inplace_result_stored(x, out_list, out_dict):
    out_list.append(x.add_(1))
    out_dict["y"] = x.mul_(2)
    return x.sum()


def _to_same_dtype_is_self(x):
    return x.to(x.dtype) is x, x.contiguous() is x


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn",
    [
        _add_is_self,
        _mul_is_self,
        _tensor_add_is_self,
        _relu_inplace_is_self,
        _clone_add_is_self,
        _identity_across_break,
        _return_inplace_result,
        _return_inplace_result_and_self,
        _intermediate_inplace_returned,
        _intermediate_inplace_result_unused,
        _inplace_result_in_containers,
        _to_same_dtype_is_self,
    ],
)
def test_inplace_result_is_self(backend, fn):
    run_against_eager(backend, fn, _argsets(lambda s: (torch.randn(*s),)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_result_stored_where_caller_sees_it(backend):
    run_against_eager(
        backend, _inplace_result_stored, _argsets(lambda s: (torch.randn(*s), [], {}))
    )


# --- 2. hasattr on a tensor answers from the real tensor --------------------------------------
def _hasattr_test(x):
    return x + 2 if hasattr(x, "test") else x + 1


def _hasattr_fake_only(x):
    # FakeTensor has fake_mode; a real tensor does not
    return x + 2 if hasattr(x, "fake_mode") else x + 1


def _hasattr_intermediate(x):
    y = x * 2
    return y + (2 if hasattr(y, "fake_mode") else 1) + (4 if hasattr(y, "add") else 8)


def _hasattr_cuda_interface(x):
    return x + 2 if hasattr(x, "__cuda_array_interface__") else x + 1


def _reads_tensor_attribute(x):
    return x * x.scale + (1 if x.flag is None else 2)


def _tagged(shape, **attrs):
    t = torch.randn(*shape)
    for k, v in attrs.items():
        setattr(t, k, v)
    return t


@pytest.mark.parametrize("backend", BACKENDS)
def test_hasattr_on_tensor_attribute_set_by_caller(backend):
    # with the attribute, without it, with it again: each answer is guarded
    argsets = [
        (_tagged((4, 3), test=None),),
        (_tagged((4, 3)),),
        (_tagged((4, 3), test=1),),
        (_tagged((5, 2), test=None),),
        (_tagged((5, 2)),),
    ]
    run_against_eager(backend, _hasattr_test, argsets)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_hasattr_fake_only, _hasattr_intermediate, _hasattr_cuda_interface])
def test_hasattr_on_tensor_not_from_fake(backend, fn):
    run_against_eager(backend, fn, _argsets(lambda s: (torch.randn(*s),)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_attribute_read(backend):
    argsets = [
        (_tagged((4, 3), scale=3.0, flag=None),),
        (_tagged((4, 3), scale=5.0, flag=None),),
        (_tagged((4, 3), scale=5.0, flag=1),),
        (_tagged((5, 2), scale=2.0, flag=None),),
    ]
    run_against_eager(backend, _reads_tensor_attribute, argsets)


# --- 3. attribute writes that run code -------------------------------------------------------
class _Doubling:
    """A descriptor with only ``__set__``: stores twice the value in the instance dict."""

    def __set_name__(self, owner, name):
        self.name = name

    def __set__(self, obj, value):
        obj.__dict__[self.name] = 2 * value


class _WithDescriptor:
    field = _Doubling()


class _WithSetattr:
    def __setattr__(self, name, value):
        object.__setattr__(self, name, value * 3)


class _WithPropertySetter:
    def __init__(self):
        self._v = 0

    @property
    def v(self):
        return self._v

    @v.setter
    def v(self, value):
        self._v = value + 100


_GLOBAL_DESC = _WithDescriptor()
_GLOBAL_SETATTR = _WithSetattr()


def _descriptor_global(x):
    _GLOBAL_DESC.field = 10
    return x + _GLOBAL_DESC.field


def _descriptor_local(x):
    foo = _WithDescriptor()
    foo.field = 10
    return x + foo.field


def _descriptor_argument(x, foo):
    foo.field = 10
    return x + foo.field


def _setattr_global(x):
    _GLOBAL_SETATTR.v = 10
    return x + _GLOBAL_SETATTR.v


def _setattr_local(x):
    b = _WithSetattr()
    b.v = 10
    return x + b.v


def _setattr_argument(x, b):
    setattr(b, "v", 10)  # noqa: B010 - the setattr builtin, not STORE_ATTR
    return x + b.v


def _property_setter_argument(x, p):
    p.v = 1
    return x + p.v


def _object_state():
    return {
        "desc": dict(vars(_GLOBAL_DESC)),
        "setattr": dict(vars(_GLOBAL_SETATTR)),
    }


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn,extra",
    [
        (_descriptor_global, lambda: ()),
        (_descriptor_local, lambda: ()),
        (_descriptor_argument, lambda: (_WithDescriptor(),)),
        (_setattr_global, lambda: ()),
        (_setattr_local, lambda: ()),
        (_setattr_argument, lambda: (_WithSetattr(),)),
        (_property_setter_argument, lambda: (_WithPropertySetter(),)),
    ],
    ids=[
        "descriptor_global",
        "descriptor_local",
        "descriptor_argument",
        "setattr_global",
        "setattr_local",
        "setattr_argument",
        "property_setter_argument",
    ],
)
def test_attribute_write_runs_descriptor_or_setattr(backend, fn, extra):
    def reset_globals():
        vars(_GLOBAL_DESC).clear()
        vars(_GLOBAL_SETATTR).clear()

    def state():
        snapshot = _object_state()
        reset_globals()  # the next (optimized) call starts from the same state
        return snapshot

    reset_globals()
    # an argument object's attributes after the call are compared with the arguments
    run_against_eager(backend, fn, _argsets(lambda s: (torch.randn(*s), *extra())), state)


# --- 4. a named tuple subclass with instance attributes ---------------------------------------
class _Pair(typing.NamedTuple):
    a: torch.Tensor
    b: torch.Tensor


class _PairWithDict(_Pair):
    pass


def _namedtuple_attribute(x):
    t = _PairWithDict(x, x + 1)
    t.c = torch.tensor(3.0)
    return t


def _namedtuple_attribute_read(x):
    t = _PairWithDict(x, x + 1)
    t.c = x * 2
    return t.c + t.a, t


def _namedtuple_returned_twice(x):
    t = _PairWithDict(x, x + 1)
    return t, t, (t.a, t.b)


def _tuple_alias_across_break(x):
    t = (x + 1, x + 2)
    u = t
    print(end="")  # a graph break with `t` live twice (as t and u)
    return t is u, t[0] + u[1]


def _namedtuple_input_returned(x, t):
    return x + t.a, t


def _hasattr_namedtuple_input(x, t):
    return x + 1 if hasattr(t, "c") else x - 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn",
    [
        _namedtuple_attribute,
        _namedtuple_attribute_read,
        _namedtuple_returned_twice,
        _tuple_alias_across_break,
    ],
)
def test_namedtuple_subclass_instance_attribute(backend, fn):
    run_against_eager(backend, fn, _argsets(lambda s: (torch.randn(*s),)))


def _pair_input(shape, **attrs):
    t = _PairWithDict(torch.randn(*shape), torch.randn(*shape))
    for k, v in attrs.items():
        setattr(t, k, v)
    return t


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_namedtuple_input_returned, _hasattr_namedtuple_input])
def test_namedtuple_subclass_input(backend, fn):
    argsets = [
        (torch.randn(4, 3), _pair_input((4, 3), c=1)),
        (torch.randn(4, 3), _pair_input((4, 3))),
        (torch.randn(4, 3), _pair_input((4, 3), c=2)),
        (torch.randn(5, 2), _pair_input((5, 2), c=1)),
    ]
    run_against_eager(backend, fn, argsets)


# --- 5. NumPy scalar constants ----------------------------------------------------------------
def _add_scalar(a, s):
    return a + s


def _scalar_times(a, s):
    return s * a, torch.mul(a, s), a.add(s)


def _scalar_tensor(a, s):
    # torch.tensor(np.float64(x)) is float64, torch.tensor(x) float32: not the same call
    return a + torch.tensor(s), torch.full((2,), s)


def _scalar_arithmetic(a, s):
    return a * (s * 2), torch.clamp(a, min=s), s


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_add_scalar, _scalar_times, _scalar_tensor, _scalar_arithmetic])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
@pytest.mark.parametrize(
    "scalar",
    [np.float64(2.5), np.float32(1.5), np.int64(3), np.complex128(1 + 2j)],
    ids=["f64", "f32", "i64", "c128"],
)
def test_numpy_scalar_constant(backend, fn, dtype, scalar):
    def make(shape):
        a = (torch.randn(*shape) * 4).to(dtype)
        return a, scalar

    run_against_eager(backend, fn, _argsets(make))


def _numpy_times_int_across_break(x, npv, n):
    m = npv * 2 + n  # NumPy arithmetic: np.int64 in eager, also when n is symbolic
    print(end="")  # a graph break with `m` live
    return x + 1, m


@pytest.mark.parametrize("backend", BACKENDS)
def test_numpy_scalar_with_symbolic_int(backend):
    # n changes between calls: the recompile makes it a symbolic int
    argsets = [(torch.randn(2), np.int64(n), n) for n in (1, 1, 2, 3, 0)]
    run_against_eager(backend, _numpy_times_int_across_break, argsets)


# --- found by the widened program generator (tests/fuzz, families of issue #25) -------------
def _count_identity_with_symbolic_int(x, y, count):
    count = count + (x is not y)  # a bool added to an int that turns symbolic on recompile
    return x + 1, count


@pytest.mark.parametrize("backend", BACKENDS)
def test_bool_from_identity_added_to_symbolic_int(backend):
    # count changes between calls: the recompile makes it a symbolic int, and `True + s0`
    # must compute as `1 + s0` (sympy refuses a bool in an Add)
    argsets = [(torch.randn(2), torch.randn(2), n) for n in (0, 1, 2, 3)]
    run_against_eager(backend, _count_identity_with_symbolic_int, argsets)


def _unbound_inplace_with_overlap(y):
    return torch.Tensor.add_(y, y[0])  # eager: "some elements ... refer to a single memory"


def _inplace_function_with_overlap(y):
    return torch.relu_(y[1:]).sum() + torch.Tensor.mul_(y, 2).sum()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_unbound_inplace_with_overlap, _inplace_function_with_overlap])
def test_inplace_function_forms_check_overlap(backend, fn):
    run_against_eager(backend, fn, _argsets(lambda shape: (torch.randn(*shape),)))
