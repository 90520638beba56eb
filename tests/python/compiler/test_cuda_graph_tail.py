"""A compiled graph run in two parts (Executor.run_prefix / run_suffix), and CUDA graphs that
capture all but a short tail whose outputs are too large to hold as static buffers
(cuda_graphs.tail_split: GPT-2's LM head).

CPU: for every split point of a small graph compiled without a memory plan, the prefix then
the suffix give run()'s outputs bit for bit on fresh inputs, and split_point picks the tail
that makes the large output. GPU (skips without one): a model whose logits are larger than
the static budget is captured up to its head, equal to eager over several calls, with a peak
memory within eager's plus a small slack.
"""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import torch_plugin
from torch_plugin.compiler import options as options_mod
from torch_plugin.compiler.decompositions import decomposition_table
from torch_plugin.compiler.stages import compile_graph


class Head(torch.nn.Module):
    """A block (norm, projection, GELU, residual) and an LM head with a wide vocabulary, as
    GPT-2 ends."""

    def __init__(self, k: int, vocab: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(k)
        self.proj = torch.nn.Linear(k, k)
        self.final = torch.nn.LayerNorm(k)
        self.head = torch.nn.Linear(k, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + torch.nn.functional.gelu(self.proj(self.norm(x)))
        return self.head(self.final(x))


def _compiled(model: torch.nn.Module, x: torch.Tensor):
    named = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    names, params = list(named), list(named.values())

    def fn(*args: torch.Tensor) -> tuple[torch.Tensor]:
        state = dict(zip(names, args[: len(names)]))
        return (torch.func.functional_call(model, state, args[len(names) :]),)

    with torch.no_grad():
        gm = make_fx(fn, decomposition_table=decomposition_table())(*params, x)
    with options_mod.overridden({"memory_planning": False}):
        return compile_graph(gm, params, inference=True), params


def test_prefix_then_suffix_equals_run() -> None:
    torch.manual_seed(0)
    model = Head(16, 300).eval()
    x = torch.randn(2, 5, 16)
    compiled, params = _compiled(model, x)
    executor = compiled.executor
    assert executor.arena_bytes() == 0
    n = len(executor.steps())
    assert n >= 3, executor.describe()

    def inputs(x):  # the executor's inputs: the frozen parameters are its constants
        return [x] if executor.num_frozen() else [*params, x]

    for call in range(3):
        x = torch.randn_like(x)
        args = inputs(x)
        (want,) = executor.run(args)
        with torch.no_grad():
            torch.testing.assert_close(want, model(x), rtol=1e-4, atol=1e-4)
        for k in range(1, n + 1):
            carried = executor.run_prefix(args, k)
            (got,) = executor.run_suffix(args, carried, k)
            assert torch.equal(got, want), (call, k, executor.describe())
    with pytest.raises(RuntimeError, match="no split at step"):
        executor.run_prefix(inputs(x), 0)
    with pytest.raises(RuntimeError, match="carried values"):
        executor.run_suffix(inputs(x), [], n - 1)


def test_split_point_leaves_the_large_output_to_the_tail() -> None:
    torch.manual_seed(0)
    model = Head(16, 4096).eval()
    x = torch.randn(4, 8, 16)
    compiled, _ = _compiled(model, x)
    executor = compiled.executor
    n = len(executor.steps())
    out_bytes = 4 * 8 * 4096 * 4
    assert executor.output_bytes() == out_bytes
    # A budget below the logits but above the hidden states: the tail makes the logits.
    k = executor.split_point(out_bytes // 4, 4)
    assert 0 < k < n, executor.describe()
    # The tail holds the head's product and nothing before the last norm's kernel.
    tail = [kind for kind, _, _ in executor.steps()[k:]]
    assert tail[0] != "kernel" and len(tail) <= 3, (k, executor.describe())
    assert any(kind in ("onednn", "cublaslt", "fallback") for kind in tail), tail
    # No budget fits anything carried: no split. A tail of 0 steps: none either.
    assert executor.split_point(0, 4) == -1
    assert executor.split_point(out_bytes // 4, 0) == -1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_graph_captured_before_a_large_head(dtype) -> None:
    from torch_plugin.compiler import cuda_graphs

    torch.manual_seed(0)
    # 128 tokens x 50257 logits: 25.7 MB in fp32, 12.9 MB in bf16 (under the budget: the
    # whole graph is captured then; the split is for fp32).
    model = Head(768, 50257).to("cuda", dtype).eval()
    torch_plugin.reset()
    before = dict(cuda_graphs.counters)
    compiled = torch_plugin.optimize("plugin")(model)
    x = torch.randn(1, 128, 768, device="cuda", dtype=dtype)
    with torch.no_grad():
        eager_peak = _peak_mb(model, x)
        outs, kept = [], []
        for call in range(5):
            x = torch.randn_like(x)
            got, want = compiled(x), model(x)
            tol = 2e-2 if dtype == torch.bfloat16 else 2e-3
            torch.testing.assert_close(got, want, rtol=tol, atol=tol)
            outs.append(got)
            kept.append(got.clone())
        # earlier outputs stay intact after later replays
        for got, copy in zip(outs, kept, strict=True):
            assert torch.equal(got, copy)
        plugin_peak = _peak_mb(compiled, x)
    # Captured (re-recorded when the fresh inputs move); split only where the logits are
    # above the static budget (fp32).
    assert cuda_graphs.counters["captured"] > before["captured"], cuda_graphs.counters
    splits = cuda_graphs.counters["tail_splits"] - before["tail_splits"]
    assert splits == (1 if dtype == torch.float32 else 0), cuda_graphs.counters
    out_mb = x.shape[1] * 50257 * x.element_size() / 2**20
    assert plugin_peak <= eager_peak + out_mb + 8, (plugin_peak, eager_peak)


def _peak_mb(fn, x: torch.Tensor, calls: int = 4) -> float:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(calls):
        out = fn(torch.randn_like(x))
        del out
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**20
