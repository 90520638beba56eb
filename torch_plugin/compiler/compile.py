"""One ATen FX graph to a compiled, callable graph.

Key parts:
- :func:`compile_graph`: lower (``lowering.lower``), run the C++ pass pipeline, build the C++
  executor; returns a :class:`CompiledGraph`, or a plain runner of the FX graph when the graph
  is :class:`~torch_plugin.compiler.lowering.Unsupported`.
- :func:`compile_recipe`: the same from a cached lowering recipe
  (:mod:`torch_plugin.compiler.graph_cache`) instead of an FX graph.
- :class:`CompiledGraph`: AOTAutograd's "boxed" calling convention (one list of arguments).
  For a frozen graph it guards each frozen argument on identity and version
  (``tensor._version``); a failed guard recompiles with the arguments it now gets. On CUDA its
  executor runs through a :class:`~torch_plugin.compiler.cuda_graphs.CudaGraphRunner` (captured
  on the second call) unless CUDA graphs are off (``TORCH_PLUGIN_CUDA_GRAPHS=0``) or the graph
  cannot be captured (the log says why).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torch_plugin import _C
from torch_plugin.compiler import configure_runtime, graph_cache, lowering
from torch_plugin.compiler import options as options_mod

log = logging.getLogger(__name__)


class CompiledGraph:
    """A compiled ATen graph, called boxed: ``compiled(list_of_args) -> list_of_outputs``."""

    _boxed_call = True

    def __init__(
        self,
        gm: torch.fx.GraphModule | None,
        frozen: Sequence[torch.Tensor],
        opts: options_mod.Options,
        recipe: graph_cache.Recipe | None = None,
        on_lowered: Callable[[graph_cache.Recipe], None] | None = None,
        mode: str = "default",
    ):
        """Compile ``gm`` (or replay ``recipe`` when ``gm`` is None); ``on_lowered``, when
        given, receives the recipe of ``gm``'s lowering if it is cacheable; ``mode``: the
        backend's mode ("default" or "reduce-overhead"; both use CUDA graphs where they can)."""
        self.gm = gm
        self.mode = mode
        self.recipe = recipe
        self.options = opts
        self._on_lowered = on_lowered
        self._build(list(frozen))

    def _build(self, frozen: list[torch.Tensor]) -> None:
        self.frozen = frozen
        self.versions = [t._version for t in frozen]
        constants = {i: t.detach() for i, t in enumerate(frozen)}
        if self.gm is None:
            assert self.recipe is not None
            g = graph_cache.replay(self.recipe, frozen)
        elif self._on_lowered is not None:
            recorder = lowering.lower(self.gm, constants, graph_cache.RecordingGraph(constants))
            g = recorder.graph
            if recorder.cacheable:
                self._on_lowered(graph_cache.Recipe(recorder.calls, len(frozen)))
            self._on_lowered = None
        else:
            g = lowering.lower(self.gm, constants)
        opts = self.options.pass_options()
        opts["freeze"] = bool(frozen)
        g.run_pipeline(opts)
        self.ir_graph = g
        self.ir = str(g)
        configure_runtime()  # the options the executor's steps read as they are built
        self.executor = _C._compiler.Executor(g)
        self.num_frozen = len(frozen)
        self.cuda_graph = None
        self._run = self._first_run

    def _first_run(self, args: list[Any]) -> list[torch.Tensor]:
        """Runs the executor once and decides how later calls run: through a CUDA graph
        runner when the graph is on CUDA and can be captured, else the executor directly."""
        self._run = self.executor.run
        tensors = [*self.frozen, *(a for a in args if isinstance(a, torch.Tensor))]
        if any(t.is_cuda for t in tensors):
            from torch_plugin.compiler.cuda_graphs import CudaGraphRunner, why_not_capturable

            if not self.options.cuda_graphs:
                log.info("plugin: CUDA graphs are off (TORCH_PLUGIN_CUDA_GRAPHS=0)")
            else:
                steps = [line.split(": ", 1)[1] for line in self.describe().splitlines()]
                why = why_not_capturable(steps, args, self.frozen)
                if why is None:
                    keep = "always" if self.mode == "reduce-overhead" else "faster"
                    self.cuda_graph = CudaGraphRunner(self.executor.run, "compiled graph", keep)
                    self._run = self.cuda_graph
                else:
                    log.info("plugin: graph not captured into a CUDA graph: %s", why)
        return self._run(args)

    def __call__(self, args: list[Any]) -> list[torch.Tensor]:
        n = self.num_frozen
        if n:
            frozen, versions = self.frozen, self.versions
            for i in range(n):
                a = args[i]
                if a is not frozen[i] or a._version != versions[i]:
                    log.info("plugin: a frozen parameter changed (argument %d); recompiling", i)
                    self._build(list(args[:n]))
                    break
            args = args[n:]
        else:
            args = list(args)
        return self._run(args)

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
    on_lowered: Callable[[graph_cache.Recipe], None] | None = None,
    mode: str = "default",
) -> Callable[[list[Any]], Any]:
    """Compile ``gm``; its first ``len(frozen)`` placeholders become these constants
    (freezing, when the ``freeze`` option is on; otherwise they stay inputs).

    ``on_lowered``: called with the graph's lowering recipe when the graph lowers and the
    recipe is cacheable (see :mod:`torch_plugin.compiler.graph_cache`).
    """
    opts = options_mod.current()
    frozen = list(frozen) if opts.freeze else []
    # AOTAutograd calls its compilers with its FakeTensorMode still active.
    from torch.utils._python_dispatch import _disable_current_modes

    try:
        with _disable_current_modes():
            return CompiledGraph(gm, frozen, opts, on_lowered=on_lowered, mode=mode)
    except lowering.Unsupported as e:
        log.info("plugin: running the ATen graph unmodified: %s", e)
        run = _run_unmodified(gm, opts, mode)
        run.unlowered = str(e)  # type: ignore[attr-defined]
        return run


def compile_recipe(
    recipe: graph_cache.Recipe, args: Sequence[torch.Tensor], mode: str = "default"
) -> CompiledGraph:
    """Compile a cached lowering recipe; ``args`` are the graph's leading arguments, of
    which the first ``recipe.num_frozen`` are frozen (as when the recipe was recorded).
    Raises ValueError for a recipe the builder does not reproduce."""
    opts = options_mod.current()
    return CompiledGraph(None, list(args[: recipe.num_frozen]), opts, recipe=recipe, mode=mode)


def _run_unmodified(
    gm: torch.fx.GraphModule, opts: options_mod.Options, mode: str = "default"
) -> Callable[[list[Any]], Any]:
    """``gm`` run as it is (boxed); on CUDA through a CUDA graph runner when it can be
    captured (its ATen ops checked as for a compiled graph)."""
    from torch_plugin.backends.aot_eager import without_capture

    forward = without_capture(gm.forward)

    def run(args: list[Any]) -> Any:
        return forward(*args)

    def first(args: list[Any]) -> Any:
        chosen[0] = run
        if opts.cuda_graphs and any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
            from torch_plugin.compiler.cuda_graphs import CudaGraphRunner, why_not_capturable

            ops = [
                "fallback " + n.target.name()
                for n in gm.graph.nodes
                if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
            ]
            why = why_not_capturable(ops, args, [])
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
