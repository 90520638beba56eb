"""What capture and the compilers share: the one interface between the two halves.

Capture (``torch_plugin.capture``) turns frames into FX graphs and hands each graph to a
compiler function; the backends (``torch_plugin.backends``), the distributed wrappers
(``torch_plugin.distributed``) and the public API build those functions. Both sides import
this module and nothing of each other, so capture never learns backend names or modes.

A *compiler function* (a backend) is a callable ``compiler(gm, example_inputs) -> compiled``:
``gm`` is the captured ``torch.fx.GraphModule``, ``example_inputs`` the list of real tensors
it is about to be called with, and ``compiled(*inputs)`` must return what ``gm(*inputs)``
would return. A compiler may rewrite ``gm`` while compiling it.

Facts about a graph travel in ``gm.meta`` under the keys below:

- :data:`UNVERSIONED_PARAMETERS`: True when the graph's parameters may be rewritten in place
  *without* a bump of their version counter (FSDP2's ``fully_shard`` all-gathers into the
  unsharded parameters before each forward and keeps their ``_version``): a compiler must read
  them on every call and never freeze or cache their values. Set by
  ``torch_plugin.distributed`` before the backend runs.
- :data:`DDP_SPLIT`: how ``torch_plugin.distributed``'s bucket-splitting compiler split the
  graph for DistributedDataParallel (a ``DDPSplit``); capture reports it in its
  ``CaptureRecord`` (``explain()``, the ``ddp`` log channel).

A compiler function may also carry an attribute named :data:`OPTIMIZER_STEP`: a callable
``step_fn(step, *args, **kwargs)`` that capture calls in place of ``step(*args, **kwargs)``
when the captured code calls an optimizer's ``step`` (``step`` is ``opt.step`` as the program
reads it; ``step_fn`` must do what it does, e.g. call it). The "plugin" backend's compiles the
update (``torch_plugin.compiler.optimizer_step``).

Key parts:
- :data:`CompilerFn`: the type of a compiler function.
- :func:`call_backend`: runs one compiler function on one captured graph; failures become
  :class:`BackendCompilerFailed` (or, with ``config.suppress_errors``, a warning and an eager
  fallback).
- :class:`BackendCompilerFailed`: names the backend and the graph, chains the backend's error;
  :class:`BackendReturnedNonCallable` (also a ``TypeError``): the backend returned a
  non-callable.

Imports nothing of the project but ``config``.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torch_plugin import config

log = logging.getLogger(__name__)

CompilerFn = Callable[[torch.fx.GraphModule, list[torch.Tensor]], Callable[..., Any]]
"""``compiler(gm, example_inputs) -> compiled``, where ``compiled(*inputs)`` behaves like
``gm``."""

UNVERSIONED_PARAMETERS = "torch_plugin.unversioned_parameters"
"""``gm.meta`` key: True when the graph's parameters may change in place without a version
bump, so a compiler must not freeze them (see the module docstring)."""

DDP_SPLIT = "torch_plugin.ddp_split"
# The attribute of a compiler function that runs optimizer steps (see the module docstring).
OPTIMIZER_STEP = "optimizer_step"
"""``gm.meta`` key: the ``torch_plugin.distributed.ddp.DDPSplit`` describing how the graph was
split at DDP's gradient buckets (or why not), set while it is compiled inside DDP's forward."""


class BackendCompilerFailed(RuntimeError):
    """A backend raised while compiling a captured graph.

    The message names the backend and the graph (its name, which says which user function it
    came from, and its number of nodes); the backend's exception is chained as ``__cause__``.

    Attributes:
        backend_name: the backend's registered name (or the callable's name).
        graph_name: the graph's description, as given by the capture layer.
        num_nodes: the number of nodes in the FX graph, placeholders and output included.
        inner_exception: the exception the backend raised.
    """

    def __init__(
        self, backend_name: str, graph_name: str, num_nodes: int, inner_exception: BaseException
    ):
        self.backend_name = backend_name
        self.graph_name = graph_name
        self.num_nodes = num_nodes
        self.inner_exception = inner_exception
        super().__init__(
            f"{_describe_failure(backend_name, graph_name, num_nodes, inner_exception)}\n"
            "Set torch_plugin.config.suppress_errors = True to run such graphs eagerly "
            "instead, or try backend='eager' or 'aot_eager' to narrow the failure down."
        )


class BackendReturnedNonCallable(BackendCompilerFailed, TypeError):
    """A backend returned something that is not callable for a captured graph: a bug of the
    backend, raised as a ``TypeError`` (also with ``config.suppress_errors``) that names the
    backend, the graph and the type returned. It is a :class:`BackendCompilerFailed` too, so
    capture lets it reach the caller instead of running the frame unmodified.
    ``inner_exception`` is None; ``returned`` is the value the backend returned."""

    def __init__(self, backend_name: str, graph_name: str, num_nodes: int, returned: Any):
        self.backend_name = backend_name
        self.graph_name = graph_name
        self.num_nodes = num_nodes
        self.inner_exception = None
        self.returned = returned
        Exception.__init__(
            self,
            f"backend {backend_name!r} returned {type(returned).__name__} for graph "
            f"{graph_name} ({num_nodes} nodes); a backend must return a callable",
        )


def _describe_failure(
    backend_name: str, graph_name: str, num_nodes: int, error: BaseException
) -> str:
    return (
        f"backend {backend_name!r} failed to compile graph {graph_name} ({num_nodes} nodes): "
        f"{type(error).__name__}: {error}"
    )


def call_backend(
    compiler_fn: CompilerFn,
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    backend_name: str,
    graph_name: str,
) -> Callable[..., Any]:
    """Compile the captured graph ``gm`` with ``compiler_fn`` and return ``compiled``.

    ``compiler_fn`` is a compiler function, never a name (names and modes are resolved by
    ``torch_plugin.backends.registry`` before capture starts). ``backend_name`` names it in
    messages; ``graph_name`` describes the graph, e.g.
    ``"graph 0 of Net.forward (model.py:12)"``. If the compiler raises, raise
    :class:`BackendCompilerFailed` from its error, or, when ``config.suppress_errors`` is
    set, warn and return ``gm``'s forward as it was before the compiler ran. A compiler that
    returns something not callable is a broken backend: TypeError either way.

    Raises:
        TypeError: ``compiler_fn`` is not callable (a backend name: look it up with
            ``torch_plugin.lookup_backend`` first), or it returned something not callable.
    """
    if not callable(compiler_fn):
        raise TypeError(
            f"call_backend takes a compiler function, got {type(compiler_fn).__name__}; "
            "resolve a backend name with torch_plugin.lookup_backend first"
        )
    num_nodes = len(gm.graph.nodes)
    # A backend may rewrite gm before it fails; keep the code gm has now for the fallback.
    fallback = _current_forward(gm) if config.suppress_errors else None
    start = time.perf_counter()
    try:
        compiled = compiler_fn(gm, list(example_inputs))
    except Exception as e:
        if fallback is None:
            raise BackendCompilerFailed(backend_name, graph_name, num_nodes, e) from e
        warnings.warn(
            f"{_describe_failure(backend_name, graph_name, num_nodes, e)}; running the graph "
            "eagerly instead (torch_plugin.config.suppress_errors is True)",
            stacklevel=2,
        )
        return fallback
    if not callable(compiled):
        raise BackendReturnedNonCallable(backend_name, graph_name, num_nodes, compiled)
    if config.verbose:
        log.info(
            "backend %r compiled graph %s (%d nodes) in %.3f s",
            backend_name,
            graph_name,
            num_nodes,
            time.perf_counter() - start,
        )
    return compiled


def _current_forward(gm: torch.fx.GraphModule) -> Callable[..., Any]:
    """``gm.forward`` bound to the code generated from gm's graph as it is now."""
    real_recompile = getattr(gm, "real_recompile", None)  # lazy GraphModules codegen on use
    if real_recompile is not None:
        real_recompile()
    return gm.forward


