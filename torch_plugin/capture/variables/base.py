"""The protocol every symbolic value implements.

:class:`VariableTracker` is the translator's model of one Python value. Each kind of value
(constant, tensor, list, function, nn.Module, ...) is a subclass in its own file of this
package. The default implementation of each operation raises :class:`Unsupported`, so an
operation a kind does not model stops capture of the frame instead of guessing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import graph_break_types as gbt
from ..exc import unimplemented
from ..sources import Source


class VariableTracker:
    """A symbolic Python value.

    Attributes:
        source: where the value came from in the frame's inputs (None for values created
            while tracing). Values with a source can be reloaded by the transformed code
            and are guarded.
    """

    def __init__(self, source: Source | None = None) -> None:
        self.source = source

    # --- what the value is -------------------------------------------------------------
    def python_type(self) -> type:
        unimplemented(gbt.UNMODELLED_VALUE, f"python_type of {self}")

    def is_python_constant(self) -> bool:
        try:
            self.as_python_constant()
            return True
        except Exception:
            return False

    def as_python_constant(self) -> Any:
        """The real Python value, if it is known exactly at capture time."""
        unimplemented(gbt.UNMODELLED_VALUE, f"{self} is not a Python constant")

    # --- operations ----------------------------------------------------------------------
    def var_getattr(self, tx, name: str) -> VariableTracker:
        unimplemented(gbt.UNMODELLED_VALUE, f"attribute {name!r} of {self}")

    def call_function(self, tx, args: Sequence[VariableTracker], kwargs: dict) -> VariableTracker:
        unimplemented(gbt.UNMODELLED_VALUE, f"call of {self}")

    def call_method(self, tx, name: str, args: Sequence[VariableTracker], kwargs: dict):
        if name == "__getattribute__" and len(args) == 1 and args[0].is_python_constant():
            return self.var_getattr(tx, args[0].as_python_constant())
        unimplemented(gbt.UNMODELLED_VALUE, f"method {name!r} of {self}")

    def truthiness(self, tx) -> bool:
        """``bool(value)``; raises Unsupported when it depends on tensor data."""
        unimplemented(gbt.UNMODELLED_VALUE, f"truth value of {self}")

    def unpack_var_sequence(self, tx) -> list[VariableTracker]:
        """The items of ``iter(value)``, when they can be known at capture time."""
        unimplemented(gbt.UNMODELLED_VALUE, f"iteration over {self}")

    def has_unpack_var_sequence(self, tx) -> bool:
        try:
            self.unpack_var_sequence(tx)
            return True
        except Exception:
            return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class CallableVariable(VariableTracker):
    """Base of the kinds that wrap one real callable ``fn`` (builtins, torch functions,
    disabled functions): the value is known exactly."""

    def __init__(self, fn, source=None) -> None:
        super().__init__(source)
        self.fn = fn

    def as_python_constant(self):
        return self.fn

    def python_type(self) -> type:
        return type(self.fn)


class BoundMethodVariable(VariableTracker):
    """``obj.name`` for a method that the object's variable kind implements in
    ``call_method`` (``lst.append``, ``d.get``, ...)."""

    def __init__(self, obj: VariableTracker, name: str) -> None:
        super().__init__()
        self.obj = obj
        self.name = name

    def call_function(self, tx, args, kwargs):
        return self.obj.call_method(tx, self.name, args, kwargs)

    def __repr__(self) -> str:
        return f"BoundMethodVariable({self.obj!r}.{self.name})"


def method_getattr(var: VariableTracker, name: str) -> VariableTracker:
    """``var_getattr`` for container kinds: methods of the Python type become bound methods."""
    from ..exc import unimplemented

    if callable(getattr(var.python_type(), name, None)):
        return BoundMethodVariable(var, name)
    unimplemented(gbt.UNMODELLED_VALUE, f"attribute {name!r} of {var}")


class NullVariable(VariableTracker):
    """The NULL that CALL's stack layout expects below a callable (PUSH_NULL)."""

    def __repr__(self) -> str:
        return "NULL"
