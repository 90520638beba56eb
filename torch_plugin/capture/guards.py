"""Guards: the conditions under which a captured frame's transformed code may be reused.

The translator records guards as it reads values (:class:`GuardSet`); when the frame is
done they are compiled into one C++ guard tree (``torch_plugin._C.RootGuardManager``),
which the eval-frame hook evaluates on every later call before reusing the entry.

Guard kinds (one method each on :class:`GuardSet`): ``TYPE_MATCH``, ``ID_MATCH``,
``EQUALS_MATCH``, ``LEN_MATCH``, ``DICT_KEYS_MATCH``, ``NOT_IN_DICT``, ``TENSOR_MATCH``,
``ALIAS`` / ``DISTINCT`` (two sources are / are not one object),
``NN_MODULE`` (identity, ``training`` and the identity of its parameters and buffers) and the global
state (grad mode, autocast, default dtype, deterministic algorithms, the ``torch.backends``
flags that change results; one C++ check, see csrc/capture/leaf_guards.h).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from .sources import (
    AttrSource,
    ClosureSource,
    GlobalSource,
    ItemSource,
    LocalSource,
    ObjectSource,
    Source,
)


@dataclasses.dataclass
class Guard:
    """One check on the value at ``source``. ``kind`` names the check; ``arg`` its data."""

    source: Source
    kind: str
    arg: Any = None
    # TENSOR_MATCH with dynamic dims: (sizes, strides) flags of what is not compared.
    dynamic: tuple | None = None

    def describe(self) -> str:
        name = self.source.name()
        if self.kind == "TYPE_MATCH":
            return f"type({name}) is {self.arg.__qualname__}"
        if self.kind == "ID_MATCH":
            return f"{name} is the object seen at capture ({type(self.arg).__name__})"
        if self.kind == "EQUALS_MATCH":
            return f"{name} == {self.arg!r}"
        if self.kind == "LEN_MATCH":
            return f"len({name}) == {self.arg}"
        if self.kind == "DICT_KEYS_MATCH":
            return f"{name}.keys() == {list(self.arg)!r}"
        if self.kind == "ALIAS":
            return f"{name} is {self.arg.name()}"
        if self.kind == "DISTINCT":
            return f"{name} is not {self.arg.name()}"
        if self.kind == "NOT_IN_DICT":
            return f"{self.arg!r} not in {name}"
        if self.kind == "EMPTY_ATTR_DICTS":
            return f"{name}: no {', '.join(self.arg)}"
        if self.kind == "TENSOR_MATCH":
            t = self.arg
            dyn_sizes, dyn_strides = self.dynamic or ((), ())

            def show(values, dynamic):
                return ["*" if i < len(dynamic) and dynamic[i] else v for i, v in enumerate(values)]

            return (
                f"{name}: tensor dtype={t.dtype}, device={t.device}, "
                f"size={show(list(t.shape), dyn_sizes)}, "
                f"stride={show(list(t.stride()), dyn_strides)}, requires_grad={t.requires_grad}"
            )
        return f"{self.kind}({name})"


# The hook dicts of an nn.Module instance and the global ones of torch.nn.modules.module
# (source: torch/nn/modules/module.py, ``Module.__init__`` and the ``register_module_*_hook``
# functions).
_MODULE_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_MODULE_HOOKS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
)


class GuardSet:
    """The guards one captured frame depends on, deduplicated, in the order recorded."""

    def __init__(self) -> None:
        self._guards: dict[tuple, Guard] = {}
        # Descriptions of the shape guards, set when the tree is built (dynamic dims only).
        self.shape_checks: list[str] = []

    def __len__(self) -> int:
        return len(self._guards)

    def __iter__(self):
        return iter(self._guards.values())

    def _add(self, source: Source | None, kind: str, arg: Any = None, key: Any = None) -> None:
        if source is None:
            return
        k = (source, kind, key)
        if k not in self._guards:
            self._guards[k] = Guard(source, kind, arg)

    def type_match(self, source: Source | None, value: Any) -> None:
        self._add(source, "TYPE_MATCH", type(value))

    def id_match(self, source: Source | None, value: Any) -> None:
        self._add(source, "ID_MATCH", value)

    def equals_match(self, source: Source | None, value: Any) -> None:
        self._add(source, "EQUALS_MATCH", value)

    def len_match(self, source: Source | None, value: Any) -> None:
        self._add(source, "TYPE_MATCH", type(value))
        self._add(source, "LEN_MATCH", len(value))

    def dict_keys_match(self, source: Source | None, value: dict) -> None:
        self._add(source, "TYPE_MATCH", type(value))
        self._add(source, "DICT_KEYS_MATCH", list(value.keys()))

    def not_in_dict(self, source: Source | None, key: Any) -> None:
        """The dict at ``source`` (an instance ``__dict__``) has no key ``key``."""
        self._add(source, "NOT_IN_DICT", key, key=key)

    def tensor_match(self, source: Source | None, value: torch.Tensor) -> None:
        self._add(source, "TENSOR_MATCH", value)

    def tensor_dynamic(self, source: Source, sizes: list[bool], strides: list[bool]) -> None:
        """The TENSOR_MATCH of ``source`` skips these sizes / strides (dynamic dims, checked
        by the shape guards instead)."""
        guard = self._guards.get((source, "TENSOR_MATCH", None))
        if guard is not None:
            guard.dynamic = (list(sizes), list(strides))

    def nn_module(
        self, source: Source | None, module: torch.nn.Module, shared: bool = False
    ) -> None:
        """Identity and ``training`` of the module, and the identity of its own parameters
        and buffers (a graph may reach them through ``call_module``, not only ``get_attr``).
        ``shared`` (capture/shared_modules.py): its type and ``training`` only; what the
        graph reads from it is guarded where it is read."""
        if shared:
            self._add(source, "TYPE_MATCH", type(module))
            self._add(AttrSource(source, "training"), "EQUALS_MATCH", module.training)
            return
        self._add(source, "ID_MATCH", module)
        if source is not None:
            self._add(AttrSource(source, "training"), "EQUALS_MATCH", module.training)
            for name, value in (*module._parameters.items(), *module._buffers.items()):
                self._add(AttrSource(source, name), "ID_MATCH", value)

    def no_module_hooks(self, source: Source | None) -> None:
        """The module at ``source`` has no forward/backward hooks, and no global module hooks
        exist: capture inlined its call, so a hook registered later must recompile (the
        capture then breaks the graph at the call and the hooks run)."""
        from torch.nn.modules import module as module_mod

        self._add(source, "EMPTY_ATTR_DICTS", _MODULE_HOOKS)
        self._add(
            ObjectSource(module_mod, "torch.nn.modules.module"),
            "EMPTY_ATTR_DICTS",
            _GLOBAL_MODULE_HOOKS,
        )

    def alias(self, a: Source | None, b: Source | None, same: bool) -> None:
        """The values at ``a`` and ``b`` are the same object (``same``) or distinct ones.

        Capture keeps one variable per real object (two sources of one object share it),
        so a reused entry needs the objects to alias the same way as at capture."""
        if a is None or b is None or a == b:
            return
        a, b = sorted((a, b), key=lambda s: s.name())
        self._add(a, "ALIAS" if same else "DISTINCT", b, key=b)

    def describe(self) -> list[str]:
        return [g.describe() for g in self._guards.values()] + list(self.shape_checks)


def build_guard_tree(guards: GuardSet, shape_env=None, shape_bindings=(), root=None):
    """Compile ``guards`` into a ``torch_plugin._C.RootGuardManager``.

    Each source becomes a path of accessors from the root (argument slot, global,
    closure cell, then attributes and items); nodes are shared between guards with a
    common prefix. The global-state check is always added. ``root``: another object with
    RootGuardManager's builder methods to build on (torch_plugin/exported/guards.py records
    the calls for an exported graph); a new RootGuardManager by default.
    """
    if root is None:
        from torch_plugin import _C

        root = _C.RootGuardManager()
    root.add_global_state_match()
    nodes: dict[Source, Any] = {}

    def node_for(source: Source):
        node = nodes.get(source)
        if node is not None:
            return node
        if isinstance(source, LocalSource):
            node = root.local(source.slot, source.name())
        elif isinstance(source, GlobalSource):
            node = root.global_(source.global_name)
        elif isinstance(source, ClosureSource):
            node = root.closure(source.index, source.name())
        elif isinstance(source, ObjectSource):
            node = root.object_(source.obj, source.name())
        elif isinstance(source, AttrSource):
            node = node_for(source.base).attr(source.attr)
        elif isinstance(source, ItemSource):
            node = node_for(source.base).item(source.key)
        else:  # pragma: no cover - every Source kind is listed above
            raise TypeError(f"no guard accessor for source {source!r}")
        nodes[source] = node
        return node

    for guard in guards:
        node = node_for(guard.source)
        desc = guard.describe()
        if guard.kind == "TYPE_MATCH":
            node.add_type_match(guard.arg, desc)
        elif guard.kind == "ID_MATCH":
            node.add_id_match(guard.arg, desc)
        elif guard.kind == "EQUALS_MATCH":
            node.add_equals_match(guard.arg, desc)
        elif guard.kind == "LEN_MATCH":
            node.add_len_match(guard.arg, desc)
        elif guard.kind == "DICT_KEYS_MATCH":
            node.add_dict_keys_match(guard.arg, desc)
        elif guard.kind == "NOT_IN_DICT":
            node.add_not_in_dict(guard.arg, desc)
        elif guard.kind == "EMPTY_ATTR_DICTS":
            node.add_empty_attr_dicts(list(guard.arg), desc)
        elif guard.kind == "TENSOR_MATCH":
            sizes, strides = guard.dynamic or ([], [])
            node.add_tensor_match(guard.arg, desc, True, sizes, strides)
        elif guard.kind in ("ALIAS", "DISTINCT"):
            root.add_alias_guard(node, node_for(guard.arg), guard.kind == "ALIAS", desc)
        else:  # pragma: no cover
            raise ValueError(f"unknown guard kind {guard.kind}")
    if shape_bindings:
        from .shape_guards import add_shape_guards

        guards.shape_checks = add_shape_guards(root, node_for, shape_env, list(shape_bindings))
    return root