def is_static_value(value: Any) -> bool:
    """Whether a recorded example value (a tensor, a symbolic number, a list or tuple of
    them) has no symbolic size, and so can be made real by :func:`stand_in`."""
    if isinstance(value, torch.Tensor):
        return all(isinstance(s, int) for s in (*value.shape, *value.stride()))
    if isinstance(value, (list, tuple)):
        return all(is_static_value(v) for v in value)
    return not isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool))


def real_like(value: Any) -> Any:
    """A real value standing for a recorded example value: a tensor becomes a fresh tensor of
    the same shape, strides, dtype, device and ``requires_grad`` (random floats from a
    generator of its own, so the user's generators never move; zero integers); lists and
    tuples are mapped; other values are kept."""
    if isinstance(value, torch.Tensor):
        t = torch.empty_strided(
            tuple(value.shape), tuple(value.stride()), dtype=value.dtype, device=value.device
        )
        if t.is_floating_point() or t.is_complex():
            t.normal_(generator=torch.Generator(device=t.device))
            if value.requires_grad:
                t.requires_grad_(True)
        else:
            t.zero_()
        return t
    if isinstance(value, (list, tuple)):
        return type(value)(real_like(v) for v in value)
    return value


def stand_in(value: Any) -> Any:
    """What a piece of a captured graph (a DDP bucket's subgraph, the pieces around a
    conditional) is compiled with for a value capture recorded: a real value like it
    (:func:`real_like`), or, with symbolic sizes, the recorded FakeTensor or symbolic number
    (the backend compiles inside the capture's TracingContext, as for the whole graph)."""
    return real_like(value) if is_static_value(value) else value


