"""cuBLASLt products whose output rows are not 16-byte aligned (an odd N: GPT-2's LM head,
N = 50257) run padded: in place by row classes (rows q, q + P, ... as one aligned product each
over whole 16-byte vectors of columns, the first and last few columns through a scratch of 32
bytes a row; csrc/libs/cublaslt_padded.cpp, padded_split), or, where A is stored column-major
or the classes would read B more often than chunks by more than the chunks' copy (few rows),
in chunks of rows into a scratch of aligned leading dimension, each copied into the contiguous
output (padded_chunk_desc). Peak memory of
an in-place product is eager's (no chunk scratch beside the output).
Against eager on fresh random inputs over several calls, for the op called directly and
through the "plugin" backend, asserting the path through the padded-product counter and the
executor's step descriptions. GPU tests; they skip without a GPU."""

import math

import pytest
import torch
import torch.nn.functional as F

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 5e-3}


def _padding(scratch_bytes=None):
    from torch_plugin._C import _cuda

    return _cuda.cublaslt_padding(scratch_bytes)


@pytest.fixture
def padding():
    """Sets the padded products' scratch limit for one test (None: unchanged) and restores
    it; returns a function giving the padded-product counter."""
    before = _padding()["scratch_bytes"]
    yield lambda limit=None: _padding(limit)["products"]
    _padding(before)


@pytest.fixture
def in_place():
    """The count of padded products computed in place (row classes), with row classes on
    for the test (the default) and restored after."""
    from torch_plugin import _C

    before = _C._cuda.cublaslt_padding(None, True)["in_place_on"]
    yield lambda: _padding()["in_place"]
    _C._cuda.cublaslt_padding(None, before)


@pytest.fixture(autouse=True)
def _no_tf32():
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved


def _splits(m, n, k, dtype, residual):
    """Whether the padded product of x [m, k] and w [n, k] (row-major) runs in place by row
    classes (libs/cublaslt.h, padded_split) under the current settings."""
    from torch_plugin import _C

    name = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    return _C._cuda.padded_split(m, n, k, name, residual=residual) is not None


def _expect_padded(m, k, n, dtype):
    es = torch.tensor([], dtype=dtype).element_size()
    return m > 1 and (n * es) % 16 != 0 and n * es >= 16 and (k * es) % 16 == 0


def _close(got, want, dtype):
    tol = TOL[dtype]
    scale = max(want.abs().max().item(), 1e-3)
    torch.testing.assert_close(got.double(), want.double(), rtol=tol, atol=tol * scale)


