"""Return values of captured frames: flatten to graph outputs, rebuild after the graph runs.

:func:`flatten_output` turns the frame's symbolic return value into the list of tensor
variables the graph returns plus a *spec*; :func:`rebuild` turns the graph's tensors back
into the user's structure (tuples, lists, dicts, named tuples, HF ModelOutputs, objects built
by the frame, constants).
"""

from __future__ import annotations

import collections
from typing import Any

from . import graph_break_types as gbt
from .dynamic_shapes import specialize
from .exc import unimplemented
from .variables.base import VariableTracker
from .variables.constant import ConstantVariable
from .variables.dicts import ConstDictVariable
from .variables.lists import ListVariable, NamedTupleVariable, TupleVariable
from .variables.object_copies import refuse_mutated_private
from .variables.tensor import TensorVariable
from .variables.user_defined import UserDefinedObjectVariable


def flatten_output(
    var: VariableTracker,
    outputs: list[TensorVariable],
    output_graph=None,
    visiting: set | None = None,
) -> tuple:
    """Spec of ``var``; appends its tensors to ``outputs``. Containers from the frame's inputs
    become ``("arg", k)``: runtime argument ``k`` (loaded from their source by the transformed
    code, see ``OutputGraph.runtime_arg``), so the caller gets the very same object."""
    from .variables.builtin_table import frame_class_escape
    from .variables.model_output import ModelOutputVariable

    if getattr(var, "escape_refused", None):
        unimplemented(gbt.ESCAPING_VALUE, f"{var.escape_refused} leaves the frame")
    why = frame_class_escape(var)
    if why is not None:
        unimplemented(gbt.ESCAPING_VALUE, why)
    if isinstance(var, TensorVariable):
        from .variables.tensor import refuse_forced_leaf

        refuse_forced_leaf(var)
        if var.source is None:
            from .variables.attribute_rules import check_tensor_escapes

            check_tensor_escapes(var)
        if var.source is not None and var.node.op == "placeholder" and output_graph is not None:
            # A graph input returned or stored as is: the very object found at its source
            # (a backend's output for it is another tensor object, e.g. AOTAutograd's, so
            # `out is x` or `d["k"] is x` would differ from eager; in-place mutations by the
            # graph are applied to that object)
            return ("arg", output_graph.runtime_arg(var.source))
        for i, seen in enumerate(outputs):
            if seen.node is var.node:
                # one graph output per tensor: a tensor returned and also stored (or
                # returned twice) is one object, as in eager (a backend may return distinct
                # objects for repeated outputs: AOTAutograd regenerates each alias)
                return ("tensor", i)
        outputs.append(var)
        return ("tensor", len(outputs) - 1)
    if isinstance(var, ConstantVariable):
        return ("const", specialize(var.value))
    if getattr(var, "real", None) is not None and output_graph is not None:
        return ("arg", output_graph.runtime_arg(var.source))
    if (
        isinstance(var, UserDefinedObjectVariable)
        and var.source is not None
        and output_graph is not None
    ):
        # guarded on its type only: return the object found at its source on this call
        return ("arg", output_graph.runtime_arg(var.source))
    if isinstance(var, TupleVariable) and var.source is not None and output_graph is not None:
        # a tuple (or named tuple) from the frame's inputs: the caller's own object (`f(t) is
        # t`; a named tuple subclass's instance attributes come with it)
        return ("arg", output_graph.runtime_arg(var.source))
    # A tuple built in the frame is built once per variable (rebuild's memo): `return t, t`
    # gives one object twice, as in eager.
    if isinstance(var, NamedTupleVariable):
        return (
            "namedtuple",
            var.tuple_cls,
            [flatten_output(v, outputs, output_graph, visiting) for v in var.items],
            id(var),
        )
    if isinstance(var, TupleVariable):
        return (
            "tuple",
            [flatten_output(v, outputs, output_graph, visiting) for v in var.items],
            id(var),
        )
    if isinstance(var, ListVariable):
        return (
            "list",
            [flatten_output(v, outputs, output_graph, visiting) for v in var.items],
            id(var),
        )
    if (
        getattr(var, "same_object_at_source", False)
        and var.source is not None
        and output_graph is not None
    ):
        # an instance __dict__ (attribute_rules.InstanceDictVariable): the object's own dict,
        # read after the side effects were replayed on it
        return ("arg", output_graph.runtime_arg(var.source))
    if isinstance(var, ConstDictVariable):
        from .variables.dicts import refuse_identity_keys

        refuse_identity_keys(var.items, "returning or storing it")
        return (
            "dict",
            var.output_spec_maker() if hasattr(var, "output_spec_maker") else var.user_cls,
            [(k, flatten_output(v, outputs, output_graph, visiting)) for k, v in var.items.items()],
            id(var),
        )
    from .variables.new_object import NewObjectVariable

    if isinstance(var, NewObjectVariable):
        # built once per variable (rebuild's memo); a cycle (an object reaching itself
        # through its attributes) refers back to the object under construction
        visiting = set() if visiting is None else visiting
        if id(var) in visiting:
            return ("object_ref", id(var))
        visiting.add(id(var))
        attrs = [
            (k, flatten_output(v, outputs, output_graph, visiting)) for k, v in var.attrs.items()
        ]
        visiting.discard(id(var))
        return ("object", var.cls, attrs, id(var))
    if isinstance(var, ModelOutputVariable) and var.source is not None:
        if output_graph is None:
            unimplemented(gbt.ESCAPING_VALUE, f"returning a received {var.cls.__name__}")
        return ("arg", output_graph.runtime_arg(var.source))  # the caller's own object
    if isinstance(var, ModelOutputVariable):
        return (
            "model_output",
            var.cls,
            [
                (k, flatten_output(v, outputs, output_graph, visiting))
                for k, v in var.fields.items()
            ],
            id(var),
        )
    from .variables.sets import SetVariable

    if isinstance(var, SetVariable):  # rebuilt from its elements, once per variable
        items = [flatten_output(v, outputs, output_graph, visiting) for v in var.items]
        return ("set", var.python_type(), items, id(var))
    from .variables.collections_objects import DequeVariable

    if isinstance(var, DequeVariable):  # "set" spec: maker(items), maker keeps the maxlen
        items = [flatten_output(v, outputs, output_graph, visiting) for v in var.items]
        return ("set", var.output_spec_maker(), items, id(var))
    refuse_mutated_private(var)
    if var.source is not None or _is_stable_object(var):
        try:
            return ("const", var.as_python_constant())
        except Exception:
            pass
    unimplemented(gbt.ESCAPING_VALUE, f"returning {var} from the captured frame")


