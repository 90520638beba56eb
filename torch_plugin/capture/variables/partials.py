"""``functools.partial`` objects: built in captured code or read from the frame's inputs.

Key class: :class:`PartialVariable`, modelled on CPython's ``Modules/_functoolsmodule.c``:

- construction (:func:`make_partial`) checks that ``func`` is callable and flattens a partial
  of a partial (``partial(partial(f, 1), 2)`` has ``func=f, args=(1, 2)``);
- ``p.func``, ``p.args`` (a tuple) and ``p.keywords`` (a real, mutable dict: writing
  ``p.keywords["k"]`` changes later calls) are read-only attributes (assigning one raises
  AttributeError in eager: a graph break here);
- a call is ``func(*args, *call_args, **{**keywords, **call_kwargs})``;
- a partial has a ``__dict__``: ``setattr``/``getattr``/``hasattr`` of other names. On a
  partial built in the frame they change its own attribute table (nothing outside sees it
  yet; it is rebuilt with them if it escapes); on one read from a source they are reads of
  the real object guarded through their source, and writes recorded as side effects
  (replayed on the real object after the graph).

A partial read from a source is guarded on identity (``ID_MATCH``, builder.py); its parts are
wrapped with their own sources (``P.keywords['k']``), so a later change of the keywords dict
or of a mutable argument recompiles instead of running with the old value.
"""

from __future__ import annotations

import functools

from .. import graph_break_types as gbt
from ..exc import unimplemented
from .base import VariableTracker
from .dicts import ConstDictVariable
from .lists import TupleVariable

_READ_ONLY = ("func", "args", "keywords")


class PartialVariable(VariableTracker):
    """``functools.partial(func, *args, **keywords)`` with symbolic parts.

    ``keywords_var`` is the dict variable of ``p.keywords`` (``keywords`` is its items);
    ``attrs`` the instance attributes set on a partial built in the frame; ``real`` the real
    partial when it was read from a source (None otherwise)."""

    def __init__(self, func: VariableTracker, args, keywords, source=None, real=None) -> None:
        super().__init__(source)
        self.func = func
        self.args = list(args)
        if isinstance(keywords, ConstDictVariable):
            self.keywords_var = keywords
        else:
            self.keywords_var = ConstDictVariable(dict(keywords), mutable_local=True)
        self.attrs: dict[str, VariableTracker] = {}
        self.real = real

    @property
    def keywords(self) -> dict:
        return self.keywords_var.items

    def python_type(self) -> type:
        return type(self.real) if self.real is not None else functools.partial

    def as_python_constant(self):
        if self.real is not None:
            return self.real  # identity-guarded by the builder
        unimplemented(gbt.UNMODELLED_VALUE, "a partial built in the captured frame as a constant")

    def truthiness(self, tx) -> bool:
        return True

    def call_function(self, tx, args, kwargs):
        return self.func.call_function(tx, [*self.args, *args], {**self.keywords, **kwargs})

    # --- attributes -----------------------------------------------------------------------
    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name == "func":
            return self.func
        if name == "args":
            return TupleVariable(list(self.args))
        if name == "keywords":
            return self.keywords_var
        if self.real is None:
            if name in self.attrs:
                return self.attrs[name]
            if name == "__dict__":
                unimplemented(gbt.UNMODELLED_VALUE, "__dict__ of a partial built in the frame")
            if hasattr(functools.partial, name):
                unimplemented(gbt.UNMODELLED_VALUE, f"attribute {name!r} of functools.partial")
            unimplemented(gbt.EXCEPTION, f"'functools.partial' object has no attribute {name!r}")
        pending = tx.output.side_effects.pending_attr(self.real, name)
        if pending is not None:
            return pending
        if name.startswith("__") or name not in getattr(self.real, "__dict__", {}):
            unimplemented(gbt.UNMODELLED_VALUE, f"attribute {name!r} of a functools.partial")
        from ..sources import AttrSource
        from .builder import wrap_value

        return wrap_value(tx, self.real.__dict__[name], AttrSource(self.source, name))

    def has_attr(self, tx, name: str) -> bool | None:
        """``hasattr(p, name)``: True/False, guarded where it depends on the real object's
        ``__dict__``; None when it cannot be decided (CPython then decides)."""
        if name in _READ_ONLY or name in self.attrs:
            return True
        if self.real is None:
            if name.startswith("__"):
                return None
            return hasattr(functools.partial, name)
        if tx.output.side_effects.pending_attr(self.real, name) is not None:
            return True
        if name.startswith("__") or type(self.real) is not functools.partial:
            return None
        from ..sources import AttrSource

        instance_dict = AttrSource(self.source, "__dict__")
        if name in self.real.__dict__:
            tx.output.guards.dict_keys_match(instance_dict, self.real.__dict__)
            return True
        if hasattr(functools.partial, name):
            return True
        tx.output.guards.not_in_dict(instance_dict, name)
        return False

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        """``p.name = value`` (STORE_ATTR and ``setattr``)."""
        if name in _READ_ONLY or name.startswith("__"):
            unimplemented(gbt.EXCEPTION, f"assignment to attribute {name!r} of a partial")
        if self.real is None:
            self.attrs[name] = value
            return
        if type(self.real) is not functools.partial:
            unimplemented(gbt.SIDE_EFFECT, "attribute write on a functools.partial subclass")
        tx.output.side_effects.store_attr(self.real, name, value)

    def call_method(self, tx, name, args, kwargs):
        if name == "__call__":
            return self.call_function(tx, args, kwargs)
        return super().call_method(tx, name, args, kwargs)

    def __repr__(self) -> str:
        return f"PartialVariable({self.func!r})"


