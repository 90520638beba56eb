"""Sets and frozensets of symbolic values: ``{a, b}``, ``set(xs)``, set comprehensions,
``{*a, *b}``, the set methods and operators, and sets read from the frame's inputs.

Key class: :class:`SetVariable`. It keeps a *real* Python set of keys and runs every set
operation on it, so the semantics (which of two equal elements is kept, ``1 == 1.0 ==
True``, what raises, and for constants the iteration order CPython would give) are
CPython's own:

- an element whose value is known at capture (an int, a string, a tuple of constants, a
  dtype: :func:`~.constant.is_immutable`) is its own key: it hashes and compares by value;
- a tensor, and an object whose class keeps ``object.__hash__``/``object.__eq__`` (a
  function, a module, a user object), hashes by identity in eager: its key is an
  :class:`_IdKey` that compares by identity (a tensor: its graph value). The iteration order
  of such a set depends on the objects' addresses, which capture cannot know: iterating it
  (``for``, ``list(s)``, ``pop()``) with more than one element is a graph break. Size,
  membership, the set algebra and comparisons do not depend on the order and stay in the
  graph.
- an element with a user ``__hash__``/``__eq__``, or an unhashable one, is a graph break
  (eager runs the user's code or raises TypeError).

A set built in the frame is mutated in place (``add``, ``|=``, ...); a set read from a source
(a global, an argument: guarded by value, all its elements constants) records its mutation
as a side effect replayed on the real object (``clear(); update(items)``). A set that escapes
(returned, live at a graph break) is built again from its elements in the captured iteration
order: for sets of constants whose history (deletions) made eager's order differ from a
fresh set's, the rebuilt set iterates in the fresh set's order (a known limit).
"""

from __future__ import annotations

import operator
from typing import Any

from .. import graph_break_types as gbt
from ..dynamic_shapes import has_symbolic, specialize_deep
from ..exc import unimplemented
from .base import VariableTracker, method_getattr
from .constant import ConstantVariable, is_immutable


class _IdKey:
    """The key of an element that hashes by identity in eager (a tensor, a plain object)."""

    __slots__ = ("ident", "var")

    def __init__(self, var: VariableTracker, ident: Any) -> None:
        self.var = var
        self.ident = ident

    def __hash__(self) -> int:
        return id(self.ident)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _IdKey) and other.ident is self.ident

    def __repr__(self) -> str:
        return f"_IdKey({self.var!r})"


def _identity_hashed(cls: type) -> bool:
    return cls.__hash__ is object.__hash__ and cls.__eq__ is object.__eq__


def element_key(var: VariableTracker) -> Any:
    """The key that stands for ``var`` in a set (see the module docstring); a graph break
    for an element whose hash or equality would run user code or raise."""
    from .new_object import NewObjectVariable
    from .tensor import TensorVariable

    if isinstance(var, TensorVariable):
        from .tensor import refuse_ambiguous_identity

        refuse_ambiguous_identity(var, "set membership")
        return _IdKey(var, var.node)
    if isinstance(var, NewObjectVariable):
        if _identity_hashed(var.cls):
            return _IdKey(var, var)
        unimplemented(gbt.UNMODELLED_VALUE, f"a {var.cls.__name__} object (user __hash__) in a set")
    if isinstance(var, ConstantVariable) or (
        var.is_python_constant() and is_immutable(var.as_python_constant())
    ):
        value = var.as_python_constant()
        if has_symbolic(value):
            value = specialize_deep(value)  # a symbolic size: its value, under a guard
        if is_immutable(value):
            try:
                hash(value)
            except TypeError:
                unimplemented(gbt.EXCEPTION, f"unhashable {type(value).__name__} in a set")
            return value
    if var.is_python_constant():
        value = var.as_python_constant()
        if not isinstance(value, (list, dict, set)) and _identity_hashed(type(value)):
            return _IdKey(var, value)
    unimplemented(gbt.UNMODELLED_VALUE, f"{var} as an element of a set")


def _element(key: Any) -> VariableTracker:
    return key.var if isinstance(key, _IdKey) else ConstantVariable(key)


def _is_set_constant(var: VariableTracker) -> bool:
    return isinstance(var, ConstantVariable) and isinstance(var.value, (set, frozenset))


