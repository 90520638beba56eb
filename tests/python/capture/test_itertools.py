"""itertools iterators built in captured code (variables/itertools_calls.py, issue #12):
one graph, equal to eager over calls, and a generator argument advanced exactly as far as
eager advances it (its side effects, here appends to a list, compared)."""

from __future__ import annotations

import itertools
import operator

import pytest
import torch

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture")


def _gen(xs, log):
    for i, x in enumerate(xs):
        log.append(i)
        yield x


CASES = {
    "chain": lambda xs, t, log: sum(itertools.chain(xs, [t]), t),
    "chain_of_generator": lambda xs, t, log: [
        a * 2 for a in itertools.chain(_gen(xs, log), xs[:1])
    ],
    "islice": lambda xs, t, log: [a + t for a in itertools.islice(xs, 1, None)],
    "islice_generator_stops_early": lambda xs, t, log: [
        x + 1 for x in itertools.islice(_gen(xs, log), 2)
    ],
    "islice_step": lambda xs, t, log: [x + 1 for x in itertools.islice(xs, 0, 3, 2)],
    "product": lambda xs, t, log: [t * (i + j) for i, j in itertools.product(range(2), range(3))],
    "product_repeat": lambda xs, t, log: len(list(itertools.product([t, t], repeat=2))) * t,
    "zip_longest": lambda xs, t, log: [
        a * b for a, b in itertools.zip_longest(xs, [2, 3], fillvalue=1)
    ],
    "repeat": lambda xs, t, log: torch.stack(list(itertools.repeat(t, 3))),
    "count_with_zip": lambda xs, t, log: [x * i for i, x in zip(itertools.count(1, 2), xs)],
    "accumulate": lambda xs, t, log: list(itertools.accumulate(xs)),
    "accumulate_func_initial": lambda xs, t, log: list(
        itertools.accumulate(xs, operator.mul, initial=t)
    ),
    "pairwise": lambda xs, t, log: [a - b for a, b in itertools.pairwise(xs)],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_itertools_in_one_graph(name):
    fn = CASES[name]
    opt = torch_plugin.optimize("eager")(fn)
    for _ in range(2):
        xs = [torch.randn(3) for _ in range(4)]
        t = torch.randn(3)
        log_got, log_want = [], []
        state = (torch.is_grad_enabled(), torch.get_default_dtype())
        got = opt(xs, t, log_got)
        assert (torch.is_grad_enabled(), torch.get_default_dtype()) == state
        want = fn(xs, t, log_want)
        torch.testing.assert_close(got, want)
        assert log_got == log_want
    assert torch_plugin.stats.graph_breaks == []
    assert torch_plugin.stats.failures == []