def _is_callable(var: VariableTracker) -> bool | None:
    from .builtin import BuiltinVariable

    answer = BuiltinVariable(callable).call_callable(None, var)
    if answer is not None:
        return bool(answer.value)
    if var.is_python_constant():
        try:
            return callable(var.as_python_constant())
        except Exception:  # noqa: BLE001 - not decidable here
            return None
    return None


def make_partial(tx, func: VariableTracker, args, kwargs) -> PartialVariable:
    """``functools.partial(func, *args, **kwargs)`` built in captured code, as CPython's
    ``partial_new``: a partial of a partial is flattened; a non-callable ``func`` raises
    TypeError in eager (a graph break here)."""
    if isinstance(func, PartialVariable) and func.real is None and not func.attrs:
        return PartialVariable(func.func, [*func.args, *args], {**func.keywords, **kwargs})
    if isinstance(func, PartialVariable):
        unimplemented(gbt.UNMODELLED_VALUE, "functools.partial of a partial with attributes")
    if _is_callable(func) is not True:
        unimplemented(gbt.EXCEPTION, f"functools.partial of {func} (not known to be callable)")
    return PartialVariable(func, args, kwargs)


def wrap_partial(tx, value: functools.partial, source, checkpoint_source_none) -> PartialVariable:
    """A real partial read from ``source`` (identity-guarded by the caller): its parts are
    wrapped with their own sources, so what the call uses is guarded."""
    from ..sources import AttrSource, ItemSource
    from .builder import wrap_value

    def sub(name):
        return AttrSource(source, name) if source is not None else None

    func = wrap_value(tx, value.func, sub("func"))
    args_source = sub("args")
    args = [
        wrap_value(tx, a, ItemSource(args_source, i) if args_source else None)
        for i, a in enumerate(value.args)
    ]
    keywords = wrap_value(tx, value.keywords, sub("keywords"))
    if not isinstance(keywords, ConstDictVariable):
        keywords = {k: wrap_value(tx, v, None) for k, v in value.keywords.items()}
    var = PartialVariable(func, args, keywords, None, None)
    if not checkpoint_source_none(func):
        var.source = source
        var.real = value if source is not None else None
    return var