def _is_stable_object(var: VariableTracker) -> bool:
    from .variables.builtin import BuiltinVariable
    from .variables.functions import UserFunctionVariable
    from .variables.nn_module import NNModuleVariable
    from .variables.torch import TorchFunctionVariable
    from .variables.user_defined import PythonModuleVariable, UserDefinedClassVariable

    return (
        isinstance(
            var,
            (
                NNModuleVariable,
                UserDefinedClassVariable,
                PythonModuleVariable,
                BuiltinVariable,
                TorchFunctionVariable,
            ),
        )
        or type(var) is UserFunctionVariable
    )


def rebuild(spec: tuple, tensors, memo: dict | None = None, args: tuple = ()) -> Any:
    """The real value for ``spec``; ``memo`` makes each list/dict built once (aliasing kept);
    ``args`` are the runtime arguments."""
    kind = spec[0]
    if kind == "tensor":
        return tensors[spec[1]]
    if kind == "const":
        return spec[1]
    if kind == "arg":
        return args[spec[1]]
    if memo is None:
        memo = {}
    if kind == "tuple":
        key = spec[2] if len(spec) > 2 else None
        if key is not None and key in memo:
            return memo[key]
        out = tuple(rebuild(s, tensors, memo, args) for s in spec[1])
        if key is not None:
            memo[key] = out
        return out
    if kind == "list":
        if spec[2] in memo:
            return memo[spec[2]]
        out = memo[spec[2]] = []
        out.extend(rebuild(s, tensors, memo, args) for s in spec[1])
        return out
    if kind == "namedtuple":
        key = spec[3] if len(spec) > 3 else None
        if key is not None and key in memo:
            return memo[key]
        cls = spec[1]
        values = [rebuild(s, tensors, memo, args) for s in spec[2]]
        out = cls(values) if not hasattr(cls, "_fields") else cls(*values)
        if key is not None:
            memo[key] = out
        return out
    if kind == "dict":
        if spec[3] in memo:
            return memo[spec[3]]
        out = memo[spec[3]] = spec[1]()
        pairs = ((k, rebuild(s, tensors, memo, args)) for k, s in spec[2])
        if isinstance(out, collections.Counter):
            dict.update(out, pairs)  # stored as they are (Counter.update would count them)
        else:
            out.update(pairs)
        return out
    if kind == "object":
        if spec[3] in memo:
            return memo[spec[3]]
        from .variables.new_object import make_object

        out = memo[spec[3]] = make_object(spec[1], (), ())
        for name, s in spec[2]:
            object.__setattr__(out, name, rebuild(s, tensors, memo, args))
        return out
    if kind == "object_ref":
        return memo[spec[1]]
    if kind == "set":
        if spec[3] not in memo:
            memo[spec[3]] = spec[1](rebuild(s, tensors, memo, args) for s in spec[2])
        return memo[spec[3]]
    if kind == "model_output":
        # built once per variable, like lists and dicts: a ModelOutput reached twice (a local
        # and a return value, a replayed attribute) is one object, so a later attribute
        # write (CLIP's ``outputs.pooler_output = ...``) lands on the object returned
        if spec[3] in memo:
            return memo[spec[3]]
        out = memo[spec[3]] = spec[1](**{k: rebuild(s, tensors, memo, args) for k, s in spec[2]})
        return out
    raise AssertionError(f"unknown output spec {kind}")


def spec_has(spec: tuple, kind: str) -> bool:
    """Whether an output_structure spec holds a part of ``kind`` ("arg", "object")."""
    if spec[0] == kind:
        return True
    if spec[0] in ("tuple", "list"):
        parts = spec[1]
    elif spec[0] in ("namedtuple", "set"):
        parts = spec[2]
    elif spec[0] in ("dict", "model_output", "object"):
        parts = [s for _key, s in spec[2]]
    else:  # tensor, const, arg, object_ref
        return False
    return any(spec_has(p, kind) for p in parts)


def is_identity_spec(spec: tuple, n: int) -> bool:
    """True when the graph's tuple of outputs *is* the return value."""
    return (
        spec[0] == "tuple"
        and len(spec[1]) == n
        and all(s == ("tensor", i) for i, s in enumerate(spec[1]))
    )
