"""The stages of the "plugin" compiler, as objects (JAX's Traced/Lowered/Compiled are the
model): :class:`Captured` → :class:`Lowered` → :class:`CompiledGraph`.

- :class:`Captured`: the captured FX graph, its example inputs and the parameters and
  buffers AOTAutograd lifts into its first arguments; the facts the driver decides on
  (device, whether gradients are needed, unversioned parameters).
- :class:`Lowered`: one ATen graph (from AOTAutograd, or built from the graph cache) in the
  C++ IR after the pass pipeline, with the tensors its leading arguments were frozen to.
  :func:`lower` makes one from an ATen FX graph; :func:`lower_cached` from a graph-cache
  entry. It can lower itself again for other frozen tensors (:meth:`Lowered.again`).
- :class:`CompiledGraph`: the executor of a lowered graph and its call. Called boxed
  (AOTAutograd's convention, ``compiled(list_of_args) -> outputs``) or flat through
  ``compiled.call.flat(*inputs)`` (the leading arguments are held in C++). The call is a C++
  object (``_C._compiler.GraphCall``): it checks each frozen argument's identity and version
  (``tensor._version``) in C++ and runs the executor; when one changed it calls back into
  Python, which lowers the graph again for the arguments it now gets. On CUDA the first call
  decides (in Python) whether later calls run through a
  :class:`~torch_plugin.compiler.cuda_graphs.CudaGraphRunner` (captured on the second call)
  unless CUDA graphs are off (``TORCH_PLUGIN_CUDA_GRAPHS=0``) or the graph cannot be
  captured (the log says why); that decision reads the executor's steps as data
  (``Executor.steps()``).

Key parts: :func:`compile_graph` (an ATen FX graph to a :class:`CompiledGraph`, or a plain
runner of the FX graph when lowering raises
:class:`~torch_plugin.compiler.lowering.Unsupported`), :func:`compile_cached`,
:func:`run_unmodified`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torch_plugin import _C, trace
from torch_plugin.compiler import configure_runtime, graph_format, lowering, size_variants
from torch_plugin.compiler import options as options_mod
from torch_plugin.contract import UNVERSIONED_PARAMETERS

log = logging.getLogger(__name__)
# The passes log channel (TORCH_PLUGIN_LOGS=passes, torch_plugin.logs).
passes_log = logging.getLogger("torch_plugin.passes")


def _new_executor(lowered: Lowered) -> Any:
    """The C++ executor of ``lowered`` (a graph through the pass pipeline), built with the
    runtime options in effect now (:func:`torch_plugin.compiler.configure_runtime`: its steps
    read some as they are built).

    The executor takes over the IR's constants: those its steps keep copies of (a folded
    conv weight prepacked by oneDNN) are released from the IR as soon as their step is built,
    so that no weight is held twice, during the build or after; the IR graph is dropped
    (``lowered.ir_graph`` becomes None) and :attr:`CompiledGraph.ir_graph` lowers again when
    asked for it."""
    configure_runtime()
    ir_graph, lowered.ir_graph = lowered.ir_graph, None
    if ir_graph is None:
        raise RuntimeError("plugin: this lowered graph already built an executor")
    with trace.stage("executor"):
        return _C._compiler.Executor(ir_graph, release_owned_constants=True)


@dataclasses.dataclass
class Captured:
    """A captured graph and what it is compiled for: ``example_inputs`` and ``params`` (its
    parameters, then its buffers, by name: AOTAutograd passes them before the inputs)."""

    gm: torch.fx.GraphModule
    example_inputs: list[Any]
    params: dict[str, torch.Tensor]
    mode: str = "default"

    @classmethod
    def of(cls, gm: torch.fx.GraphModule, example_inputs: list[Any], mode: str) -> Captured:
        params = {
            **dict(gm.named_parameters(remove_duplicate=False)),
            **dict(gm.named_buffers(remove_duplicate=False)),
        }
        return cls(gm, list(example_inputs), params, mode)

    @property
    def params_flat(self) -> list[torch.Tensor]:
        return list(self.params.values())

    @property
    def cuda(self) -> bool:
        """Whether a parameter, buffer or example input is on a CUDA device."""
        return any(
            isinstance(t, torch.Tensor) and t.is_cuda
            for t in [*self.params_flat, *self.example_inputs]
        )

    @property
    def needs_grad(self) -> bool:
        """Whether grad mode is on and a parameter, buffer or input requires grad (AOTAutograd
        then traces forward and backward)."""
        return torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad
            for t in [*self.params_flat, *self.example_inputs]
        )

    @property
    def unversioned(self) -> bool:
        """Whether the parameters change without version bumps: never frozen. FSDP2 marks its
        graphs; a parameter made under ``torch.inference_mode`` (an inference tensor) has no
        version counter at all, so a write to it in inference mode could not be seen by the
        frozen-parameter check."""
        if self.gm.meta.get(UNVERSIONED_PARAMETERS, False):
            return True
        return any(isinstance(t, torch.Tensor) and t.is_inference() for t in self.params_flat)


class Lowered:
    """An ATen graph in the C++ IR after the pass pipeline (see the module docstring)."""

    def __init__(
        self,
        ir_graph: Any,
        frozen: list[torch.Tensor],
        options: options_mod.Options,
        again: Callable[[list[torch.Tensor]], Lowered],
    ) -> None:
        pass_options = options.pass_options()
        pass_options["freeze"] = bool(frozen)
        # The pattern rules' decisions are recorded only for the compile trace.
        pass_options["record_patterns"] = trace.enabled()
        before = str(ir_graph) if passes_log.isEnabledFor(logging.INFO) else None
        t0 = time.perf_counter()
        with trace.stage("passes"):
            decisions = ir_graph.run_pipeline(pass_options)
        if decisions:
            trace.emit("patterns", decisions=decisions)
        self.ir_graph = ir_graph
        # Its text, kept: building the executor releases the IR (_new_executor).
        self.ir_text = str(ir_graph)
        if before is not None:
            _log_passes(before, self.ir_text, time.perf_counter() - t0)
        self.frozen = frozen
        self.options = options
        self._again = again

    def again(self, frozen: list[torch.Tensor]) -> Lowered:
        """The same graph lowered with ``frozen`` as its frozen arguments."""
        return self._again(frozen)


def _log_passes(before: str, after: str, seconds: float) -> None:
    """The ``passes`` log channel: the IR before and after the pass pipeline (each generated
    kernel's source cut out, as in the trace), with node counts and the time."""
    after_cut, kernels = trace.split_kernels(after)

    def count(text: str) -> int:
        return sum(1 for line in text.splitlines() if line.startswith("  %"))

    passes_log.info(
        "pass pipeline: %d IR nodes -> %d (%d generated kernels) in %.3f s "
        "(TORCH_PLUGIN_DUMP_DIR=DIR writes the graph after each pass)\n"
        "before the passes:\n%s\nafter the passes:\n%s",
        count(before),
        count(after_cut),
        len(kernels),
        seconds,
        before.rstrip(),
        after_cut.rstrip(),
    )


def lower(
    gm: torch.fx.GraphModule,
    frozen: list[torch.Tensor],
    options: options_mod.Options,
    on_exported: Callable[[Any], None] | None = None,
) -> Lowered:
    """``gm`` lowered with its first ``len(frozen)`` placeholders as these constants.
    ``on_exported``, when given, receives the lowered graph before the pass pipeline in its
    cacheable form (:func:`graph_format.entry_of`) if it has one. Raises
    :class:`~torch_plugin.compiler.lowering.Unsupported`."""
    constants = [t.detach() for t in frozen]
    with trace.stage("lower"):
        g = lowering.lower(gm, dict(enumerate(constants)))
    entry = graph_format.entry_of(g.export(), constants, g.device())
    if on_exported is not None:
        if entry is not None:
            on_exported(entry)
        else:
            log.info("plugin: graph not cached: a tensor constant that is not a parameter")
    recipe = _recipe_of(entry, g, constants)
    if recipe is None:
        return Lowered(g, frozen, options, lambda fz: lower(gm, fz, options))
    # Lowering again (a frozen parameter changed) rebuilds from the recipe, as a graph-cache
    # hit does: the ATen graph, its FX nodes and their FakeTensors are not kept.
    return Lowered(
        g,
        frozen,
        options,
        lambda fz: lower_cached(graph_format.loads(recipe, "again"), fz, options),
    )


def _recipe_of(entry: Any, g: Any, constants: list[torch.Tensor]) -> bytes | None:
    """``entry`` (the lowered graph's cacheable form) as the bytes of a graph-cache file, when
    building it back gives the IR of ``g`` (before the pass pipeline) exactly; else None
    (no entry: a constant that is not a parameter, a node with a body)."""
    if entry is None:
        return None
    recipe = graph_format.dumps(entry, "again")
    try:
        same = str(graph_format.build(graph_format.loads(recipe, "again"), constants)) == str(g)
    except (ValueError, graph_format.BadEntry) as e:
        log.debug("plugin: the lowered graph does not rebuild from its entry: %s", e)
        return None
    return recipe if same else None


def lower_cached(
    entry: dict[str, Any], frozen: list[torch.Tensor], options: options_mod.Options
) -> Lowered:
    """A graph-cache entry (validated, :func:`graph_format.loads`) lowered with ``frozen`` as
    its frozen parameters. Raises ValueError for an entry the builder does not reproduce."""
    g = graph_format.build(entry, frozen)
    return Lowered(g, frozen, options, lambda fz: lower_cached(entry, fz, options))


class CompiledGraph:
    """A compiled ATen graph: its executor and its call (see the module docstring)."""

    _boxed_call = True

    def __init__(
        self,
        lowered: Lowered,
        mode: str = "default",
        *,
        inference: bool = False,
        disable_autocast: bool = False,
        leading: Sequence[torch.Tensor] = (),
        as_tuple: bool = False,
    ) -> None:
        """``mode``: the backend's mode ("default" or "reduce-overhead"; both use CUDA
        graphs where they can). ``inference``: the call runs the executor with grad off;
        ``disable_autocast``: and with autocast off (AOTAutograd's inference wrapper's modes,
        for a graph called without that wrapper: autocast off when it was on before tracing,
        as the traced graph has autocast's casts written out). ``leading``: the arguments
        ``call.flat`` passes before its inputs (the parameters and buffers). ``as_tuple``:
        outputs as a tuple."""
        self.mode = mode
        self.options = lowered.options
        self.call = _C._compiler.GraphCall(
            _new_executor(lowered),
            _C.disable_wrapper(self._frozen_changed),
            list(leading),
            inference,
            disable_autocast,
            as_tuple,
        )
        self._use(lowered, self.call.executor)
        if trace.enabled():
            # The IR text after the pass pipeline holds each generated kernel's source;
            # the steps' kinds name the library patterns that fired.
            steps = [list(s) for s in self.call.executor.steps()]
            ir, kernels = trace.split_kernels(self.ir)
            trace.emit("kernels", steps=steps, describe=self.describe(), ir=ir, kernels=kernels)

    def _use(self, lowered: Lowered, executor: Any) -> None:
        self.lowered = lowered
        self.ir = lowered.ir_text
        self.frozen = lowered.frozen
        self.num_frozen = len(lowered.frozen)
        # Read only on the rare path (the log line); the check is the executor's, in C++.
        self.versions = [t._version for t in lowered.frozen]
        executor.set_frozen(lowered.frozen)
        self.executor = executor
        self.call.executor = executor
        self.cuda_graph = None
        cuda = executor.device().startswith("cuda")
        self.call.run_override = _C.disable_wrapper(self._first_run) if cuda else None

    def _frozen_changed(self, args: list[Any]) -> Any:
        """The rare path of the call: a frozen argument is another tensor or was changed in
        place; lower again with the arguments given now, then run."""
        n = self.num_frozen
        for i in range(min(n, len(args))):
            a = args[i]
            if a is not self.frozen[i] or a._version != self.versions[i]:
                log.info("plugin: a frozen parameter changed (argument %d); recompiling", i)
                break
        lowered = self.lowered.again(list(args[:n]))
        self._use(lowered, _new_executor(lowered))
        return self.call(args)

    def _first_run(self, args: list[torch.Tensor]) -> list[torch.Tensor]:
        """The first call of a CUDA graph's inputs: decides how later calls run (through a
        CUDA graph runner when the graph can be captured, else the executor directly), then
        runs."""
        from torch_plugin.compiler import cuda_graphs
        from torch_plugin.compiler.cuda_graphs import (
            CudaGraphRunner,
            tail_split,
            why_not_capturable,
        )

        self.call.run_override = None
        if not self.options.cuda_graphs:
            log.info("plugin: CUDA graphs are off (TORCH_PLUGIN_CUDA_GRAPHS=0)")
        else:
            steps = self.executor.steps()
            why = why_not_capturable(steps, args, self.frozen)
            if why is None:
                keep = "always" if self.mode == "reduce-overhead" else "faster"
                random = any(kind == "random_kernel" for kind, _, _ in steps)
                executor, arena = self.executor, self.executor.arena_bytes()
                k = tail_split(executor, keep, arena)
                if k < 0:
                    self.cuda_graph = CudaGraphRunner(
                        executor.run, "compiled graph", keep, arena, random=random
                    )
                    self.call.run_override = _C.disable_wrapper(self.cuda_graph)
                else:
                    log.info(
                        "plugin: the last %d of %d steps make outputs too large to hold in a "
                        "CUDA graph (%.0f MB): the steps before them are captured, they run "
                        "after each replay",
                        len(steps) - k,
                        len(steps),
                        executor.output_bytes() / 2**20,
                    )
                    cuda_graphs.counters["tail_splits"] += 1
                    prefix = CudaGraphRunner(
                        lambda a: executor.run_prefix(a, k),
                        "compiled graph (before its tail)",
                        keep,
                        arena,
                        random=random,
                    )
                    self.cuda_graph = prefix
                    self.call.run_override = _C.disable_wrapper(
                        lambda a: executor.run_suffix(a, prefix(a), k)
                    )
                return self.call.run_override(args)
            log.info("plugin: graph not captured into a CUDA graph: %s", why)
        return self.executor.run(args)

    def __call__(self, args: list[Any]) -> Any:
        return self.call(args)

    @property
    def ir_graph(self) -> Any:
        """The IR graph after the pass pipeline, with its constants: lowered again on each
        access (the executor released the IR it was built from; see :func:`_new_executor`),
        for export and inspection, never on the hot path."""
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            return self.lowered.again(self.frozen).ir_graph

    def describe(self) -> str:
        """The executor's steps, one per line."""
        return self.executor.describe()

    @property
    def graph_module(self) -> torch.fx.GraphModule:
        """The compiled graph as an FX graph module of ``torch.ops.torch_plugin.*`` and ATen
        calls (see :mod:`torch_plugin.compiler.fx_artifact`); built on each access."""
        from torch_plugin.compiler.fx_artifact import to_graph_module

        return to_graph_module(self)

    @property
    def executor_graph_module(self) -> torch.fx.GraphModule:
        """The compiled graph as one ``torch.ops.torch_plugin.run_graph`` call on its
        executor (see :func:`torch_plugin.compiler.fx_artifact.to_executor_graph_module`)."""
        from torch_plugin.compiler.fx_artifact import to_executor_graph_module

        return to_executor_graph_module(self)


def compile_graph(
    gm: torch.fx.GraphModule,
    frozen: Sequence[torch.Tensor] = (),
    on_exported: Callable[[Any], None] | None = None,
    mode: str = "default",
    **call_options: Any,
) -> Callable[[list[Any]], Any]:
    """Compile ``gm``; its first ``len(frozen)`` placeholders become these constants
    (freezing, when the ``freeze`` option is on; otherwise they stay inputs).

    ``on_exported``: called with the graph's cacheable form when it lowers and can be cached
    (see :mod:`torch_plugin.compiler.graph_cache`). ``call_options``: ``inference``,
    ``disable_autocast``, ``leading``, ``as_tuple`` of :class:`CompiledGraph`.
    """
    opts = options_mod.current()
    frozen = list(frozen) if opts.freeze else []
    # AOTAutograd calls its compilers with its FakeTensorMode still active.
    from torch.utils._python_dispatch import _disable_current_modes

    if size_variants.has_symbolic_sizes(gm):
        return _compile_per_size(gm, frozen, opts, mode, call_options)
    try:
        with _disable_current_modes():
            return CompiledGraph(lower(gm, frozen, opts, on_exported), mode, **call_options)
    except lowering.Unsupported as e:
        log.info("plugin: running the ATen graph unmodified: %s", e)
        run = run_unmodified(gm, opts, mode)
        run.unlowered = str(e)  # type: ignore[attr-defined]
        return run


def _compile_per_size(
    gm: torch.fx.GraphModule,
    frozen: list[torch.Tensor],
    opts: options_mod.Options,
    mode: str,
    call_options: dict[str, Any],
) -> Callable[[list[Any]], Any]:
    """A graph with symbolic sizes: compiled per concrete size
    (:class:`~torch_plugin.compiler.size_variants.SizeVariants`), starting with the sizes
    seen at capture; when the static pipeline does not lower those, ``gm`` runs unmodified,
    as a static graph would."""
    variants = size_variants.SizeVariants(gm, frozen, compile_graph, mode, call_options)
    values = variants.hint_values()
    if values is None:
        return variants  # compiled at the first call
    first = variants.compile_for(values)
    if first.unlowered is None:
        return variants
    run = run_unmodified(gm, opts, mode)
    run.unlowered = first.unlowered  # type: ignore[attr-defined]
    return run


def compile_cached(
    entry: dict[str, Any], args: Sequence[torch.Tensor], mode: str = "default", **call_options: Any
) -> CompiledGraph:
    """Compile a graph-cache entry; ``args`` are the graph's leading arguments, of which the
    first ``entry["num_frozen"]`` are frozen (as when the entry was stored). Raises
    ValueError for an entry the builder does not reproduce."""
    opts = options_mod.current()
    frozen = list(args[: entry["num_frozen"]])
    return CompiledGraph(lower_cached(entry, frozen, opts), mode, **call_options)


def run_unmodified(
    gm: torch.fx.GraphModule, opts: options_mod.Options, mode: str = "default"
) -> Callable[[list[Any]], Any]:
    """``gm`` run as it is (boxed); on CUDA through a CUDA graph runner when it can be
    captured (its ATen ops checked as for a compiled graph)."""
    forward = _C.disable_wrapper(gm.forward)

    def run(args: list[Any]) -> Any:
        return forward(*args)

    def first(args: list[Any]) -> Any:
        chosen[0] = run
        if opts.cuda_graphs and any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
            from torch_plugin.compiler.cuda_graphs import CudaGraphRunner, why_not_capturable

            steps = [
                ("fallback", n.target.name(), "")
                for n in gm.graph.nodes
                if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
            ]
            why = why_not_capturable(steps, args, [])
            if why is None:
                keep = "always" if mode == "reduce-overhead" else "faster"
                chosen[0] = CudaGraphRunner(lambda a: list(run(a)), "ATen graph", keep)
            else:
                log.info("plugin: graph not captured into a CUDA graph: %s", why)
        return run(args)

    chosen: list[Callable[[list[Any]], Any]] = [first]

    def boxed(args: list[Any]) -> Any:
        return chosen[0](args)

    boxed._boxed_call = True  # type: ignore[attr-defined]
    return boxed
