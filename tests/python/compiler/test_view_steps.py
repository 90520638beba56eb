"""View steps (csrc/runtime/view_step.cpp): the view ops of a compiled graph and a cat with
one non-empty input run as native steps ("view ..." in the executor's description, never
"fallback ..."), and what a user observes is eager's: values, sizes, strides, and that an
output is a new tensor where eager's is (mutating it leaves the inputs alone)."""

import pytest
import torch


def heads(parts):
    """q, k, v of [2, 8, 8] as [2, 2, 8, 4] heads (by index: fx cannot iterate a split)."""
    return [parts[i].view(2, 8, 2, 4).permute(0, 2, 1, 3) * 1.5 for i in range(3)]


def twice(parts):
    return [parts[i] * 2 for i in range(3)]


# (name, fn, make inputs, ops expected as view steps)
CASES = [
    (
        "view_permute",
        lambda x: (x * 2).view(4, 3, 5).permute(2, 0, 1) + 1,
        lambda: torch.randn(12, 5),
        ["aten::view", "aten::permute"],
    ),
    (
        "transpose_unsqueeze",
        lambda x: (x + 1).transpose(0, 1).unsqueeze(1) * x.t().unsqueeze(1),
        lambda: torch.randn(6, 7),
        ["aten::unsqueeze"],
    ),
    (
        "select_slice",
        lambda x: (x * 3)[:, 1:5:2].select(0, 2) - 1,
        lambda: torch.randn(4, 9),
        ["aten::select.int", "aten::slice.Tensor"],
    ),
    (
        "split_heads",
        lambda x: heads((x + 0).split(8, -1)),
        lambda: torch.randn(2, 8, 24),
        ["aten::split_with_sizes", "aten::permute"],
    ),
    (
        "split_with_sizes",
        lambda x: twice((x - 1).split([3, 5, 2], 1)),
        lambda: torch.randn(4, 10),
        ["aten::split_with_sizes"],
    ),
    (
        "expand_squeeze",
        lambda x: (x + 1).unsqueeze(0).expand(3, 5, 6).sum(0) + (x * 2).unsqueeze(1).squeeze(1),
        lambda: torch.randn(5, 6),
        ["aten::unsqueeze"],
    ),
    ("view_output", lambda x: (x * 2).view(-1), lambda: torch.randn(3, 4), ["aten::view"]),
    (
        "squeeze_dims",  # nn.MultiheadAttention's `.squeeze(-2)` after a transpose
        lambda x: (x * 2).view(3, 1, 4, 1, 5).transpose(0, -2).squeeze((-2, 1)) + 1,
        lambda: torch.randn(12, 5),
        ["aten::squeeze.dims"],
    ),
    (
        "squeeze_all",
        lambda x: (x - 1).view(1, 12, 1, 5).squeeze() * 3,
        lambda: torch.randn(12, 5),
        ["aten::squeeze"],
    ),
]


def view_lines(graphs) -> tuple[list[str], list[str]]:
    """The executor's view steps and its fallback steps of view-like ops."""
    views, fallbacks = [], []
    for g in graphs:
        for line in g.describe().splitlines():
            if "view aten::" in line:
                views.append(line)
            elif "fallback aten::" in line and any(
                op in line for op in ("view", "permute", "split", "select", "slice", "cat")
            ):
                fallbacks.append(line)
    return views, fallbacks


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_views_match_eager_as_view_steps(case, graphs, compile_plugin, assert_close):
    _, fn, make, ops = case
    c = compile_plugin(fn, make())
    views, fallbacks = view_lines(graphs)
    assert not fallbacks, fallbacks
    described = "\n".join(views)
    assert any(op in described for op in ops), described
    for _ in range(3):  # compiled, cached, again on fresh inputs
        x = make()
        got, want = c(x), fn(x)
        assert_close(got, want)
        for g, w in zip(
            got if isinstance(got, list) else [got], want if isinstance(want, list) else [want]
        ):
            assert g.shape == w.shape and g.stride() == w.stride()


@pytest.mark.parametrize(
    "empty",
    [lambda x: x.new_empty(0), lambda x: x.new_empty(2, 0, 5)],
    ids=["legacy_1d", "same_rank"],
)
def test_cat_with_empty_input_is_a_copy(empty, graphs, compile_plugin, assert_close):
    """A key/value cache's first step: cat([empty past, k]) is k's values in a new tensor
    with eager's strides; a user's in-place change to it leaves k alone."""

    def fn(x):
        k = (x * 2).permute(0, 2, 1)  # a non-contiguous input to the cat
        return torch.cat([empty(x), k], dim=1), k + 1

    c = compile_plugin(fn, torch.randn(2, 5, 3))
    assert any("view aten::cat" in line for line in view_lines(graphs)[0])
    for _ in range(3):
        x = torch.randn(2, 5, 3)
        (got, got_k1), (want, want_k1) = c(x), fn(x)
        assert_close(got, want)
        assert got.stride() == want.stride()
        got.add_(100.0)
        assert_close(got_k1, want_k1)


def test_cat_of_two_inputs_stays_aten(graphs, compile_plugin, assert_close):
    def fn(x):
        return torch.cat([x * 2, x + 1], dim=0)

    c = compile_plugin(fn, torch.randn(3, 4))
    assert not any("view aten::cat" in line for line in view_lines(graphs)[0])
    x = torch.randn(3, 4)
    assert_close(c(x), fn(x))


def test_expand_with_implicit_is_a_view_step(graphs, compile_plugin, assert_close):
    """ATen's matmul of a transposed 3-d input by a weight that needs no gradient expands the
    weight over the batch (expand(w, sizes, implicit=False)) and calls bmm."""

    def fn(x, w):
        return torch.matmul((x * 2).transpose(0, 1), w)

    c = compile_plugin(fn, torch.randn(3, 5, 4), torch.randn(4, 6))
    views, _ = view_lines(graphs)
    described = "\n".join(g.describe() for g in graphs)
    assert "view aten::expand" in "\n".join(views), described
    assert "fallback aten::expand" not in described, described
    for _ in range(3):
        x, w = torch.randn(3, 5, 4), torch.randn(4, 6)
        assert_close(c(x, w), fn(x, w))
