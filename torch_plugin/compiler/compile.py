"""One ATen FX graph to a compiled, callable graph.

Key parts:
- :func:`compile_graph`: lower (``lowering.lower``), run the C++ pass pipeline, build the C++
  executor; returns a :class:`CompiledGraph`, or a plain runner of the FX graph when the graph
  is :class:`~torch_plugin.compiler.lowering.Unsupported`.
- :func:`compile_recipe`: the same from a cached lowering recipe
  (:mod:`torch_plugin.compiler.graph_cache`) instead of an FX graph.
- :class:`CompiledGraph`: AOTAutograd's "boxed" calling convention (one list of arguments).
  For a frozen graph it guards each frozen argument on identity and version
  (``tensor._version``); a failed guard recompiles with the arguments it now gets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torch_plugin import _C
from torch_plugin.compiler import graph_cache, lowering
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
    ):
        """Compile ``gm`` (or replay ``recipe`` when ``gm`` is None); ``on_lowered``, when
        given, receives the recipe of ``gm``'s lowering if it is cacheable."""
        self.gm = gm
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
        self.executor = _C._compiler.Executor(g)
        self.num_frozen = len(frozen)

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
        out = self.executor.run(args)
        return out

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
            return CompiledGraph(gm, frozen, opts, on_lowered=on_lowered)
    except lowering.Unsupported as e:
        log.info("plugin: running the ATen graph unmodified: %s", e)
        return _run_unmodified(gm)


def compile_recipe(recipe: graph_cache.Recipe, args: Sequence[torch.Tensor]) -> CompiledGraph:
    """Compile a cached lowering recipe; ``args`` are the graph's leading arguments, of
    which the first ``recipe.num_frozen`` are frozen (as when the recipe was recorded).
    Raises ValueError for a recipe the builder does not reproduce."""
    opts = options_mod.current()
    return CompiledGraph(None, list(args[: recipe.num_frozen]), opts, recipe=recipe)


def _run_unmodified(gm: torch.fx.GraphModule) -> Callable[[list[Any]], Any]:
    from torch_plugin.backends.aot_eager import without_capture

    forward = without_capture(gm.forward)

    def run(args: list[Any]) -> Any:
        return forward(*args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run
