"""HuggingFace ``transformers`` ModelOutput objects built inside captured code.

Key class: :class:`ModelOutputVariable`. A ModelOutput is a dataclass that is also an
ordered dict of its non-None fields. The translator models construction with keyword
arguments, attribute and item reads, field assignments, ``to_tuple()``,
``keys()``/``values()``/``items()`` and ``len()``; the real object is built after the graph runs (``cls(**fields)``), so its own
``__post_init__`` runs on real tensors.
"""

from __future__ import annotations

import dataclasses

from .. import graph_break_types as gbt
from ..exc import unimplemented
from .base import VariableTracker
from .constant import ConstantVariable
from .lists import ListVariable, TupleVariable


class ModelOutputVariable(VariableTracker):
    """A ModelOutput built in the frame (no source), or one the frame received (``source``:
    a model's output passed on to a function, or live at a graph break): read-only then."""

    def __init__(self, cls: type, fields: dict[str, VariableTracker], source=None) -> None:
        super().__init__(source)
        self.cls = cls
        self.fields = fields

    @staticmethod
    def wrap_input(tx, value, source) -> ModelOutputVariable:
        """A ModelOutput read from ``source``: guarded on its type and dict keys, each field
        read through its attribute (and guarded there). Fields and dict entries must agree
        (they do unless a None was assigned to a set field)."""
        from ..sources import AttrSource
        from .builder import wrap_value

        cls = type(value)
        tx.output.guards.dict_keys_match(source, value)
        fields = {
            f.name: wrap_value(tx, getattr(value, f.name), AttrSource(source, f.name))
            for f in dataclasses.fields(cls)
        }
        var = ModelOutputVariable(cls, fields, source)
        if list(var._present()) != list(value.keys()):
            unimplemented(
                gbt.OBJECT_CONSTRUCTION, f"a {cls.__name__} whose fields and dict entries disagree"
            )
        return var

    @staticmethod
    def create(tx, cls, args, kwargs) -> ModelOutputVariable:
        names = [f.name for f in dataclasses.fields(cls)]
        if len(args) > len(names):
            unimplemented(gbt.EXCEPTION, f"{cls.__name__} with too many positional arguments")
        fields = {}
        for name in names:
            fields[name] = ConstantVariable(None)
        for name, value in zip(names, args):
            fields[name] = value
        for name, value in kwargs.items():
            if name not in names:
                unimplemented(gbt.EXCEPTION, f"{cls.__name__} got an unexpected field {name!r}")
            fields[name] = value
        if (
            args
            and len(args) == 1
            and not isinstance(args[0], ConstantVariable)
            and not kwargs
            and len(names) > 1
        ):
            # ModelOutput(dict_like) form: not modelled
            from .tensor import TensorVariable

            if not isinstance(args[0], TensorVariable):
                unimplemented(
                    gbt.OBJECT_CONSTRUCTION,
                    f"{cls.__name__} built from a single non-tensor argument",
                )
        return ModelOutputVariable(cls, fields)

    def python_type(self) -> type:
        return self.cls

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        """``output.<field> = value`` (CLIP's ``vision_outputs.pooler_output = ...``): as
        ``ModelOutput.__setattr__`` does, the field and its dict entry both take the value.
        Assigning None to a field that holds a value (the attribute becomes None, the dict
        entry stays) and attributes that are not fields are not modelled, nor writes to a
        ModelOutput the frame received (the caller's object)."""
        if self.source is not None:
            unimplemented(
                gbt.SIDE_EFFECT,
                f"assignment to {self.cls.__name__}.{name} of a received ModelOutput",
            )
        if name not in self.fields:
            unimplemented(
                gbt.SIDE_EFFECT, f"assignment to {self.cls.__name__}.{name}, not one of its fields"
            )
        is_none = isinstance(value, ConstantVariable) and value.value is None
        current = self.fields[name]
        if is_none and not (isinstance(current, ConstantVariable) and current.value is None):
            unimplemented(
                gbt.SIDE_EFFECT,
                f"assignment of None to {self.cls.__name__}.{name}, which holds a value",
            )
        self.fields[name] = value

    def _present(self) -> dict[str, VariableTracker]:
        return {
            k: v
            for k, v in self.fields.items()
            if not (isinstance(v, ConstantVariable) and v.value is None)
        }

    def var_getattr(self, tx, name: str):
        if name in self.fields:
            return self.fields[name]
        if callable(getattr(self.cls, name, None)):
            from .base import BoundMethodVariable

            return BoundMethodVariable(self, name)
        unimplemented(gbt.EXCEPTION, f"attribute {name!r} of {self.cls.__name__}")

    def truthiness(self, tx) -> bool:
        return len(self._present()) > 0

    def unpack_var_sequence(self, tx):
        return [ConstantVariable(k) for k in self._present()]

    def call_method(self, tx, name, args, kwargs):
        present = self._present()
        if name == "to_tuple":
            return TupleVariable(list(present.values()))
        if name == "__getitem__" and len(args) == 1:
            key = args[0].as_python_constant()
            if isinstance(key, str):
                if key not in present:
                    unimplemented(gbt.EXCEPTION, f"{self.cls.__name__} has no key {key!r}")
                return present[key]
            return TupleVariable(list(present.values())).getitem(tx, args[0])
        if name == "__len__":
            return ConstantVariable(len(present))
        if name == "__contains__":
            return ConstantVariable(args[0].as_python_constant() in present)
        if name == "keys":
            return ListVariable([ConstantVariable(k) for k in present], mutable_local=True)
        if name == "values":
            return ListVariable(list(present.values()), mutable_local=True)
        if name == "items":
            return ListVariable(
                [TupleVariable([ConstantVariable(k), v]) for k, v in present.items()],
                mutable_local=True,
            )
        if name == "get":
            key = args[0].as_python_constant()
            return present.get(key, args[1] if len(args) > 1 else ConstantVariable(None))
        return super().call_method(tx, name, args, kwargs)