class SetVariable(VariableTracker):
    """A ``set`` (or ``frozenset``, ``frozen``) whose elements are variables.

    ``keys`` is the real set (or frozenset) of element keys; ``opaque`` is True once an
    identity-hashed element was in it (its iteration order is then unknown);
    ``mutable_local``: built in the frame; ``real``: the real set it was read from."""

    def __init__(
        self,
        keys,
        frozen: bool = False,
        opaque: bool | None = None,
        source=None,
        mutable_local: bool = True,
        real=None,
    ) -> None:
        super().__init__(source)
        self.keys = frozenset(keys) if frozen else set(keys) if not isinstance(keys, set) else keys
        self.frozen = frozen
        self.opaque = any(isinstance(k, _IdKey) for k in self.keys) if opaque is None else opaque
        self.mutable_local = mutable_local and source is None
        self.real = real
        self.removals = 0  # element removals, read by iterators (container_iterators.py)

    @staticmethod
    def build(tx, items: list[VariableTracker], frozen: bool = False) -> SetVariable:
        """``{*items}`` (BUILD_SET order: later equal elements are not inserted)."""
        keys: set = set()
        for item in items:
            keys.add(element_key(item))
        return SetVariable(frozenset(keys) if frozen else keys, frozen)

    # --- what the value is ----------------------------------------------------------------
    def python_type(self) -> type:
        return frozenset if self.frozen else set

    @property
    def items(self) -> list[VariableTracker]:
        """The elements in iteration order (as the side-effect replay reads them)."""
        return [_element(k) for k in self.keys]

    def as_python_constant(self):
        if any(isinstance(k, _IdKey) for k in self.keys):
            unimplemented(gbt.UNMODELLED_VALUE, "a set holding tensors or objects as a constant")
        return frozenset(self.keys) if self.frozen else set(self.keys)

    def truthiness(self, tx) -> bool:
        return bool(self.keys)

    def _check_order(self, what: str) -> None:
        if self.opaque and len(self.keys) > 1:
            unimplemented(
                gbt.UNMODELLED_VALUE,
                f"{what} a set of tensors or objects (its order depends on their addresses)",
            )

    def unpack_var_sequence(self, tx):
        self._check_order("iterating")
        return self.items

    def make_iterator(self, tx=None):
        """``iter(s)``: CPython's set iterator, checking the set's size at each step."""
        from .container_iterators import SetIteratorVariable

        return SetIteratorVariable(self)

    # --- mutation -------------------------------------------------------------------------
    def _mutating(self, tx, name: str) -> None:
        if self.frozen:
            unimplemented(gbt.EXCEPTION, f"'frozenset' object has no attribute {name!r}")
        if self.mutable_local:
            return
        if self.real is not None:
            tx.output.side_effects.mutate_container(self.real, self)
            return
        unimplemented(gbt.SIDE_EFFECT, f"set.{name} on a set the capture cannot replay")

    # --- methods --------------------------------------------------------------------------
    def var_getattr(self, tx, name):
        return method_getattr(self, name)

    def call_method(self, tx, name, args, kwargs):
        if kwargs:
            unimplemented(gbt.EXCEPTION, f"set.{name}() takes no keyword arguments")
        keys = self.keys
        if name == "__len__" and not args:
            return ConstantVariable(len(keys))
        if name == "__contains__" and len(args) == 1:
            return ConstantVariable(_lookup_key(args[0]) in keys)
        if name == "__iter__" and not args:
            return self.make_iterator(tx)
        if name == "copy" and not args:
            return SetVariable(type(keys)(keys), self.frozen, self.opaque)
        if name in _QUERIES:
            others = [key_set(tx, a) for a in args]
            try:
                result = getattr(keys, name)(*others)
            except TypeError as e:
                unimplemented(gbt.EXCEPTION, f"set.{name}: {e}")
            if isinstance(result, (set, frozenset)):
                return SetVariable(result, self.frozen, _opaque(self, args, result))
            return ConstantVariable(result)
        if name in _MUTATORS:
            self._mutating(tx, name)
            before = frozenset(keys) if name not in ("add", "update") else None
            try:
                return self._mutate(tx, name, args)
            finally:
                if before is not None and not before <= keys:
                    self.removals += 1  # an element removed (container_iterators.py)
        return super().call_method(tx, name, args, kwargs)

    def _mutate(self, tx, name, args):
        keys = self.keys
        if name in ("add", "discard", "remove"):
            if len(args) != 1:
                unimplemented(gbt.EXCEPTION, f"set.{name}() takes one argument")
            key = element_key(args[0]) if name == "add" else _lookup_key(args[0])
            if name == "remove" and key not in keys:
                unimplemented(gbt.EXCEPTION, "set.remove of a missing element (KeyError)")
            getattr(keys, name)(key)
            self.opaque = self.opaque or isinstance(key, _IdKey)
            return ConstantVariable(None)
        if name == "pop" and not args:
            if not keys:
                unimplemented(gbt.EXCEPTION, "pop from an empty set (KeyError)")
            self._check_order("pop() from")
            return _element(keys.pop())
        if name == "clear" and not args:
            keys.clear()
            return ConstantVariable(None)
        if name == "update":
            # one element at a time, as CPython's set_update_internal: an iterator over this
            # set sees each insertion (and raises, container_iterators.py)
            from .iterators import IteratorVariable

            for a in args:
                if isinstance(a, IteratorVariable):
                    while (item := a.next_item()) is not None:
                        key = element_key(item)
                        keys.add(key)
                        self.opaque = self.opaque or isinstance(key, _IdKey)
                else:
                    keys.update(key_set(tx, a))
                    self.opaque = _opaque(self, [a], keys)
            return ConstantVariable(None)
        others = [key_set(tx, a) for a in args]
        getattr(keys, name)(*others)
        self.opaque = _opaque(self, args, keys)
        return ConstantVariable(None)

    def __repr__(self) -> str:
        return f"SetVariable({'frozen, ' if self.frozen else ''}{len(self.keys)} items)"


