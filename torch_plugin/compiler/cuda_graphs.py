"""CUDA graphs for compiled inference graphs: capture once, replay on every later call.

A compiled graph whose steps launch many small kernels spends its time launching them (at
batch 1 a transformer layer's kernels take microseconds each); a CUDA graph replays them all
with one launch. :class:`CudaGraphRunner` wraps a compiled graph's boxed runner
(``run(list_of_inputs) -> list_of_outputs``, e.g. the C++ executor's ``run``):

- the first call runs the graph normally (warm-up: cuBLAS/cuDNN handles, workspaces, lazily
  loaded kernels); the second captures it on a side stream into a ``torch.cuda.CUDAGraph``.
  An input whose address was the same on both calls (a parameter or buffer of a graph that
  is not frozen, a persistent buffer, the output of an earlier compiled graph that the caller
  keeps) is read *in place*: the graph is captured on the caller's tensor itself. Every other
  input is read from a *static input buffer* (a copy, allocated outside the capture);
- later calls check every input's device, dtype, sizes and strides, and an in-place input's
  address too; they copy the other inputs into their static buffers with one batched launch
  (``torch._foreach_copy_``), replay the graph on the caller's current stream and return
  *copies* of the static outputs, so an output the caller keeps is never overwritten by the
  next replay (a copy per output: correct first; Inductor's cudagraph trees return the static
  buffers instead and warn on reuse);
- an in-place input whose address moved is re-recorded: the graph is captured again on the
  new address. An input that moves more than :data:`RERECORD_LIMIT` times is demoted to a
  static buffer (copied on every call from then on, never re-recorded for again). Inductor's
  cudagraph trees have the same policy for their static inputs (parameters, buffers, outputs
  of earlier cudagraph-managed graphs): a changed static address re-records, at most
  ``torch._inductor.config.triton.cudagraph_unexpected_rerecord_limit`` (128) times per
  function, after which the function runs without CUDA graphs; here the limit is per input
  and much smaller (a capture costs a warm-up run and the capture itself), and only the input
  that keeps moving loses its in-place read. A replay never reads a stale address: the graph
  reads an in-place input only while the call that passed it runs, and only when its address,
  device, dtype, sizes and strides are the captured ones (checked on every call); the graph
  never writes its inputs (graphs with an in-place op on an input are not captured);
- in the default mode, a graph whose outputs are too large for its static buffers but made
  by its last few steps is split (:func:`tail_split`): the steps before them are captured and
  the rest run after each replay, allocating their outputs as eager does;
- in the default mode, a graph whose static buffers (the input copies and the outputs, which
  a captured graph holds for as long as it lives, and which every replay copies out) would
  exceed :data:`STATIC_BYTES_LIMIT` or the executor's arena of activations (none on CUDA
  now: the caching allocator serves each step), whichever is larger, is not captured: eager holds none of them, so they would raise the peak memory
  above eager's (GPT-2 with its LM head, batch 32: 823 MB of logits held twice), while the
  launches a CUDA graph saves matter only when each kernel is small;
- the uncaptured run is timed before the capture (no timing run holds its activations
  beside a captured graph's buffers), and torch's cuBLAS workspaces are dropped around the
  capture, so that the capture stream's workspace lives in the graph's pool (Inductor's
  cudagraph trees do the same) instead of a second workspace beside eager's;
- the graphs of one device share one memory pool (``torch.cuda.graph_pool_handle``) and one
  capture stream, so
  a model whose graph breaks into several graphs holds one set of intermediate buffers. That is
  safe because each replay's outputs are copied out before another graph of the pool replays,
  and replays of one pool are ordered across streams by an event (:class:`_Pool`).

:func:`why_not_capturable` says why a compiled graph must not be captured (its executor's
steps, ``Executor.steps()``, name each op): inputs or constants not all on one CUDA device, an op that synchronizes
with the CPU (``nonzero``, ``item``, ...), an ATen random op (the runner's warm-up and timing
runs would draw numbers eager does not), an in-place op on a graph input (it would
write the static buffer, not the caller's tensor). Generated kernels with random ops are
captured: they read the generator's Philox seed and offset through torch's graph-safe
generator state (each replay draws new numbers, those an uncaptured call would draw), and
the runner puts the generator back after its warm-up, timing and capture runs, so a call
advances it once, as an uncaptured call does. A capture that fails anyway (an op that
turns out not to be capturable) is logged with the reason and the graph runs uncaptured.

Key parts: :class:`CudaGraphRunner`, :func:`why_not_capturable`, :data:`counters` (graphs
captured, replays, failed captures, re-records, demoted inputs, inputs read in place in this
process; for tests and logs), :data:`RERECORD_LIMIT`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

log = logging.getLogger(__name__)

# Ops that synchronize with the host (their output size or value depends on data), which a
# CUDA graph cannot capture.
_SYNCING_OPS = (
    "aten::nonzero", "aten::_local_scalar_dense", "aten::item", "aten::masked_select",
    "aten::unique", "aten::_unique", "aten::_unique2", "aten::unique_consecutive",
    "aten::unique_dim", "aten::repeat_interleave", "aten::bincount", "aten::histc",
    "aten::index.Tensor_bool", "aten::nonzero_static", "aten::_assert_async",
    "aten::equal", "aten::is_nonzero", "aten::allclose", "aten::to_sparse",
    "aten::_to_cpu", "aten::cpu",
)  # fmt: skip


def op_impurity(name: str) -> str | None:
    """Why running ATen op ``name`` ("aten::bernoulli.p", "aten::add_.Tensor") once more than
    eager would is observable (it mutates an argument or draws random numbers), or None.
    Names that do not resolve to an op count as impure."""
    op_name, _, overload = name.partition(".")
    ns, _, base = op_name.partition("::")
    try:
        op = getattr(getattr(getattr(torch.ops, ns), base), overload or "default")
    except AttributeError:
        return f"{name} is not a known op"
    if op._schema.is_mutable:
        return f"{name} mutates an argument"
    if torch.Tag.nondeterministic_seeded in op.tags:
        return f"{name} draws random numbers"
    return None


def why_not_capturable(
    steps: Sequence[tuple[str, str, str]],
    inputs: Sequence[torch.Tensor],
    constants: Sequence[torch.Tensor],
) -> str | None:
    """Why a compiled graph cannot be captured into a CUDA graph, or None when it can.

    Args:
        steps: the executor's steps as ``(kind, op, device)`` (``Executor.steps()``:
            ``("fallback", "aten::add.Tensor", "cuda:0")``, ``("kernel", "torch_plugin::fused",
            "cuda:0")``); only ATen fallbacks can synchronize, mutate or draw random numbers
            the runner cannot account for (generated kernels with random ops, kind
            ``"random_kernel"``, are capturable: see the module docstring).
        inputs: example inputs of the graph (its runtime inputs, without frozen constants).
        constants: the graph's frozen constants.
    """
    tensors = [t for t in [*inputs, *constants] if isinstance(t, torch.Tensor)]
    if not tensors:
        return "the graph has no tensor inputs"
    devices = {t.device for t in tensors}
    if len(devices) != 1 or next(iter(devices)).type != "cuda":
        return f"its tensors are not all on one CUDA device ({sorted(map(str, devices))})"
    if any(not isinstance(t, torch.Tensor) for t in inputs):
        return "an input is not a tensor"
    for kind, op, _device in steps:
        if kind != "fallback":
            continue
        if op.split(".")[0] in _SYNCING_OPS:
            return f"{op} synchronizes with the CPU"
        why = op_impurity(op)
        if why:
            return why
    return None


class _Pool:
    """The memory pool shared by the CUDA graphs of one device, and the event that orders
    their replays across streams."""

    def __init__(self, device: torch.device) -> None:
        self.handle = torch.cuda.graph_pool_handle()
        # One capture stream per pool: torch keeps a cuBLAS workspace per (handle, stream),
        # and a new stream per capture would leave one behind for each.
        self.stream = torch.cuda.Stream(device)
        self.lock = threading.Lock()
        self.last_replay: torch.cuda.Event | None = None
        self.device = device


counters = {
    "captured": 0,  # captures, re-records included
    "replays": 0,
    "failed": 0,
    "dropped": 0,
    "rerecords": 0,  # captures again because an in-place input moved
    "demoted": 0,  # in-place inputs demoted to static buffers (RERECORD_LIMIT)
    "inplace_inputs": 0,  # inputs captured in place (per capture)
    "copied_inputs": 0,  # inputs captured through a static buffer (per capture)
    "tail_splits": 0,  # graphs captured up to a tail that runs after each replay
}

# Times an input read in place may move (each move re-records the graph) before it is
# demoted to a static buffer copied on every call (see the module docstring).
RERECORD_LIMIT = 3

# Bytes of static buffers (input copies and outputs) a graph may hold in the default mode
# whatever its activations (see the module docstring); above it, no more than its arena.
# Every static byte is above eager's peak (eager copies no input and holds no second output):
# 16 MiB lets batch-1 transformers (inputs of token ids, outputs of a few MB) be captured,
# and keeps out ResNet-50 at batch 32 (its 19 MB input copy put the peak 2% above eager's on
# an H200), whose millisecond kernels gain little from one launch.
STATIC_BYTES_LIMIT = 16 << 20

# The most steps left out of a CUDA graph, after it, to make outputs too large for its static
# buffers (see :func:`tail_split`).
TAIL_STEPS = 4


def tail_split(executor: Any, keep: str, arena_bytes: int) -> int:
    """The step at which to split a compiled graph whose outputs are too large for a CUDA
    graph's static buffers in the default mode (``keep == "faster"``): steps before it are
    captured (their carried values, at most half the budget, are the static outputs), the
    last few (at most :data:`TAIL_STEPS`) run after each replay and allocate the large outputs
    as eager does. GPT-2 with its LM head at batch 1 in fp32: 25 MB of logits kept its whole
    graph out of CUDA graphs; the split captures all but the head's product. -1: no split
    (the outputs fit, the mode captures anyway, or no short tail makes them alone)."""
    budget = max(STATIC_BYTES_LIMIT, arena_bytes)
    if keep != "faster" or executor.output_bytes() <= budget:
        return -1
    return executor.split_point(budget // 2, TAIL_STEPS)


_pools: dict[torch.device, _Pool] = {}
_pools_lock = threading.Lock()


def _pool_for(device: torch.device) -> _Pool:
    with _pools_lock:
        pool = _pools.get(device)
        if pool is None:
            pool = _pools[device] = _Pool(device)
        return pool


def _clear_cublas_workspaces() -> None:
    """Drops torch's cuBLAS/cuBLASLt workspaces (each is allocated again at its next use)."""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()


