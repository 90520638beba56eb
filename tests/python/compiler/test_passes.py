"""Each pass on a hand-built IR graph: before/after, with the verifier run after every pass."""

import pytest
import torch

from torch_plugin import _C

F32 = 6
OPTS = {"freeze": True, "verify": True}


def test_pipeline_lists_passes_in_order():
    assert _C._compiler.pass_names() == [
        "dead_code_elimination", "remove_clones", "batch_norm_scale_shift",
        "constant_folding", "library_patterns", "split_projection", "propagate_strides", "fusion", "codegen",
        "dead_code_elimination",
        "memory_planning",
    ]  # fmt: skip


def test_dead_code_elimination_keeps_outputs_and_in_place_ops():
    g = _C._compiler.Graph()
    x = g.add_input(F32, [4], [1])
    (dead,) = g.add_node("aten::relu", "default", [("t", x)], 1, False)
    g.set_type(dead, F32, [4], [1])
    (live,) = g.add_node("aten::neg", "default", [("t", x)], 1, False)
    g.set_type(live, F32, [4], [1])
    (mut,) = g.add_node("aten::add_", "Tensor", [("t", x), ("t", live), ("c", 1)], 1, True)
    g.set_type(mut, F32, [4], [1])
    g.set_outputs([live])
    assert g.run_pass("dead_code_elimination", OPTS)
    text = str(g)
    assert "aten::relu" not in text and "aten::neg" in text and "aten::add_" in text


def _clone_graph(out_strides, output_clone=False, in_place=False):
    """x -> relu -> clone -> neg -> output (and the clone itself as an output)."""
    g = _C._compiler.Graph()
    x = g.add_input(F32, [4, 6], [6, 1])
    (r,) = g.add_node("aten::relu", "default", [("t", x)], 1, False)
    g.set_type(r, F32, [4, 6], [6, 1])
    (c,) = g.add_node("aten::clone", "default", [("t", r), ("c", None)], 1, False)
    g.set_type(c, F32, [4, 6], out_strides)
    (n,) = g.add_node("aten::neg", "default", [("t", c)], 1, False)
    g.set_type(n, F32, [4, 6], [6, 1])
    outputs = [n, c] if output_clone else [n]
    if in_place:
        (m,) = g.add_node("aten::add_", "Tensor", [("t", x), ("t", n), ("c", 1)], 1, True)
        g.set_type(m, F32, [4, 6], [6, 1])
    g.set_outputs(outputs)
    return g


def test_remove_clones_removes_a_copy_of_the_same_layout():
    g = _clone_graph([6, 1])
    assert g.run_pass("remove_clones", OPTS)
    assert "aten::clone" not in str(g)


@pytest.mark.parametrize(
    "kw",
    [
        pytest.param({"out_strides": [1, 4]}, id="other_strides"),
        pytest.param({"out_strides": [6, 1], "output_clone": True}, id="graph_output"),
        pytest.param({"out_strides": [6, 1], "in_place": True}, id="in_place_op_in_graph"),
    ],
)
def test_remove_clones_keeps_an_observable_copy(kw):
    g = _clone_graph(**kw)
    assert not g.run_pass("remove_clones", OPTS)
    assert "aten::clone" in str(g)


