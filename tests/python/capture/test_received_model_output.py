"""A HF ModelOutput the captured frame receives (a model's output passed on to a function,
or live at a graph break; issue #12): ``to_tuple()``, ``keys()``, item and attribute reads
in one graph, guarded on its type, dict keys and fields; returned as the caller's own object;
writes to it are a graph break (the caller's object)."""

from __future__ import annotations

import pytest
import torch

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture")
transformers = pytest.importorskip("transformers")
from transformers.modeling_outputs import BaseModelOutput


def _head(out):
    first, *rest = out.to_tuple()
    return first * 2, list(out.keys()), out["last_hidden_state"].sum(), out[0].mean(), len(rest)


def _outputs(hidden=False):
    h = torch.randn(2, 3)
    if hidden:
        return BaseModelOutput(last_hidden_state=h, hidden_states=(h + 1, h + 2))
    return BaseModelOutput(last_hidden_state=h)


def test_reads_in_one_graph_and_guarded_on_its_fields():
    opt = torch_plugin.optimize("eager")(_head)
    for hidden in (False, False, True, True):
        out = _outputs(hidden)
        got, want = opt(out), _head(out)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1] and got[4] == want[4]
        torch.testing.assert_close(got[2], want[2])
    assert torch_plugin.stats.graph_breaks == []
    # one entry without hidden_states, one with: their keys differ
    assert torch_plugin.stats.graphs_compiled == 2


def test_returned_as_the_same_object():
    def f(out):
        return out, out.last_hidden_state + 1

    opt = torch_plugin.optimize("eager")(f)
    out = _outputs()
    got = opt(out)
    assert got[0] is out
    torch.testing.assert_close(got[1], out.last_hidden_state + 1)


def test_write_to_a_received_output_is_a_graph_break():
    def f(out):
        out.last_hidden_state = out.last_hidden_state * 3
        return out.last_hidden_state + 1

    opt = torch_plugin.optimize("eager")(f)
    a = _outputs()
    b = BaseModelOutput(last_hidden_state=a.last_hidden_state.clone())
    got, want = opt(a), f(b)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(a.last_hidden_state, b.last_hidden_state)
    torch.testing.assert_close(a["last_hidden_state"], b["last_hidden_state"])
