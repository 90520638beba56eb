"""Sources: where a value the translator read came from.

A source is a frozen, hashable description of how to reach a value from a frame at
entry: an argument slot, a global, a closure cell, then attribute and item accesses. It
serves three purposes:

- its :meth:`Source.name` (``L['self'].layer1[0].weight``) names guards in messages;
- :func:`torch_plugin.capture.guards.build_guard_tree` turns it into a path of C++ guard
  accessors;
- :meth:`Source.reconstruct` emits bytecode that loads the value in transformed code.

Key classes: :class:`LocalSource`, :class:`GlobalSource`, :class:`ClosureSource`,
:class:`AttrSource`, :class:`ItemSource`.
"""

from __future__ import annotations

import dataclasses
from typing import Any


class Source:
    """Base class. Subclasses are frozen dataclasses."""

    def name(self) -> str:
        raise NotImplementedError

    def reconstruct(self, codegen) -> None:
        """Emit instructions that push this value (see bytecode_emission.CodeGen)."""
        raise NotImplementedError

    def root(self) -> Source:
        return self

    def __str__(self) -> str:
        return self.name()


@dataclasses.dataclass(frozen=True)
class LocalSource(Source):
    """An argument of the captured frame (``L['x']``); ``slot`` is its index in localsplus."""

    local_name: str
    slot: int

    def name(self) -> str:
        return f"L[{self.local_name!r}]"

    def reconstruct(self, codegen) -> None:
        codegen.load_fast(self.local_name)


@dataclasses.dataclass(frozen=True)
class GlobalSource(Source):
    """A global of the captured frame (``G['torch']``), looked up in globals then builtins."""

    global_name: str

    def name(self) -> str:
        return f"G[{self.global_name!r}]"

    def reconstruct(self, codegen) -> None:
        codegen.load_global(self.global_name, push_null=False)


@dataclasses.dataclass(frozen=True)
class ClosureSource(Source):
    """The contents of the captured frame's free variable ``index`` (``C['scale']``)."""

    var_name: str
    index: int

    def name(self) -> str:
        return f"C[{self.var_name!r}]"

    def reconstruct(self, codegen) -> None:
        codegen.load_free(self.var_name)


@dataclasses.dataclass(frozen=True)
class AttrSource(Source):
    """``getattr(base, attr)``."""

    base: Source
    attr: str

    def name(self) -> str:
        return f"{self.base.name()}.{self.attr}"

    def root(self) -> Source:
        return self.base.root()

    def reconstruct(self, codegen) -> None:
        self.base.reconstruct(codegen)
        codegen.load_attr(self.attr)


@dataclasses.dataclass(frozen=True)
class ItemSource(Source):
    """``base[key]`` for a constant key (int index or hashable dict key)."""

    base: Source
    key: Any

    def name(self) -> str:
        return f"{self.base.name()}[{self.key!r}]"

    def root(self) -> Source:
        return self.base.root()

    def reconstruct(self, codegen) -> None:
        self.base.reconstruct(codegen)
        codegen.load_const(self.key)
        codegen.binary_subscr()


@dataclasses.dataclass(frozen=True, eq=False)
class ObjectSource(Source):
    """A fixed object known at capture time, e.g. the globals dict of an inlined function's
    module (``M['transformers.models.bert.modeling_bert']``). Compared by identity."""

    obj: Any
    label: str

    def name(self) -> str:
        return f"M[{self.label!r}]"

    def __eq__(self, other) -> bool:
        return isinstance(other, ObjectSource) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)

    def reconstruct(self, codegen) -> None:
        codegen.load_object(self.obj, self.label)


@dataclasses.dataclass(frozen=True)
class ClosureCellSource(Source):
    """The cell object (not its contents) of the captured frame's free variable ``var_name``.
    Only loaded by transformed code (to replay ``nonlocal`` writes); never guarded."""

    var_name: str

    def name(self) -> str:
        return f"cell C[{self.var_name!r}]"

    def reconstruct(self, codegen) -> None:
        codegen.load_closure(self.var_name)