def stand_ins(values: Sequence[Any]) -> list[Any]:
    """:func:`stand_in` of each value of a piece's inputs, keeping which tensors share
    memory. Tensors capture recorded on one storage (a view and its base, two views of one
    tensor: their FakeTensors share a storage) stand in as views of one real storage with the
    recorded sizes, strides, storage offsets and dtypes (floats random, from a generator of
    their own, as :func:`real_like`), or, where one of them has symbolic sizes, all as their
    recorded FakeTensors. Fresh tensors for each would tell the backend the inputs do not
    alias: AOTAutograd then compiles a piece that writes through one and reads the other
    (``v = x.view(-1)[:3]; v.add_(1); x.sin()``) as if the write could not change what is
    read, and the piece returned stale values (program generator seed 635)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    groups: dict[Any, list[int]] = {}
    for i, value in enumerate(values):
        if isinstance(value, torch.Tensor) and value.layout == torch.strided:
            key = StorageWeakRef(value.untyped_storage())
            groups.setdefault(key, []).append(i)
    out = [stand_in(v) for v in values]
    for members in groups.values():
        if len(members) < 2:
            continue
        tensors = [values[i] for i in members]
        if not all(is_static_value(t) for t in tensors):
            for i in members:
                out[i] = values[i]  # FakeTensors of one fake storage: aliasing as recorded
            continue
        for i, t in zip(members, _views_of_one_storage(tensors)):
            out[i] = t
    return out


def _base_and_views(tensors: list[torch.Tensor], fill: torch.Tensor) -> list[torch.Tensor] | None:
    """``tensors`` (one dtype, sharing a storage) as autograd tensors with their recorded
    relationship, so that AOTAutograd sees at compile time the aliasing the program has at
    run time: the one that is not a view (the base) a tensor of its sizes and strides, the
    others its ``as_strided`` views; without a base among them (views of a tensor not
    passed), all views of one tensor over the whole storage (``fill``, the flat values).
    Where one requires grad, the base is a non-leaf that requires grad (as activations are),
    so the views are differentiable. None where neither fits (two bases)."""
    bases = [i for i, t in enumerate(tensors) if not t._is_view()]
    grad = any(t.requires_grad for t in tensors) and fill.is_floating_point()
    with torch.enable_grad():
        if not bases:
            root = fill.detach().requires_grad_(True) * 1 if grad else fill
        elif len(bases) == 1:
            b = tensors[bases[0]]
            if b.storage_offset() != 0:
                return None
            leaf = torch.empty_strided(
                tuple(b.shape), tuple(b.stride()), dtype=b.dtype, device=fill.device
            )
            if leaf.is_floating_point() or leaf.is_complex():
                leaf.normal_(generator=torch.Generator(device=fill.device))
            else:
                leaf.zero_()
            root = leaf.requires_grad_(True) * 1 if grad else leaf
            if root.stride() != b.stride():
                return None
        else:
            return None
        return [
            root
            if bases and i == bases[0]
            else root.as_strided(tuple(t.shape), tuple(t.stride()), t.storage_offset())
            for i, t in enumerate(tensors)
        ]


def _views_of_one_storage(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Real tensors laid out on one fresh storage as ``tensors`` (static sizes) lie on theirs.
    Where all have one dtype, they are a base and its views as the program made them
    (:func:`_base_and_views`): AOTAutograd refuses an input mutation through a tensor
    that shares memory with another input without being a view autograd knows
    ("non-differentiable view input mutations"; a DDP subgraph that writes through a view
    of an activation, an input or a buffer and reads it whole)."""
    nbytes = 0
    for t in tensors:
        if t.numel():
            extent = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
            nbytes = max(nbytes, (t.storage_offset() + extent) * t.element_size())
    device = tensors[0].device
    storage = torch.UntypedStorage(nbytes, device=device)
    floating = [t for t in tensors if t.is_floating_point() or t.is_complex()]
    fill_dtype = floating[0].dtype if floating else torch.uint8
    itemsize = torch.empty(0, dtype=fill_dtype).element_size()
    fill = torch.empty(0, dtype=fill_dtype, device=device).set_(
        storage, 0, (nbytes // itemsize,), (1,)
    )
    if floating:
        fill.normal_(generator=torch.Generator(device=device))
    else:
        fill.zero_()
    if all(t.dtype == fill_dtype for t in tensors):
        views = _base_and_views(tensors, fill)
        if views is not None:
            return views
    views = []
    for t in tensors:
        view = torch.empty(0, dtype=t.dtype, device=device).set_(
            storage, t.storage_offset(), tuple(t.shape), tuple(t.stride())
        )
        if t.requires_grad:
            view.requires_grad_(True)
        views.append(view)
    return views