@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize(
    "m,k,n",
    [(37, 64, 1001), (300, 96, 2049), (4, 32, 50257), (37, 33, 1001), (5, 64, 3), (7, 64, 9)],
)
@pytest.mark.parametrize("epilogue", ["none", "bias_relu", "residual", "bias_residual_gelu"])
@pytest.mark.parametrize("path", ["in_place", "chunks", "chunks_rows8"])
def test_linear_pointwise_padded(dtype, m, k, n, epilogue, path, padding, in_place):
    """Padded products against float64, by row classes (the default) and in chunks."""
    from torch_plugin import _C

    es = torch.tensor([], dtype=dtype).element_size()
    if path != "in_place":  # the in_place fixture restores the setting
        _C._cuda.cublaslt_padding(None, False)
    if path == "chunks_rows8":  # chunks of 8 rows (the last one shorter when m % 8)
        ld = (n * es + 15) // 16 * 16
        padding(8 * ld + ld // 2)
    bias = "bias" in epilogue
    res = "residual" in epilogue
    act = {"none": "", "bias_relu": "relu", "residual": "", "bias_residual_gelu": "gelu_tanh"}[
        epilogue
    ]
    for call in range(3):
        torch.manual_seed(call)
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
        b = torch.randn(n, device="cuda", dtype=dtype) if bias else None
        r = torch.randn(m, n, device="cuda", dtype=dtype) if res else None
        before = padding()
        before_in_place = in_place()
        got = torch.ops.torch_plugin.linear_pointwise(x, w, b, r, act, 0.0, 0.0)
        ran = padding() - before
        want = x.double() @ w.double().T
        if b is not None:
            want = want + b.double()
        if r is not None:
            want = want + r.double()
        if act == "relu":
            want = want.relu()
        elif act == "gelu_tanh":
            want = F.gelu(want, approximate="tanh")
        assert got.is_contiguous() and got.shape == (m, n) and got.dtype == dtype
        _close(got, want, dtype)
        assert ran == int(_expect_padded(m, k, n, dtype)), (m, k, n, dtype, ran)
        # x and w row-major, C (the residual) contiguous: a padded product is in place when
        # row classes are on and its classes read w no more than the chunks would
        # (padded_split's rule; few rows run in chunks).
        split = path == "in_place" and _splits(m, n, k, dtype, res)
        assert in_place() - before_in_place == (ran if split else 0), (m, k, n)


@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("bias", [False, True])
def test_column_major_x_runs_in_chunks(dtype, bias, padding, in_place):
    """x stored column-major (its rows q, q + P, ... are no matrix): the chunked padded
    product, against eager over several calls."""
    m, k, n = 64, 64, 1001
    for call in range(3):
        torch.manual_seed(call)
        x = torch.randn(k, m, device="cuda", dtype=dtype).T  # [m, k], column-major
        w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
        b = torch.randn(n, device="cuda", dtype=dtype) if bias else None
        before, before_in_place = padding(), in_place()
        got = torch.ops.torch_plugin.linear_pointwise(x, w, b, None, "", 0.0, 0.0)
        assert padding() - before == 1 and in_place() == before_in_place
        want = x.double() @ w.double().T
        if b is not None:
            want = want + b.double()
        _close(got, want, dtype)


def _peak_bytes(fn):
    """Peak bytes fn() allocates above what was allocated before it, after one warm-up call
    (plans, tuning and torch's workspaces are made then)."""
    fn()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("bias", [False, True])
def test_padded_product_peak_is_eagers(dtype, bias, padding, in_place):
    """GPT-2's LM head at batch 32 ([4096, 768] x [768, 50257]): the padded product's peak is
    eager's (its output) plus at most 2 MiB (the head columns' scratch and the shifted bias),
    not a chunk scratch of tens of MB; and it agrees with eager."""
    m, k, n = 4096, 768, 50257
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
    b = torch.randn(n, device="cuda", dtype=dtype) if bias else None
    before = in_place()
    plugin = _peak_bytes(
        lambda: torch.ops.torch_plugin.linear_pointwise(x, w, b, None, "", 0.0, 0.0)
    )
    assert in_place() - before == 2
    eager = _peak_bytes(lambda: F.linear(x, w, b))
    out_bytes = m * n * x.element_size()
    print(f"peak above the inputs: plugin {plugin / 2**20:.1f} MiB, eager {eager / 2**20:.1f} MiB")
    assert plugin <= max(eager, out_bytes) + 2 * 2**20, (plugin, eager, out_bytes)
    got = torch.ops.torch_plugin.linear_pointwise(x, w, b, None, "", 0.0, 0.0)
    _close(got, F.linear(x.double(), w.double(), None if b is None else b.double()), dtype)


def _cuda_module():
    from torch_plugin import _C

    return getattr(_C, "_cuda", None)


@pytest.mark.skipif(_cuda_module() is None, reason="built without CUDA")
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize(
    "m,n",
    [
        (4096, 50257),
        (37, 1001),
        (300, 2049),
        (4, 50257),
        (64, 1002),
        (5, 1003),
        (129, 1006),
        (7, 9),
        (64, 9),
    ],
)
@pytest.mark.parametrize("residual", [False, True])
def test_split_writes_every_element_aligned(dtype, m, n, residual, in_place):
    """The in-place split's descriptors (no GPU): each class product's rows, columns, leading
    dimensions and pointers are 16-byte aligned, its columns whole 16-byte vectors (cuBLASLt
    gives aligned kernels only then); the classes write no element twice, and with the head's
    copy (the first columns) and the tail's (the last) every element is written; and what sits
    beside the output (the head's and tail's scratch: 32 bytes a row) is under 2% of it for rows
    of 1000 or more, where
    the chunked product's scratch was up to 64 MiB (the CPU-side model of the peak)."""
    es = 4 if dtype == "fp32" else 2
    per, k = 16 // es, 8
    split = _cuda_module().padded_split(m, n, k, dtype, residual=residual)
    if (n * es) % 16 == 0:
        assert split is None
        return
    p = per // math.gcd(n % per, per)
    if (p - _chunks(m, n, es)) * k > 2 * m:  # classes would read B too often: chunks
        assert split is None
        return
    assert split is not None
    assert split["period"] == p
    assert p == per // math.gcd(n % per, per) and (p * n * es) % 16 == 0
    written = torch.zeros(m, n, dtype=torch.int32)
    for part in split["parts"]:
        q, c0, w = part["row0"], part["col0"], part["n"]
        rows = list(range(q, m, p))
        assert part["m"] == len(rows) > 0 and 0 <= c0 < per
        assert w > 0 and w % per == 0 and n - per < c0 + w <= n
        assert part["lda"] == p * k and part["ldd"] == p * n
        assert ((q * n + c0) * es) % 16 == 0 and part["align_d"] >= 16
        assert part["align_a"] >= 16 and part["align_b"] >= 16
        if residual:
            assert part["ldc"] == p * n and part["align_c"] >= 16
        written[rows, c0 : c0 + w] += 1
    assert [part["row0"] for part in split["parts"]] == sorted(
        part["row0"] for part in split["parts"]
    )
    head, tail0 = split["head_n"], split["tail_col0"]
    assert 0 < head < per and split["head_m"] == m and split["head_ldd"] == 2 * per
    assert split["tail_n"] == n - tail0 and 0 <= n - tail0 < per and split["tail_ldd"] == 2 * per
    assert (written <= 1).all()  # no element written twice by the classes
    assert (written[:, head:tail0] == 1).all()  # between head and tail, by its class only
    # Rows of a class with no whole vector of columns (none written) are covered by the head
    # and the tail; with the copies (last), every element is written.
    written[:, :head] = 1
    written[:, tail0:] = 1
    assert (written == 1).all()
    scratch = m * 2 * per * es
    if n >= 1000:  # the scratch's 32 bytes a row against the output's row
        assert scratch * 50 <= m * n * es, (scratch, m * n * es)


def _chunks(m, n, es, limit=64 << 20):
    """How many chunks padded_chunk_desc cuts m rows into under the scratch limit (rows per
    chunk: all m when they fit, else the largest power of two that fits)."""
    per = 16 // es
    ld = (n + per - 1) // per * per
    fit = max(limit // (ld * es), 1)
    rows = 1
    while rows * 2 <= fit:
        rows *= 2
    chunk = m if fit >= m else rows
    return (m + chunk - 1) // chunk


@pytest.mark.skipif(_cuda_module() is None, reason="built without CUDA")
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_split_only_where_classes_read_b_no_more(dtype, in_place):
    """GPT-2's LM head ([m, 768] x [768, 50257]): at batch 32 (4096 rows, 8 chunks bf16, 16
    fp32) the classes split it; at batch 1 (128 rows, one chunk) they would read the weights
    P times where the chunk reads them once and copies the logits: chunks. Batch 8 (1024
    rows): bf16 (P = 8, 2 chunks) chunks, fp32 (P = 4, 4 chunks) classes."""
    split = _cuda_module().padded_split
    assert split(4096, 50257, 768, dtype) is not None
    assert split(128, 50257, 768, dtype) is None
    assert (split(1024, 50257, 768, dtype) is None) == (dtype == "bf16")


@pytest.mark.skipif(_cuda_module() is None, reason="built without CUDA")
def test_split_does_not_apply(in_place):
    split = _cuda_module().padded_split
    assert split(64, 1024, 768, "bf16") is None  # aligned rows: no padding
    assert split(1, 1001, 768, "bf16") is None  # one row
    assert split(64, 1001, 33, "bf16") is None  # odd K: A and B rows misaligned
    assert split(64, 3, 768, "bf16") is None  # n under 16 bytes


@needs_gpu
def test_padding_off_runs_unpadded(padding):
    padding(0)
    x = torch.randn(64, 64, device="cuda")
    w = torch.randn(1001, 64, device="cuda")
    before = padding()
    got = torch.ops.torch_plugin.linear_pointwise(x, w, None, None, "", 0.0, 0.0)
    assert padding() == before
    _close(got, x.double() @ w.double().T, torch.float32)


def _record_compiled_graphs(monkeypatch):
    from torch_plugin.compiler import stages as compile_mod

    built = []
    init = compile_mod.CompiledGraph.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(compile_mod.CompiledGraph, "__init__", record)
    return built


class _Head(torch.nn.Module):
    """A norm, a projection with a bias and an LM head without one (odd N, as GPT-2's)."""

    def __init__(self, k, n):
        super().__init__()
        self.norm = torch.nn.LayerNorm(k)
        self.proj = torch.nn.Linear(k, k)
        self.head = torch.nn.Linear(k, n, bias=False)

    def forward(self, x):
        return self.head(torch.relu(self.proj(self.norm(x))))


@needs_gpu
@pytest.mark.parametrize("mode", ["fp32", "bf16", "fp16", "autocast_bf16"])
@pytest.mark.parametrize("k,n", [(64, 1001), (96, 50257)])
def test_model_head_runs_padded(mode, k, n, monkeypatch, padding, in_place):
    import torch_plugin

    torch_plugin.reset()
    built = _record_compiled_graphs(monkeypatch)
    dtype = DTYPES.get(mode, torch.float32)
    torch.manual_seed(0)
    model = _Head(k, n).to("cuda", dtype).eval()
    compiled = torch_plugin.optimize("plugin")(model)
    out_dtype = torch.bfloat16 if mode == "autocast_bf16" else dtype
    before = padding()
    for call in range(3):
        x = torch.randn(3, 41, k, device="cuda", dtype=dtype)
        with (
            torch.no_grad(),
            torch.autocast("cuda", torch.bfloat16, enabled=mode == "autocast_bf16"),
        ):
            want = model(x)
            got = compiled(x)
        assert got.dtype == out_dtype and got.is_contiguous() and got.shape == want.shape
        _close(got, want, out_dtype)
    assert padding() - before >= 3
    steps = "\n".join(g.describe() for g in built)
    assert "padded rows=" in steps and f"of m={3 * 41}" in steps, steps
    # Row classes (x and w row-major) where their rule takes them, else chunks.
    assert ("in place" in steps) == _splits(3 * 41, n, k, out_dtype, False), steps


@pytest.mark.skipif(_cuda_module() is None, reason="built without CUDA")
def test_row_classes_are_on_by_default():
    """In-place padded products are the default (measured faster than the chunks on an H200:
    GPT-2's LM head bf16 0.70 against 0.94 ms): a fresh process has them on."""
    import subprocess
    import sys

    code = "from torch_plugin import _C; print(_C._cuda.cublaslt_padding()['in_place_on'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True", out
