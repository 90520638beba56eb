"""Graphs with symbolic sizes, compiled once per concrete size: a bounded LRU of static variants.

A captured graph with symbolic sizes (automatic dynamic after a size changed once,
``dynamic=True``, ``mark_dynamic``) is traced by AOTAutograd into an ATen graph whose
placeholders carry symbolic sizes (``s0``) and whose sizes used as arguments are computed
in the graph (``sym_size.int``, ``operator.mul``...). The compiler's pipeline (lowering,
passes, kernels, memory plan, executor, CUDA graphs) works on static sizes. Rather than
making every kernel and library call take sizes as arguments, such a graph is compiled
*per concrete size*: :class:`SizeVariants` is its compiled artifact. Each call reads the
concrete sizes and strides of its tensor inputs whose sizes are symbolic, and its integer
inputs (a tuple: the *size key*), and runs the statically compiled variant for that key; a
new key specialises the ATen graph to those sizes (:func:`specialize`: ``make_fx`` over
FakeTensors of the concrete sizes and strides, so every ``sym_size`` and every symbolic
int becomes a constant) and compiles the static graph through the usual path
(``stages.compile_graph``). Generated kernels are cached by their source, so a kernel that
does not depend on the size (a weight's preprocessing, most reductions over a fixed
hidden size) is not compiled again.

The variants are kept in a least-recently-used map of at most
:data:`torch_plugin.config.size_variant_limit` entries (read at each new variant); past
it the least recently used variant is dropped with its executor and its CUDA graph (the
CUDA graphs of every variant and every graph of a device share one memory pool:
:mod:`torch_plugin.compiler.cuda_graphs`), and a line on the ``recompiles`` log channel
says which sizes were evicted. Each new variant is logged there too.

The variant for the sizes seen at capture (the FakeTensors' hints) is compiled at once, so
that a graph the static pipeline rejects for another reason (an op the IR does not take)
falls back as a static graph does (the driver runs it as the eager graph and logs why); a
later size that the pipeline rejects runs that size's ATen graph unmodified, logged on the
``recompiles`` channel and counted in :data:`counters` (``"unlowered"``).

Key parts: :class:`SizeVariants`, :func:`has_symbolic_sizes`, :func:`specialize`,
:data:`counters`.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torch_plugin import config

log = logging.getLogger("torch_plugin.recompiles")

# Graphs with symbolic sizes compiled per size, variants compiled, variants evicted, variants
# the static pipeline did not lower (run as their ATen graph), in this process (tests, logs).
counters = {"graphs": 0, "variants": 0, "evictions": 0, "unlowered": 0}

_SYM = (torch.SymInt, torch.SymFloat, torch.SymBool)
# Ops of a specialised graph that only check sizes (always true for the sizes it was
# specialised to: the capture's guards and the size key select it); dropped.
_SIZE_CHECKS = ("aten::_assert_scalar", "aten::sym_constrain_range",
                "aten::sym_constrain_range_for_size", "aten::_assert_async")  # fmt: skip


def _placeholder_value(node: torch.fx.Node) -> Any:
    return node.meta.get("val", node.meta.get("example_value"))


def _is_symbolic(value: Any) -> bool:
    if isinstance(value, _SYM):
        return True
    return isinstance(value, torch.Tensor) and any(
        isinstance(v, torch.SymInt) for v in (*value.shape, *value.stride())
    )


def has_symbolic_sizes(gm: torch.fx.GraphModule) -> bool:
    """Whether a placeholder of ``gm`` is a symbolic number or a tensor with a symbolic size
    or stride (its ``meta["val"]``, or the capture's ``example_value``)."""
    return any(_is_symbolic(_placeholder_value(n)) for n in gm.graph.nodes if n.op == "placeholder")


def _hint(v: Any) -> Any:
    """A symbolic number's value at capture (its hint); None when it has none."""
    if isinstance(v, _SYM):
        return v.node.hint
    return v


def specialize(
    gm: torch.fx.GraphModule, values: Sequence[Any]
) -> tuple[torch.fx.GraphModule, list[Any]]:
    """``gm`` (an ATen graph with symbolic sizes) traced again for the concrete ``values``
    of its placeholders: for a tensor placeholder ``(shape, stride)`` (ints; the dtype and
    device are the placeholder's), for a number placeholder the number.

    Returns ``(static_gm, outputs)``: ``static_gm`` takes the tensor placeholders only, in
    order, and returns the tensor outputs of ``gm`` as a tuple; ``outputs`` has one entry per
    output of ``gm``: ``("t", i)`` for the i-th output of ``static_gm``, ``("c", value)``
    for an output that became a constant (a size, None).
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.utils._python_dispatch import _disable_current_modes

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    tensor_positions = [
        i for i, n in enumerate(placeholders) if isinstance(_placeholder_value(n), torch.Tensor)
    ]
    layout: list[Any] = []

    def run(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        args = list(values)
        for i, t in zip(tensor_positions, tensors):
            args[i] = t
        out = gm(*args)
        flat = list(out) if isinstance(out, (tuple, list)) else [out]
        layout.clear()
        kept = []
        for o in flat:
            if isinstance(o, torch.Tensor):
                layout.append(("t", len(kept)))
                kept.append(o)
            else:
                layout.append(("c", o))
        return tuple(kept)

    with _disable_current_modes():
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        with mode:
            fakes = []
            for i in tensor_positions:
                meta = _placeholder_value(placeholders[i])
                shape, stride = values[i]
                fakes.append(
                    torch.empty_strided(shape, stride, dtype=meta.dtype, device=meta.device)
                )
        static = make_fx(run, tracing_mode="fake")(*fakes)
    graph = static.graph
    for node in list(graph.nodes):
        if (
            node.op == "call_function"
            and isinstance(node.target, torch._ops.OpOverload)
            and node.target._schema.name in _SIZE_CHECKS
            and not node.users
        ):
            graph.erase_node(node)
    # Random ops are never dead code (they advance the generator), also when this runs
    # inside a TracingContext, where torch.fx's default would remove unused ones.
    graph.eliminate_dead_code(is_impure_node=lambda n: n.is_impure(impure_random=True))
    static.recompile()
    return static, list(layout)


class _Variant:
    """One static variant: its compiled graph and its two calls, ``boxed(args)`` and
    ``flat(*inputs)`` (the arguments of the symbolic graph's calls: number inputs included,
    constant outputs put back)."""

    __slots__ = ("boxed", "compiled", "flat", "unlowered")

    def __init__(self, owner: SizeVariants, compiled: Callable[..., Any], layout: list) -> None:
        self.compiled = compiled
        self.unlowered = getattr(compiled, "unlowered", None)
        layout = None if all(kind == "t" for kind, _ in layout) else layout
        tensors = owner.tensor_positions
        numbers = bool(owner.key_numbers)

        def boxed(args: list[Any]) -> Any:
            if numbers:
                args = [args[i] for i in tensors]
            return _with_constants(compiled(args), layout)

        self.boxed = compiled if layout is None and not numbers else boxed
        call = getattr(compiled, "call", None)
        if call is None:  # not lowered: its boxed runner takes every tensor argument
            leading = list(owner.call_options.get("leading", ()))
            as_tuple = owner.call_options.get("as_tuple", False)

            def flat_unlowered(*inputs: Any) -> Any:
                out = boxed([*leading, *inputs])
                return tuple(out) if as_tuple else out

            self.flat = flat_unlowered
            return
        flat = call.flat
        n = owner.num_leading
        kept = [i - n for i in tensors if i >= n]

        def flat_numbers(*inputs: Any) -> Any:
            if numbers:
                inputs = tuple(inputs[i] for i in kept)
            return _with_constants(flat(*inputs), layout)

        # The common case: the static graph's own C++ call, nothing in between.
        self.flat = flat if layout is None and not numbers else flat_numbers


class SizeVariants:
    """The compiled artifact of an ATen graph with symbolic sizes (see the module docstring).

    Called boxed (``variants(list_of_args)``, AOTAutograd's convention: every placeholder's
    value, frozen parameters first) or flat (:meth:`flat`, the inputs after the
    ``leading`` arguments, as ``CompiledGraph.call.flat``).

    ``compile_static(static_gm, frozen, mode=mode, **call_options)`` compiles one specialised
    graph (``stages.compile_graph``); ``frozen``, ``mode`` and ``call_options`` are those
    of the symbolic graph's compile and are passed on to each variant.
    """

    _boxed_call = True

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        frozen: Sequence[torch.Tensor],
        compile_static: Callable[..., Any],
        mode: str,
        call_options: dict[str, Any],
    ) -> None:
        self.gm = gm
        self.frozen = list(frozen)
        self.compile_static = compile_static
        self.mode = mode
        self.call_options = dict(call_options)
        self.num_leading = len(self.call_options.get("leading", ()))
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.metas = [_placeholder_value(n) for n in placeholders]
        # Positions (in the boxed arguments) that make the size key: tensors whose size or
        # stride is symbolic, and numbers. Other tensors have the sizes of the capture.
        self.key_tensors = [
            i for i, v in enumerate(self.metas) if isinstance(v, torch.Tensor) and _is_symbolic(v)
        ]
        self.key_numbers = [i for i, v in enumerate(self.metas) if not isinstance(v, torch.Tensor)]
        self.tensor_positions = [i for i, v in enumerate(self.metas) if isinstance(v, torch.Tensor)]
        self._boxed_key = _key_function(self.key_tensors, self.key_numbers, 0)
        self._flat_key = _key_function(self.key_tensors, self.key_numbers, self.num_leading)
        self.variants: collections.OrderedDict[tuple, _Variant] = collections.OrderedDict()
        # The last call's key and variant, one tuple (read and replaced atomically: a thread
        # never pairs one call's key with another's variant).
        self._mru: tuple[tuple | None, _Variant | None] = (None, None)
        self._lock = threading.Lock()
        self.name = f"graph {id(self):#x}"
        counters["graphs"] += 1

    # --- compiling --------------------------------------------------------------------------

    def hint_values(self) -> list[Any] | None:
        """Each placeholder's concrete value at capture (the symbols' hints), as
        :func:`specialize` takes them; None when a symbol has no hint."""
        values: list[Any] = []
        for v in self.metas:
            if isinstance(v, torch.Tensor):
                shape = [_hint(s) for s in v.shape]
                stride = [_hint(s) for s in v.stride()]
                if None in shape or None in stride:
                    return None
                values.append((tuple(shape), tuple(stride)))
            else:
                h = _hint(v)
                if h is None:
                    return None
                values.append(h)
        return values

    def compile_for(self, values: list[Any], key: tuple | None = None) -> _Variant:
        """Specialise to ``values`` (see :func:`specialize`), compile, and keep the variant
        under ``key`` (by default the key of ``values``), evicting the least recently used
        past :data:`torch_plugin.config.size_variant_limit`."""
        if key is None:
            key = self._key_of_values(values)
        static, layout = specialize(self.gm, values)
        compiled = self.compile_static(static, self.frozen, mode=self.mode, **self.call_options)
        variant = _Variant(self, compiled, layout)
        counters["variants"] += 1
        sizes = self._describe(key)
        if variant.unlowered is not None:
            counters["unlowered"] += 1
            log.info(
                "plugin: %s with symbolic sizes: sizes %s run as the ATen graph (not lowered: %s)",
                self.name, sizes, variant.unlowered,
            )  # fmt: skip
        else:
            log.info(
                "plugin: %s with symbolic sizes: compiled for sizes %s (%d variants kept)",
                self.name, sizes, len(self.variants) + 1,
            )  # fmt: skip
        limit = max(1, int(config.size_variant_limit))
        while len(self.variants) >= limit:
            old, _ = self.variants.popitem(last=False)
            counters["evictions"] += 1
            log.info(
                "plugin: %s with symbolic sizes: evicted the variant for sizes %s "
                "(least recently used; config.size_variant_limit=%d)",
                self.name, self._describe(old), limit,
            )  # fmt: skip
        self.variants[key] = variant
        self._mru = (key, variant)
        return variant

    def _key_of_values(self, values: list[Any]) -> tuple:
        parts: list[Any] = []
        for i in self.key_tensors:
            shape, stride = values[i]
            parts += [torch.Size(shape), tuple(stride)]
        parts += [values[i] for i in self.key_numbers]
        return tuple(parts)

    def _describe(self, key: tuple) -> str:
        n = 2 * len(self.key_tensors)
        shapes = [f"{tuple(key[k])}" for k in range(0, n, 2)]
        return ", ".join(shapes + [str(x) for x in key[n:]]) or "()"

    def _values_of(self, args: Sequence[Any], offset: int) -> list[Any]:
        """:func:`specialize`'s values for the call's arguments (``offset``: how many leading
        placeholders the call does not pass; their capture metadata is used)."""
        values: list[Any] = []
        for i, meta in enumerate(self.metas):
            a = meta if i < offset else args[i - offset]
            if isinstance(meta, torch.Tensor):
                values.append((tuple(a.shape), tuple(a.stride())))
            else:
                values.append(a)
        return values

    def _switch(self, key: tuple, args: Sequence[Any], offset: int) -> _Variant:
        """The variant of ``key`` (another key than the last call's), compiled if new, made
        the most recently used."""
        with self._lock:  # one thread compiles or reorders the map at a time
            variant = self.variants.get(key)
            if variant is None:
                return self.compile_for(self._values_of(args, offset), key)
            self.variants.move_to_end(key)
            self._mru = (key, variant)
            return variant

    # --- calling ----------------------------------------------------------------------------
    # The hot path: the size key (one generated tuple expression), one comparison with the
    # last call's key, then the variant's own call (for a lowered graph without number
    # inputs: the static graph's C++ GraphCall.flat itself).

    def __call__(self, args: list[Any]) -> Any:
        """The boxed call: ``args`` has one value per placeholder."""
        key = self._boxed_key(args)
        last, variant = self._mru
        if key != last:
            variant = self._switch(key, args, 0)
        return variant.boxed(args)

    def flat(self, *inputs: Any) -> Any:
        """The flat call (the variants were built with ``leading`` arguments): ``inputs``
        are the values of the placeholders after the leading ones."""
        key = self._flat_key(inputs)
        last, variant = self._mru
        if key == last:
            return variant.flat(*inputs)
        return self._switch(key, inputs, self.num_leading).flat(*inputs)


def _with_constants(out: Any, layout: list[Any] | None) -> Any:
    """The outputs of a variant with the constant outputs put back where they were."""
    if layout is None:
        return out
    made = [out[i] if kind == "t" else i for kind, i in layout]
    return type(out)(made) if isinstance(out, tuple) else made


def _key_function(tensors: list[int], numbers: list[int], offset: int) -> Callable:
    """``args -> size key``: the sizes and strides of ``args[i - offset]`` for ``i`` in
    ``tensors``, then ``args[i - offset]`` for ``i`` in ``numbers`` (positions below
    ``offset`` are leading arguments the call does not pass: never symbolic). Generated
    code from these integers only: one tuple expression, the cheapest form of the hot path."""
    parts: list[str] = []
    for i in tensors:
        if i >= offset:
            parts += [f"a[{i - offset}].shape", f"a[{i - offset}].stride()"]
    parts += [f"a[{i - offset}]" for i in numbers if i >= offset]
    source = f"lambda a: ({', '.join(parts)}{',' if parts else ''})"
    return eval(source)  # built from the integers above only, no outside text