def median_cuda_ms(
    call: Callable[[], Any], runs: int = 5, min_runs: int | None = None, budget_ms: float = 0.0
) -> float:
    """Median CUDA-event milliseconds of ``call()`` (its results dropped), each call between
    its own pair of events on the current stream: ``runs`` calls, or, with ``budget_ms``,
    fewer (at least ``min_runs``) once they have taken ``budget_ms`` together, so that
    timing a slow graph does not dominate its compile time. The one timing helper of the
    compiler's speed choices (the CUDA graph's replay against direct runs here, the compiled
    graph against the eager graph in ``torch_plugin.compiler.pipeline``)."""
    import statistics

    floor = runs if min_runs is None else min_runs
    times: list[float] = []
    while len(times) < runs and (len(times) < floor or not budget_ms or sum(times) < budget_ms):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _bytes(tensors: Sequence[Any]) -> int:
    """Bytes of the tensors' storages in ``tensors`` (others count for nothing)."""
    return sum(t.untyped_storage().nbytes() for t in tensors if isinstance(t, torch.Tensor))


class CudaGraphRunner:
    """``run`` (boxed: a list of CUDA tensors in, a list of tensors out) captured into a CUDA
    graph on its second call and replayed from then on (see the module docstring).

    The inputs of every call must have the sizes, strides and dtypes of the first (the
    compiled graph's own checks and guards ensure that); a call whose inputs differ runs
    ``run`` uncaptured. Inputs whose address stays put are read in place, the others copied
    into static buffers; an in-place input that moves re-records the graph, at most
    :data:`RERECORD_LIMIT` times before it is copied instead. Thread-safe: replays of one
    pool are serialized.
    """

    def __init__(
        self,
        run: Callable[[list[torch.Tensor]], list[torch.Tensor]],
        name: str,
        keep: str = "faster",
        activation_bytes: int = 0,
        random: bool = False,
    ) -> None:
        """``keep``: "faster" (default mode) times the replay, with its input and output
        copies, against running ``run`` directly (timed just before capturing), and keeps the CUDA
        graph only when it is faster (a graph of a few large kernels gains nothing from one
        launch and pays the copies), and captures only when the static buffers (the copied
        inputs and the outputs) fit ``max(STATIC_BYTES_LIMIT, activation_bytes)`` (the
        executor's arena); "always" (``mode="reduce-overhead"``) captures and keeps it.
        ``random``: ``run`` draws random numbers from the device's default generator
        (generated random kernels); the runner then restores the generator after its
        warm-up, timing and capture runs."""
        self.run = run
        self.random = random
        self.static_budget = max(STATIC_BYTES_LIMIT, activation_bytes)
        self.name = name
        self.keep = keep
        self.graph: torch.cuda.CUDAGraph | None = None
        # Per input: its static buffer, or None when the graph reads the caller's tensor in
        # place (at the address in self.addresses).
        self.static_inputs: list[torch.Tensor | None] = []
        self.addresses: list[int] = []
        # Per input: (device, dtype, sizes, strides) at capture; the inputs copied on each
        # replay (their positions, and their static buffers).
        self.metas: list[tuple] = []
        self.copy_from: list[int] = []
        self.copy_to: list[torch.Tensor] = []
        self.static_outputs: list[torch.Tensor] = []
        self.failed: str | None = None
        self.calls = 0
        self.pool: _Pool | None = None
        self.first_addresses: list[int] = []
        self.output_bytes = 0
        # Per input: how often it moved while read in place; inputs demoted to copies.
        self.moves: list[int] = []
        self.demoted: set[int] = set()
        self.rerecords = 0

    def __call__(self, args: list[torch.Tensor]) -> list[Any]:
        self.calls += 1
        if self.failed is not None:
            return self.run(args)
        if self.calls == 1:  # the first call warms up
            outputs = self.run(args)
            self.first_addresses = [_address(a) for a in args]
            self.output_bytes = _bytes(outputs)
            # The outputs alone decide now; the inputs to copy are known on the next call.
            self._over_budget([])
            return outputs
        if self.graph is None:
            inplace = self._inplace(args, self.first_addresses)
            if self._over_budget([a for a, keep in zip(args, inplace) if not keep]):
                return self.run(args)
            # The generator's state before the extra runs below, put back after them: this
            # call then draws (and advances the generator by) what an uncaptured call would.
            device = args[0].device
            rng = torch.cuda.get_rng_state(device) if self.random else None
            # The uncaptured run is timed before the capture, while no graph holds its
            # static buffers: never two sets of activations at once.
            direct = median_cuda_ms(lambda: self.run(args)) if self.keep == "faster" else None
            self._capture(args, inplace)
            kept = self.graph is not None and (
                direct is None or self._replay_is_faster(args, direct)
            )
            if rng is not None:
                torch.cuda.set_rng_state(rng, device)
            if not kept:
                return self.run(args)
        if not self._matches(args):
            return self.run(args)
        moved = [
            i
            for i, (static, a) in enumerate(zip(self.static_inputs, args))
            if static is None and _address(a) != self.addresses[i]
        ]
        if moved and not self._rerecord(args, moved):
            return self.run(args)
        return self._replay(args)

    def _over_budget(self, copied: list[torch.Tensor]) -> bool:
        """In the default mode: whether the static buffers, the outputs and the ``copied``
        inputs, exceed the budget (``self.failed`` then says so)."""
        static = _bytes(copied) + self.output_bytes
        if self.keep != "faster" or static <= self.static_budget:
            return False
        self.failed = (
            f"its static inputs and outputs ({static / 2**20:.0f} MB) would be "
            f"held beyond its activations ({self.static_budget / 2**20:.0f} MB)"
        )
        log.info("plugin: %s runs without a CUDA graph: %s", self.name, self.failed)
        return True

    def _inplace(self, args: list[torch.Tensor], before: Sequence[int]) -> list[bool]:
        """Which inputs to read in place: those at the address they had in ``before`` (the
        previous call), unless demoted."""
        return [
            i not in self.demoted and i < len(before) and _address(a) == before[i]
            for i, a in enumerate(args)
        ]

    def _rerecord(self, args: list[torch.Tensor], moved: list[int]) -> bool:
        """Captures the graph again for inputs read in place that moved (``moved``): each
        stays in place until it has moved :data:`RERECORD_LIMIT` times, then is demoted to a
        static buffer. False (``self.failed`` set) when the capture failed."""
        for i in moved:
            self.moves[i] += 1
            if self.moves[i] > RERECORD_LIMIT:
                self.demoted.add(i)
                counters["demoted"] += 1
                log.info(
                    "plugin: %s: input %d moved %d times; copied into a static buffer from now",
                    self.name,
                    i,
                    self.moves[i],
                )
        inplace = [s is None and i not in self.demoted for i, s in enumerate(self.static_inputs)]
        rng = torch.cuda.get_rng_state(args[0].device) if self.random else None
        # The old graph goes first: its pool memory is free for the new capture.
        self.graph = None
        self.static_inputs, self.static_outputs = [], []
        self._capture(args, inplace)
        if rng is not None:
            torch.cuda.set_rng_state(rng, args[0].device)
        if self.graph is None:
            return False
        self.rerecords += 1
        counters["rerecords"] += 1
        return True

    def _replay(self, args: list[torch.Tensor]) -> list[Any]:
        pool = self.pool
        assert pool is not None
        with pool.lock:
            stream = torch.cuda.current_stream(pool.device)
            if pool.last_replay is not None:
                stream.wait_event(pool.last_replay)
            if self.copy_to:
                sources = [args[i] for i in self.copy_from]
                torch._foreach_copy_(self.copy_to, sources)
            self.graph.replay()
            outputs = [o.clone(memory_format=torch.preserve_format) for o in self.static_outputs]
            event = torch.cuda.Event()
            event.record(stream)
            pool.last_replay = event
        counters["replays"] += 1
        return outputs

    def _replay_is_faster(self, args: list[torch.Tensor], direct: float) -> bool:
        """Times replays on ``args`` against ``direct``, the uncaptured run's median
        milliseconds (timed before the capture); drops the graph (``self.failed`` says why)
        when the direct run is faster."""
        replay = median_cuda_ms(lambda: self._replay(args))
        if replay < direct:
            log.info(
                "plugin: %s keeps its CUDA graph (%.3f ms, uncaptured %.3f ms)",
                self.name,
                replay,
                direct,
            )
            return True
        self.failed = f"replay with copies {replay:.3f} ms, uncaptured {direct:.3f} ms"
        self.graph = None
        self.static_inputs, self.static_outputs = [], []
        counters["dropped"] += 1
        log.info("plugin: %s runs without a CUDA graph: %s", self.name, self.failed)
        return False

    def _matches(self, args: list[torch.Tensor]) -> bool:
        if len(args) != len(self.metas):
            return False
        for meta, a in zip(self.metas, args):
            if not isinstance(a, torch.Tensor) or _meta(a) != meta:
                return False
        return True

    def _capture(self, args: list[torch.Tensor], inplace: list[bool]) -> None:
        """Captures ``run`` on the caller's tensors where ``inplace`` says so, on static
        buffers (copies of ``args``) elsewhere."""
        device = args[0].device
        pool = _pool_for(device)
        try:
            static = [
                None
                if keep
                else torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device).copy_(
                    a
                )
                for a, keep in zip(args, inplace)
            ]
            read = [a if s is None else s for a, s in zip(args, static)]
            graph = torch.cuda.CUDAGraph()
            with pool.lock:
                side = pool.stream
                side.wait_stream(torch.cuda.current_stream(device))
                with torch.cuda.stream(side):
                    # Dropped before the warm-up too: the warm-up allocates the capture
                    # stream's workspace, which must not sit beside the caller's stream's
                    # (two 32 MiB workspaces at once raised the peak above eager's).
                    _clear_cublas_workspaces()
                    self.run(read)  # warm-up on the capture stream, as PyTorch advises
                    # cuBLAS's workspaces (one per handle and stream, held by torch for the
                    # process's life) are dropped around the capture, as Inductor's
                    # cudagraph trees do: the one the capture uses is allocated in the
                    # graph's pool and stays there, not beside it in the caching allocator.
                    _clear_cublas_workspaces()
                    with torch.cuda.graph(graph, pool=pool.handle, stream=side):
                        outputs = self.run(read)
                    _clear_cublas_workspaces()
                torch.cuda.current_stream(device).wait_stream(side)
        except Exception as e:  # noqa: BLE001 - any capture failure falls back, logged
            self.failed = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            counters["failed"] += 1
            log.info(
                "plugin: %s runs without a CUDA graph: capture failed (%s)", self.name, self.failed
            )
            return
        if not all(isinstance(o, torch.Tensor) for o in outputs):
            self.failed = "an output is not a tensor"
            log.info("plugin: %s runs without a CUDA graph: %s", self.name, self.failed)
            return
        self.graph, self.static_inputs, self.static_outputs, self.pool = (
            graph,
            static,
            outputs,
            pool,
        )
        self.metas = [_meta(a) for a in args]
        self.addresses = [_address(a) for a in args]
        if len(self.moves) != len(args):
            self.moves = [0] * len(args)
        self.copy_from = [i for i, s in enumerate(static) if s is not None]
        self.copy_to = [static[i] for i in self.copy_from]
        counters["captured"] += 1
        counters["inplace_inputs"] += len(args) - len(self.copy_from)
        counters["copied_inputs"] += len(self.copy_from)
        log.info(
            "plugin: %s captured into a CUDA graph (%d inputs read in place, %d copied)",
            self.name,
            len(args) - len(self.copy_from),
            len(self.copy_from),
        )


def _address(t: Any) -> int:
    """The address a graph reading tensor ``t`` in place reads (-1 for a non-tensor)."""
    return t.data_ptr() if isinstance(t, torch.Tensor) else -1


def _meta(t: torch.Tensor) -> tuple:
    """What a captured graph depends on besides an in-place input's address."""
    return (t.device, t.dtype, tuple(t.shape), t.stride())