def test_conv_batch_norm_keeps_the_weight():
    """A batch norm after a convolution becomes a scale and shift; the convolution keeps the
    weight constant itself (no folded copy)."""
    torch.manual_seed(0)
    w, b = torch.randn(4, 3, 3, 3), torch.randn(4)
    gamma, beta, mean, var = (
        torch.rand(4) + 0.5,
        torch.randn(4),
        torch.randn(4),
        torch.rand(4) + 0.5,
    )
    g = _C._compiler.Graph()
    x = g.add_input(F32, [1, 3, 8, 8], [192, 64, 8, 1])
    cw, cb = g.add_constant(w), g.add_constant(b)
    (y,) = g.add_node("aten::convolution", "default",
                      [("t", x), ("t", cw), ("t", cb), ("c", [1, 1]), ("c", [1, 1]), ("c", [1, 1]),
                       ("c", False), ("c", [0, 0]), ("c", 1)], 1, False)  # fmt: skip
    g.set_type(y, F32, [1, 4, 8, 8], [256, 64, 8, 1])
    consts = [g.add_constant(t) for t in (gamma, beta, mean, var)]
    outs = g.add_node(
        "aten::_native_batch_norm_legit_no_training",
        "default",
        [("t", y)] + [("t", c) for c in consts] + [("c", 0.1), ("c", 1e-5)],
        3,
        False,
    )
    for o, shape in zip(outs, ([1, 4, 8, 8], [0], [0])):
        g.set_type(o, F32, shape, [256, 64, 8, 1][: len(shape)] if len(shape) == 4 else [1])
    g.set_outputs([outs[0]])
    assert g.run_pass("batch_norm_scale_shift", OPTS)
    text = str(g)
    assert "batch_norm" not in text and text.count("aten::convolution") == 1
    executor = _C._compiler.Executor(g, release_owned_constants=False)
    assert w.data_ptr() in {t.data_ptr() for t in executor.constants()}  # w itself
    x = torch.randn(1, 3, 8, 8)
    y = torch.nn.functional.conv2d(x, w, b, padding=1)
    want = torch.nn.functional.batch_norm(y, mean, var, gamma, beta, False, 0.1, 1e-5)
    torch.testing.assert_close(executor.run([x])[0], want, rtol=1e-4, atol=1e-5)


def test_cuda_pipeline_keeps_weights_and_plans_no_arena():
    """CUDA: batch norms become a scale and shift (no folded weight copy), no memory plan."""
    names = _C._compiler.pass_names("cuda")
    assert "batch_norm_scale_shift" in names
    assert "fold_conv_bn" not in names and "memory_planning" not in names


def test_cpu_pipeline_keeps_weights():
    """CPU: batch norms become a scale and shift too (oneDNN's convolution reads the module's
    own weight; fold_conv_bn would make a scaled copy of it)."""
    names = _C._compiler.pass_names("cpu")
    assert "batch_norm_scale_shift" in names and "fold_conv_bn" not in names


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("dims", [3, 4, 5])
def test_batch_norm_scale_shift_matches_batch_norm(affine, dims):
    """The rewrite on a CPU graph (the pass is device-neutral; both pipelines run it), run by
    the executor against eager's batch norm on fresh inputs and special values."""
    torch.manual_seed(dims)
    c = 5
    shape = [3, c, 7, 6, 2][:dims]
    strides = torch.empty(shape).stride()
    stats = [torch.randn(c), torch.rand(c) + 0.5]
    params = [torch.rand(c) + 0.5, torch.randn(c)] if affine else []
    g = _C._compiler.Graph()
    x = g.add_input(F32, shape, list(strides))
    consts = [g.add_constant(t) for t in params] or [None, None]
    consts += [g.add_constant(t) for t in stats]
    args = [("t", x)] + [("t", v) if v is not None else ("c", None) for v in consts]
    outs = g.add_node(
        "aten::_native_batch_norm_legit_no_training",
        "default",
        args + [("c", 0.1), ("c", 1e-5)],
        3,
        False,
    )
    g.set_type(outs[0], F32, shape, list(strides))
    for o in outs[1:]:
        g.set_type(o, F32, [0], [1])
    (r,) = g.add_node("aten::relu", "default", [("t", outs[0])], 1, False)
    g.set_type(r, F32, shape, list(strides))
    g.set_outputs([r])
    assert not g.run_pass("batch_norm_scale_shift", {"verify": True})  # not frozen
    assert g.run_pass("batch_norm_scale_shift", OPTS)
    text = str(g)
    assert "batch_norm" not in text and "aten::mul" in text and "aten::add" in text, text
    executor = _C._compiler.Executor(g, release_owned_constants=False)
    w, b = params if affine else (None, None)
    for trial in range(3):
        inp = torch.randn(shape) * 10
        if trial == 2:
            inp.view(-1)[:4] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])
        want = torch.relu(torch.nn.functional.batch_norm(inp, *stats, w, b, False, 0.1, 1e-5))
        (got,) = executor.run([inp])
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_verifier_rejects_use_before_definition():
    g = _C._compiler.Graph()
    x = g.add_input(F32, [2], [1])
    g.set_outputs([x])
    g.verify()
    with pytest.raises(RuntimeError, match="unknown pass"):
        g.run_pass("no_such_pass", OPTS)
