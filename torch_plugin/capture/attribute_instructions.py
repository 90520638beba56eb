"""Opcode handlers for attributes: LOAD_ATTR, LOAD_METHOD, LOAD_SUPER_ATTR, STORE_ATTR and
DELETE_ATTR.

Key class: :class:`AttributeInstructions`, a mixin of
:class:`~torch_plugin.capture.symbolic_convert.InstructionTranslatorBase`, with the helpers
``getattr``, ``store_attr`` and ``delete_attr`` that the builtins ``getattr``/``setattr``/
``delattr`` reuse. A write to a real object is a recorded side effect (replayed after the
graph), a write the replay could not reproduce is a graph break.
"""

from __future__ import annotations

import torch

from . import graph_break_types as gbt
from .bytecode_compat import PY312
from .exc import unimplemented
from .variables import attribute_rules
from .variables.autograd_function import FunctionCtxVariable
from .variables.base import NullVariable, VariableTracker
from .variables.builder import wrap_constant_or_object
from .variables.new_object import NewObjectVariable
from .variables.nn_module import NNModuleVariable
from .variables.tensor import TensorVariable
from .variables.user_defined import (
    SuperVariable,
    UserDefinedClassVariable,
    UserDefinedObjectVariable,
)


class AttributeInstructions:
    """Attribute opcodes of the translator. See the module docstring."""

    def getattr(self, obj: VariableTracker, name: str) -> VariableTracker:
        """``getattr(obj, name)``; ``__class__`` is answered from the variable's type."""
        if name == "__class__" and not isinstance(obj, TensorVariable):
            return wrap_constant_or_object(obj.python_type())
        if (
            isinstance(obj, (UserDefinedObjectVariable, NNModuleVariable))
            and self.output.side_effects
        ):
            pending = self.output.side_effects.pending_attr(_object_seen(obj), name)
            if pending is not None:
                return pending
        pending = _rule_read(self, obj, name)  # attribute_rules.py
        if pending is not None:
            return pending
        return obj.var_getattr(self, name)

    def LOAD_ATTR(self, inst):
        obj = self.pop()
        method = PY312 and (inst.arg & 1)
        value = self.getattr(obj, inst.argval)
        if method:  # modelled as the bound attribute and a NULL (bytecode_compat)
            self.push_callable(value)
        else:
            self.push(value)

    def LOAD_METHOD(self, inst):  # 3.11
        obj = self.pop()
        self.push(NullVariable())
        self.push(self.getattr(obj, inst.argval))

    def LOAD_SUPER_ATTR(self, inst):  # 3.12
        self_var = self.pop()
        cls = self.pop()
        self.pop()  # the global super
        value = SuperVariable(cls.as_python_constant(), self_var).var_getattr(self, inst.argval)
        if inst.arg & 1:
            self.push_callable(value)
        else:
            self.push(value)

    def STORE_ATTR(self, inst):
        obj = self.pop()
        value = self.pop()
        self.store_attr(obj, inst.argval, value)

    def store_attr(self, obj: VariableTracker, name: str, value: VariableTracker) -> None:
        """``obj.name = value`` (the STORE_ATTR opcode and ``setattr``)."""
        from .variables.model_output import ModelOutputVariable
        from .variables.object_copies import (
            is_private,
            private_setattr,
            refuse_code_running_write,
            refuse_mutated_private,
        )
        from .variables.partials import PartialVariable

        if isinstance(
            obj, (NewObjectVariable, FunctionCtxVariable, ModelOutputVariable, PartialVariable)
        ):
            obj.store_attr(self, name, value)  # not visible outside the frame yet
            return
        if isinstance(obj, TensorVariable) and name == "requires_grad":
            from .variables.tensor import set_requires_grad

            set_requires_grad(self, obj, value)
            return
        if is_private(obj):
            private_setattr(self, obj, name, value)
            return
        if isinstance(obj, TensorVariable):
            attribute_rules.tensor_store_attr(self, obj, name, value)
            return
        if isinstance(obj, UserDefinedClassVariable):
            attribute_rules.class_store_attr(self, obj, name, value)
            return
        if isinstance(obj, UserDefinedObjectVariable) and attribute_rules.descriptor_store(
            self, obj, name, value
        ):
            return  # a property setter or a descriptor's __set__, inlined
        if isinstance(obj, (UserDefinedObjectVariable, NNModuleVariable)):
            real = _object_seen(obj)
            refuse_code_running_write(real, name)
            if isinstance(real, torch.nn.Module) and isinstance(value, TensorVariable):
                if name in real._parameters or name in real._buffers:
                    current = obj.var_getattr(self, name)
                    mod = torch.nn.modules.module
                    if (
                        isinstance(current, TensorVariable)
                        and current.example is value.example
                        and not mod._global_buffer_registration_hooks
                        and not mod._global_parameter_registration_hooks
                    ):
                        # ``self.buf += 1``: the in-place op already changed the buffer, and
                        # Module.__setattr__ stores the same tensor again (no effect; no
                        # registration hook would see it)
                        return
                    unimplemented(
                        gbt.NN_MODULE,
                        f"assignment to parameter/buffer {name!r} of {type(real).__name__}",
                    )
            # A user object is guarded on its type only: the write is replayed on the object
            # found at its source on each call, not on the one seen at capture.
            # A shared module (capture/shared_modules.py) likewise.
            target = (
                obj.source
                if isinstance(obj, UserDefinedObjectVariable)
                or (isinstance(obj, NNModuleVariable) and obj.shared)
                else None
            )
            refuse_mutated_private(value)
            self.output.side_effects.store_attr(real, name, value, target)
            return
        unimplemented(gbt.SIDE_EFFECT, f"assignment to attribute {name!r} of {obj}")

    def DELETE_ATTR(self, inst):
        self.delete_attr(self.pop(), inst.argval)

    def delete_attr(self, obj: VariableTracker, name: str) -> None:
        """``del obj.name`` (the DELETE_ATTR opcode and ``delattr``)."""
        from .variables.object_copies import is_private, private_setattr

        if isinstance(obj, NewObjectVariable):
            obj.delete_attr(self, name)
            return
        if is_private(obj):
            private_setattr(self, obj, name, None)
            return
        attribute_rules.delete_object_attr(self, obj, name)


def _rule_read(tx, obj: VariableTracker, name: str) -> VariableTracker | None:
    """A read answered by attribute_rules.py: a tensor attribute written in the frame, a
    class attribute written in the frame (read through the class), or None."""
    if isinstance(obj, TensorVariable):
        return attribute_rules.tensor_pending_attr(tx, obj, name)
    if isinstance(obj, UserDefinedClassVariable):
        return attribute_rules.class_pending(tx, obj.value, name)
    if isinstance(obj, (UserDefinedObjectVariable, NewObjectVariable)):
        attribute_rules.check_instance_read(tx, obj.python_type(), name)
    return None


def _object_seen(obj: VariableTracker):
    """The real object behind a user-object or nn.Module variable, without guarding its
    identity (side effects are keyed by it while tracing)."""
    if isinstance(obj, UserDefinedObjectVariable):
        return obj.value
    if isinstance(obj, NNModuleVariable):
        return obj.module
    return obj.as_python_constant()
