# ruff: noqa: FURB192
"""Issue #31 audit, second suite: its whole-graph gaps (dtype casts, set operations,
collections types, OrderedDict, ``vars``, generators, ``isinstance``, inference mode, class
attributes, user operators, module buffers, a TransformerEncoderLayer, activation
checkpointing), one probe each, as the first suite's in test_issue31_audit.py.

Each probe runs in eager Python and under ``optimize("eager", fullgraph=True)`` through the
differential harness (tests/fuzz/differential.py), and once more without fullgraph (graph
breaks allowed), which must equal eager too (``one_graph``, tests/fuzz/one_graph.py). A
probe that still breaks is ``xfail(strict=True)`` with the reason.
"""

from __future__ import annotations

import collections

import pytest
import torch
from audit_probes import _BOX_CALLS, _VEC_CALLS, NT, Box, Vec, _inference_mode, probe_params
from one_graph import one_graph, rand

pytestmark = pytest.mark.usefixtures("fresh_capture")


# --------------------------------------------------------------------------- module state


class Counter:
    count = 0


class BufMod(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(4))

    def forward(self, x):
        self.buf[:] = x
        self.buf += 1
        return self.buf * 2


# --------------------------------------------------------------------------- probes


def _dtype_casts(x):
    return x.to(torch.float64), x.double().half(), x.type(torch.int32), x.type(), x.float().dtype


def _set_ops(x):
    a, b = {1, 2, 3}, {2, 3, 4}
    return x * len((a | b) - (a & b)) + len(a ^ b) + a.issubset(b)


def _ordered_dict_iteration_then_move(x):
    o = collections.OrderedDict(a=1, b=2, c=3)
    o.move_to_end("a", last=False)
    total = x
    for k, v in o.items():
        total = total * v + len(k)
    o.move_to_end("c", last=False)
    return total, list(o), o.popitem(), o.popitem(last=False)


def _collections_types(x):
    c = collections.Counter("abca")
    return x * c["a"], c.most_common(1)


def _ordered_dict(x):
    o = collections.OrderedDict(a=x)
    o["b"] = x * 2
    o.move_to_end("a")
    o.popitem(last=False)
    return list(o.values()), o, list(o)


def _vars_dict(x, o):
    return x * sum(vars(o).values()), sorted(vars(o))


def _gen(x):
    yield x
    yield x + 1


def _yield_from_gen(x):
    yield from _gen(x)
    yield x * 3


def _yield_from(x):
    return sum(_yield_from_gen(x))


def _sender(x):
    got = yield x
    yield got * 2


def _generator_send(x):
    g = _sender(x)
    a = next(g)
    b = g.send(x + 1)
    return a + b


def _isinstance(x, o):
    return (
        x * isinstance(x, torch.Tensor)
        + isinstance(o, (Box, Vec))
        + issubclass(type(o), Box)
        + isinstance(x, torch.nn.Parameter)
    )


def _class_attr_mutation(x):
    Counter.count += 1
    return x * Counter.count


def _user_operators(x, v):
    return (v + v).v + x


def _list_reverse(x):
    lst = [x, x * 2, x * 3]
    lst.reverse()
    return lst


def _sorted_dict(x):
    return x * sorted({"b": 1, "a": 2})[0].__len__()


def _namedtuple_replace(x):
    return NT(x, 2)._replace(b=5)


def _delattr(x, o):
    o.tmp = 1
    delattr(o, "tmp")
    return x * hasattr(o, "tmp")


def _checkpoint_body(x):
    return torch.sin(x) * 2


def _activation_checkpoint(x):
    return torch.utils.checkpoint.checkpoint(_checkpoint_body, x, use_reentrant=False) + 1


# name -> (issue class, fn, calls, observe, reason when it still breaks or None)
PROBES: dict[str, tuple] = {
    "dtype_casts": (
        "suite2",
        _dtype_casts,
        None,
        None,
        None,
    ),
    "set_operations": ("suite2", _set_ops, None, None, None),
    "collections_types": (
        "suite2",
        _collections_types,
        None,
        None,
        None,
    ),
    "ordered_dict": ("suite2", _ordered_dict, None, None, None),
    "ordered_dict_iteration_then_move": (
        "suite2",
        _ordered_dict_iteration_then_move,
        None,
        None,
        None,
    ),
    "vars_dict": (
        "suite2",
        _vars_dict,
        _BOX_CALLS,
        None,
        None,
    ),
    "yield_from": ("suite2", _yield_from, None, None, None),
    "generator_send": ("suite2", _generator_send, None, None, None),
    "isinstance_checks": ("suite2", _isinstance, _BOX_CALLS, None, None),
    "inference_mode_block": (
        "suite2",
        _inference_mode,
        None,
        None,
        None,
    ),
    "class_attr_mutation": (
        "suite2",
        _class_attr_mutation,
        None,
        {"cls": Counter},
        None,
    ),
    "user_class_operators": ("suite2", _user_operators, _VEC_CALLS, None, None),
    "list_reverse": ("suite2", _list_reverse, None, None, None),
    "sorted_dict": ("suite2", _sorted_dict, None, None, None),
    "namedtuple_replace": ("suite2", _namedtuple_replace, None, None, None),
    "delattr": ("suite2", _delattr, _BOX_CALLS, None, None),
    "module_buffer_inplace": (
        "suite2",
        BufMod(),
        (rand(4), rand(4), lambda: (torch.randn(1),)),
        None,
        None,
    ),
    "transformer_encoder_layer": (
        "suite2",
        torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0).eval(),
        (rand(2, 3, 8), rand(2, 3, 8), rand(2, 5, 8)),
        None,
        None,
    ),
    "transformer_encoder_layer_batch_first_train": (
        "suite2",
        torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True),
        (rand(2, 3, 8), rand(2, 3, 8), rand(3, 3, 8)),
        None,
        None,
    ),
    "activation_checkpointing": (
        "suite2",
        _activation_checkpoint,
        None,
        None,
        None,
    ),
}


@pytest.mark.parametrize("name", probe_params(PROBES))
def test_probe(name):
    _, fn, calls, observe, _ = PROBES[name]
    one_graph(fn, calls, observe)
