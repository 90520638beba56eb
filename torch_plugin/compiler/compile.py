"""One ATen FX graph to a compiled, callable graph.

Key parts:
- :func:`compile_graph`: lower (``lowering.lower``), run the C++ pass pipeline, build the C++
  executor; returns a :class:`CompiledGraph`, or a plain runner of the FX graph when the graph
  is :class:`~torch_plugin.compiler.lowering.Unsupported`.
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
from torch_plugin.compiler import lowering, options as options_mod

log = logging.getLogger(__name__)


class CompiledGraph:
    """A compiled ATen graph, called boxed: ``compiled(list_of_args) -> list_of_outputs``."""

    _boxed_call = True

    def __init__(
        self, gm: torch.fx.GraphModule, frozen: Sequence[torch.Tensor], opts: options_mod.Options
    ):
        self.gm = gm
        self.options = opts
        self._build(list(frozen))

    def _build(self, frozen: list[torch.Tensor]) -> None:
        self.frozen = frozen
        self.versions = [t._version for t in frozen]
        g = lowering.lower(self.gm, {i: t.detach() for i, t in enumerate(frozen)})
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


def compile_graph(
    gm: torch.fx.GraphModule, frozen: Sequence[torch.Tensor] = ()
) -> Callable[[list[Any]], Any]:
    """Compile ``gm``; its first ``len(frozen)`` placeholders become these constants
    (freezing, when the ``freeze`` option is on; otherwise they stay inputs)."""
    opts = options_mod.current()
    frozen = list(frozen) if opts.freeze else []
    # AOTAutograd calls its compilers with its FakeTensorMode still active.
    from torch.utils._python_dispatch import _disable_current_modes

    try:
        with _disable_current_modes():
            return CompiledGraph(gm, frozen, opts)
    except lowering.Unsupported as e:
        log.info("plugin: running the ATen graph unmodified: %s", e)
        return _run_unmodified(gm)


def _run_unmodified(gm: torch.fx.GraphModule) -> Callable[[list[Any]], Any]:
    from torch_plugin.backends.aot_eager import without_capture

    forward = without_capture(gm.forward)

    def run(args: list[Any]) -> Any:
        return forward(*args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run
