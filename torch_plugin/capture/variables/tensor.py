"""Tensors: FX graph values carrying a FakeTensor for shape, dtype and device.

Key class: :class:`TensorVariable`. Metadata (``shape``, ``dtype``, ``device``, ``ndim``,
``requires_grad``, ``size()``, ``dim()``, ...) is read from the FakeTensor and is a
constant of the capture (the tensor's guard makes it so). Methods and operators become
``call_method`` / ``call_function`` nodes. Anything that needs tensor *data* in Python
(``item()``, ``tolist()``, ``bool(t)``, ``if t.sum() > 0``) is unsupported: the frame runs
unmodified.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from .. import graph_break_types as gbt
from ..exc import unimplemented
from .base import VariableTracker
from .constant import ConstantVariable

# Attributes read from the FakeTensor as constants.
_CONSTANT_ATTRS = {
    "shape",
    "dtype",
    "device",
    "ndim",
    "requires_grad",
    "is_cuda",
    "is_cpu",
    "is_sparse",
    "is_quantized",
    "is_meta",
    "layout",
    "is_leaf",
    "is_nested",
}
# Methods whose result depends only on metadata (run on the FakeTensor, result constant).
_METADATA_METHODS = {
    "size",
    "dim",
    "ndimension",
    "numel",
    "nelement",
    "stride",
    "is_contiguous",
    "is_floating_point",
    "is_complex",
    "element_size",
    "get_device",
    "type",
    "storage_offset",
}
# Methods that read tensor data into Python: the graph cannot express them.
_DATA_METHODS = {
    "item",
    "tolist",
    "numpy",
    "__bool__",
    "__int__",
    "__float__",
    "__index__",
    "data_ptr",
    "cpu_numpy",
}
# Attributes that create new tensors from the tensor (become call_function(getattr)).
_TENSOR_ATTRS = {"T", "mT", "H", "mH", "real", "imag"}


class TensorVariable(VariableTracker):
    """A tensor value in the FX graph: ``node`` produces it, ``example`` is its FakeTensor.

    An output of a conditional captured from a branch on tensor data (conditionals.py) also
    has ``ways``: the variables it is on each way of the branch. Metadata reads are answered
    from their FakeTensors, and one whose answer differs between the ways (``is_leaf`` of a
    graph input passed through on one way and computed on the other) is data-dependent: a
    graph break. ``ambiguous_identity`` marks such an output that is, or shares memory with,
    a tensor that existed before the branch on some way (LayerDrop's ``hidden_states`` when
    the layer is skipped): which object it is depends on tensor data, so ``is``, set
    membership, attribute reads and writes beyond metadata and ``requires_grad = ...`` on it
    are graph breaks (in-place writes to it or to what it may alias too:
    ``OperationRecorder``'s ``branch_aliased``)."""

    ways: tuple[TensorVariable, ...] | None = None
    ambiguous_identity: bool = False

    def __init__(self, node: torch.fx.Node, example: torch.Tensor, source=None) -> None:
        super().__init__(source)
        self.node = node
        self.example = example

    def metadata(self, compute, what: str):
        """``compute(fake)`` on this tensor's FakeTensor, checked to be the same on every way
        of the branch it comes from (see the class docstring). Raises Unsupported when the
        ways disagree."""
        if not self.ways:
            return compute(self.example)
        values = [w.metadata(compute, what) for w in self.ways]
        first = values[0]
        for other in values[1:]:
            if not _same_metadata_value(first, other):
                unimplemented(
                    gbt.DATA_DEPENDENT,
                    f"{what} of a tensor that a branch on tensor data sets differs between"
                    f" the two ways ({first!r} and {other!r})",
                )
        return first

    def python_type(self) -> type:
        return (
            type(self.example)
            if not isinstance(self.example, torch._subclasses.FakeTensor)
            else torch.Tensor
        )

    def as_python_constant(self):
        unimplemented(gbt.DATA_DEPENDENT, "a tensor's value is not known at capture time")

    def truthiness(self, tx) -> bool:
        unimplemented(gbt.DATA_DEPENDENT, "data-dependent branch: bool() of a tensor")

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name in _CONSTANT_ATTRS:
            return ConstantVariable(self.metadata(lambda t: getattr(t, name), f"tensor.{name}"))
        if name in _TENSOR_ATTRS:
            return tx.output.call_function(tx, getattr, [self, ConstantVariable(name)], {})
        if name == "grad":
            refuse_ambiguous_identity(self, "reading .grad")
            from .attribute_rules import tensor_grad

            return tensor_grad(tx, self)
        if name == "data":
            return tx.output.call_method(tx, "detach", [self], {})
        if hasattr(torch.Tensor, name) and callable(getattr(torch.Tensor, name)):
            # data methods (item, tolist, numpy) fail when called: a graph break at the call
            return TensorMethodVariable(self, name)
        refuse_ambiguous_identity(self, f"reading attribute {name!r}")
        instance_attr = self._instance_attr(tx, name)
        if instance_attr is not None:
            return instance_attr
        unimplemented(gbt.UNMODELLED_VALUE, f"Tensor attribute {name!r}")

    def _instance_attr(self, tx, name: str) -> VariableTracker | None:
        """An attribute the caller stored on a graph input (``x.test = ...`` before the
        call), read from its real ``__dict__`` with a ``DICT_KEYS_MATCH`` guard on it (the
        keys) and the value's own guard at ``AttrSource(source, name)``; None when the
        tensor has no such attribute or its ``__dict__`` cannot be guarded."""
        from ..sources import AttrSource
        from .user_defined import class_lookup

        real = tx.output.real_tensor(self)
        if (
            real is None
            or self.source is None
            or name not in real.__dict__
            or class_lookup(type(real), name) is not None
        ):
            return None
        from .builder import wrap_value

        tx.output.guards.dict_keys_match(AttrSource(self.source, "__dict__"), real.__dict__)
        return wrap_value(tx, real.__dict__[name], AttrSource(self.source, name))

    def call_method(self, tx, name, args, kwargs):
        if name in _DATA_METHODS:
            unimplemented(gbt.DATA_DEPENDENT, f"Tensor.{name}() reads tensor data into Python")
        if name == "type" and (args or kwargs):
            # ``x.type(torch.int32)``: a cast, ``x.to(dtype)`` (both return ``x`` itself when
            # the dtype is already that); a type name string may also move devices
            dtype = args[0] if args else kwargs.get("dtype")
            if (
                len(args) > 1
                or set(kwargs) - {"dtype"}
                or dtype is None
                or not dtype.is_python_constant()
                or not isinstance(dtype.as_python_constant(), torch.dtype)
            ):
                unimplemented(gbt.UNMODELLED_VALUE, "Tensor.type() with a type name")
            return tx.output.call_method(tx, "to", [self, dtype], {})
        if name in _METADATA_METHODS:
            from .builder import wrap_constant_or_object

            consts = [a.as_python_constant() for a in args]
            kconsts = {k: v.as_python_constant() for k, v in kwargs.items()}
            return wrap_constant_or_object(
                self.metadata(lambda t: getattr(t, name)(*consts, **kconsts), f"Tensor.{name}()")
            )
        if name in ("__len__",):
            return ConstantVariable(len(self.example))
        if name == "__getattribute__" and args and args[0].is_python_constant():
            return self.var_getattr(tx, args[0].as_python_constant())
        if name in (
            "backward",
            "register_hook",
            "retain_grad",
            "data_ptr",
            "untyped_storage",
            "storage",
        ):
            unimplemented(gbt.UNMODELLED_VALUE, f"Tensor.{name}()")
        return tx.output.call_method(tx, name, [self, *args], kwargs)

    def unpack_var_sequence(self, tx):
        if self.example.dim() == 0:
            unimplemented(gbt.UNMODELLED_VALUE, "iteration over a 0-d tensor")
        n = self.example.shape[0]
        return [
            tx.output.call_function(tx, _getitem, [self, ConstantVariable(i)], {}) for i in range(n)
        ]

    def __repr__(self) -> str:
        ex = self.example
        return f"TensorVariable({self.node.name}, {ex.dtype}, {list(ex.shape)})"


_getitem = operator.getitem


def _same_metadata_value(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(map(_same_metadata_value, a, b))
    return bool(a == b)


def refuse_ambiguous_identity(var: VariableTracker, what: str) -> None:
    """Raise Unsupported (a graph break) for ``what`` on a tensor whose identity depends on
    a branch on tensor data (``TensorVariable.ambiguous_identity``)."""
    if isinstance(var, TensorVariable) and var.ambiguous_identity:
        unimplemented(
            gbt.DATA_DEPENDENT,
            f"{what} of a tensor that is, on one way of a branch on tensor data, a tensor from"
            " before the branch (which object it is depends on tensor data)",
        )


def requires_grad_leaf(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a new autograd leaf that requires grad (the graph op standing for
    ``t.requires_grad = True`` on a value that did not require grad): a tensor over the
    same data, from which later operations record autograd history."""
    return t.detach().requires_grad_(True)


def set_requires_grad(tx, var: TensorVariable, value: VariableTracker) -> None:
    """``var.requires_grad = value`` in captured code (wav2vec2's feature encoder sets it on
    a slice of its input for gradient checkpointing).

    Modelled where eager allows it and the graph can reproduce it: ``True`` on a value that
    does not require grad (such a tensor is a leaf, so eager allows it) and is not a graph
    input (that flag would be the caller's state). The graph computes the value as
    :func:`requires_grad_leaf` of it from then on (the variable now stands for that node),
    so later operations record autograd as in eager. Refused (a graph break): False or a
    graph input; with grad mode on and no graph input requiring grad (an AOTAutograd backend
    would then compile an inference graph, whose outputs never require grad); and, later,
    the value itself leaving the graph (:func:`refuse_forced_leaf`: eager's tensor is a leaf
    whose ``.grad`` fills, a graph output is not). Setting the value it already has is a
    no-op."""
    if not value.is_python_constant() or not isinstance(value.as_python_constant(), bool):
        unimplemented(gbt.SIDE_EFFECT, "tensor.requires_grad = <not a constant bool>")
    refuse_ambiguous_identity(var, "tensor.requires_grad = ...")
    flag = value.as_python_constant()
    if not var.example.is_leaf:
        unimplemented(
            gbt.EXCEPTION, "tensor.requires_grad = ... on a non-leaf tensor (eager raises)"
        )
    if var.example.requires_grad == flag:
        return
    if not flag:
        unimplemented(gbt.SIDE_EFFECT, "tensor.requires_grad = False (changes autograd state)")
    if var.source is not None or var.node.op != "call_function" and var.node.op != "call_method":
        unimplemented(
            gbt.SIDE_EFFECT,
            "tensor.requires_grad = True on a graph input or constant (caller's state)",
        )
    root = tx
    while root.parent is not None:
        root = root.parent
    at = (root.ip - 1, tx.location())  # where a graph break goes if this is refused later
    if torch.is_grad_enabled():
        # checked when the capture ends (the parameters are read later): see
        # OutputGraph.check_requires_grad_assignments
        tx.output.requires_grad_assignments.append(at)
    new = tx.output.call_function(tx, requires_grad_leaf, [var], {})
    var.node, var.example = new.node, new.example
    var.forced_leaf = at


def refuse_forced_leaf(var: VariableTracker) -> None:
    """Raise Unsupported for a tensor made a leaf by ``requires_grad = True`` leaving the
    graph (returned, stored where the caller sees it, live at a graph break)."""
    at = getattr(var, "forced_leaf", None) if isinstance(var, TensorVariable) else None
    if at is not None:
        from ..exc import Unsupported

        err = Unsupported(
            "a tensor whose requires_grad was set in captured code leaves the graph (eager's "
            "is a leaf that accumulates .grad)",
            at[1],
            gb_type=gbt.ESCAPING_VALUE,
        )
        err.root_index = at[0]  # the graph break goes to the assignment
        raise err


class TensorMethodVariable(VariableTracker):
    """A bound method of a tensor (``x.view``), called later."""

    def __init__(self, tensor: TensorVariable, name: str) -> None:
        super().__init__()
        self.tensor = tensor
        self.name = name

    def call_function(self, tx, args, kwargs):
        return self.tensor.call_method(tx, self.name, args, kwargs)

    def __repr__(self) -> str:
        return f"TensorMethodVariable({self.name})"