_QUERIES = frozenset(
    {
        "union",
        "intersection",
        "difference",
        "symmetric_difference",
        "issubset",
        "issuperset",
        "isdisjoint",
    }
)
_MUTATORS = frozenset(
    {
        "add",
        "discard",
        "remove",
        "pop",
        "clear",
        "update",
        "intersection_update",
        "difference_update",
        "symmetric_difference_update",
    }
)


def _opaque(first: SetVariable, others, result) -> bool:
    if first.opaque or any(isinstance(o, SetVariable) and o.opaque for o in others):
        return True
    return any(isinstance(k, _IdKey) for k in result)


def _lookup_key(var: VariableTracker) -> Any:
    """The key to look ``var`` up with (``x in s``, ``s.discard(x)``): as ``element_key``;
    an unhashable constant raises TypeError in eager (a graph break)."""
    return element_key(var)


def key_set(tx, var: VariableTracker) -> set | frozenset:
    """The keys of an iterable argument of a set method (a set, a frozenset constant, or
    anything iterable: its elements)."""
    if isinstance(var, SetVariable):
        return var.keys
    if _is_set_constant(var):
        return var.value
    return {element_key(v) for v in var.unpack_var_sequence(tx)}


_OPERATORS = {
    "|": operator.or_,
    "&": operator.and_,
    "-": operator.sub,
    "^": operator.xor,
}
_INPLACE = {"|=": "update", "&=": "intersection_update", "-=": "difference_update"}
_INPLACE["^="] = "symmetric_difference_update"


def _operand_keys(tx, var: VariableTracker):
    """The key set of an operand of a set operator, or None (NotImplemented: not a set)."""
    from .dicts import DictViewVariable

    if isinstance(var, SetVariable):
        return var.keys
    if _is_set_constant(var):
        return var.value
    if isinstance(var, DictViewVariable) and var.kind in ("keys", "items"):
        return {element_key(v) for v in var.unpack_var_sequence(tx)}
    return None


def binary_op(tx, op: str, a: VariableTracker, b: VariableTracker) -> VariableTracker:
    """``a op b`` where one operand is a :class:`SetVariable`: the set algebra on the keys
    (a dict view operand behaves as the set of its keys/items, as in CPython); in-place
    operators mutate ``a``. Anything else is TypeError in eager (a graph break)."""
    if (
        op in _INPLACE
        and isinstance(a, SetVariable)
        and not a.frozen
        and (isinstance(b, SetVariable) or _is_set_constant(b))
    ):
        # set.__ior__ & co. take only sets; anything else falls back to the operator
        # without "=" (a dict view's __ror__ gives a new set), as in CPython
        a.call_method(tx, _INPLACE[op], [b], {})
        return a
    fn = _OPERATORS.get(op.rstrip("="))
    ka, kb = _operand_keys(tx, a), _operand_keys(tx, b)
    if fn is None or ka is None or kb is None:
        unimplemented(gbt.EXCEPTION, f"unsupported operand types for {op}: {a} and {b}")
    try:
        result = fn(ka, kb)
    except TypeError as e:
        unimplemented(gbt.EXCEPTION, f"set operator {op}: {e}")
    opaque = any(isinstance(v, SetVariable) and v.opaque for v in (a, b))
    return SetVariable(
        result, isinstance(result, frozenset), opaque or any(isinstance(k, _IdKey) for k in result)
    )


def compare(tx, op: str, a: VariableTracker, b: VariableTracker) -> VariableTracker:
    """``a op b`` (``==``, ``<=``, ...) where one operand is a :class:`SetVariable`."""
    from .constant import COMPARE_OPS

    ka, kb = _operand_keys(tx, a), _operand_keys(tx, b)
    if ka is None or kb is None:
        if op in ("==", "!="):
            return ConstantVariable(op == "!=")  # a set never equals a non-set
        unimplemented(gbt.EXCEPTION, f"'{op}' between a set and {b}")
    return ConstantVariable(COMPARE_OPS[op](ka, kb))


def wrap_input_set(tx, value, source) -> VariableTracker | None:
    """A set or frozenset read from ``source`` whose elements are all constants: a
    :class:`SetVariable` guarded by value (``EQUALS_MATCH``); None for other sets (they stay
    opaque objects)."""
    if type(value) not in (set, frozenset) or not all(is_immutable(v) for v in value):
        return None
    # a frozen copy: the guard must not hold the live set (mutated later, it would always
    # compare equal to itself); the type is guarded apart (a set equals a frozenset)
    tx.output.guards.type_match(source, value)
    tx.output.guards.equals_match(source, frozenset(value))
    frozen = type(value) is frozenset
    var = SetVariable(
        frozenset(value) if frozen else set(value),
        frozen,
        False,
        source=source,
        mutable_local=source is None,
    )
    if source is not None and not frozen:
        var.real = value  # mutations are recorded and replayed on this object
    return var


def make_set(cls, items):
    """Rebuild a set (or frozenset) after the graph from its elements (reconstruct.py)."""
    return cls(items)
