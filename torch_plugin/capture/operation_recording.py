"""Recording torch operations as FX nodes: run on FakeTensors, convert arguments, wrap results.

Key class: :class:`OperationRecorder`, a mixin of
:class:`~torch_plugin.capture.output_graph.OutputGraph`. :meth:`OperationRecorder.call_function`,
``call_method`` and ``call_module`` run a call on the FakeTensors of its arguments (for the
result's shape, dtype and device), and then either add it to the graph, fold it to a constant
(a call known to be pure that returns no tensor, see pure_calls.py), or break the graph (a
data-dependent output, a call FakeTensor cannot run, an effect that cannot be replayed).
NumPy scalar arguments become the Python numbers of their value where that gives the same
result; symbolic numbers become graph values (``OutputGraph.sym_arg``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from .. import config
from . import graph_break_types as gbt
from .exc import unimplemented
from .pure_calls import (
    check_fold_left_inputs_unchanged,
    describe_call,
    is_mutating_call,
    is_pure_call,
    mutated_tensor,
    overlapping_argument,
    tensor_versions,
)
from .variables.base import VariableTracker
from .variables.constant import ConstantVariable, is_immutable
from .variables.tensor import TensorVariable


class OperationRecorder:
    """Operation recording of the output graph. See the module docstring."""

    def _to_args(self, value: Any, fake: bool):
        if isinstance(value, TensorVariable):
            return value.example if fake else value.node
        if isinstance(value, VariableTracker):
            from .variables.dicts import ConstDictVariable
            from .variables.lists import BaseListVariable

            if isinstance(value, BaseListVariable):
                return value.python_cls(self._to_args(v, fake) for v in value.items)
            if isinstance(value, ConstDictVariable):
                return {k: self._to_args(v, fake) for k, v in value.items.items()}
            if isinstance(value, ConstantVariable):
                return self._const_arg(value.value, fake)
            if value.is_python_constant():
                const = value.as_python_constant()
                if is_immutable(const):
                    return self._const_arg(const, fake)
            unimplemented(gbt.FAKE_TENSOR, f"argument {value} to a torch operation")
        return value

    def _record(
        self, tx, kind: str, target, args: list, kwargs: dict, run: Callable
    ) -> VariableTracker:
        node_args = tuple(self._to_args(a, False) for a in args)
        node_kwargs = {k: self._to_args(v, False) for k, v in kwargs.items()}
        fake_args = tuple(self._to_args(a, True) for a in args)
        fake_kwargs = {k: self._to_args(v, True) for k, v in kwargs.items()}
        if overlapping_argument(kind, target, fake_args, fake_kwargs):
            unimplemented(
                gbt.SIDE_EFFECT,
                f"{describe_call(kind, target)} writes a tensor that another argument overlaps"
                " (eager decides: it raises or computes in place)",
            )
        versions = tensor_versions(fake_args, fake_kwargs) if config.debug_check_pure else None
        aliased = self._check_branch_aliases(kind, target, fake_args, fake_kwargs)
        try:
            with self.fake_mode, self._guard_context(target, fake_args):
                if self.branch_dispatch_mode is not None:  # a branch traced (conditionals.py)
                    with self.branch_dispatch_mode:
                        example = run(*fake_args, **fake_kwargs)
                else:
                    example = run(*fake_args, **fake_kwargs)
        except (
            torch._subclasses.fake_tensor.DataDependentOutputException,
            torch._subclasses.fake_tensor.DynamicOutputShapeException,
        ) as e:
            unimplemented(
                gbt.DATA_DEPENDENT,
                f"data-dependent operation {getattr(target, '__name__', target)}: {type(e).__name__}",
            )
        except NotImplementedError as e:
            unimplemented(
                gbt.FAKE_TENSOR,
                f"{getattr(target, '__name__', target)} is not supported on FakeTensor: {e}",
            )
        except Exception as e:
            unimplemented(
                gbt.FAKE_TENSOR,
                f"{getattr(target, '__name__', target)} raised {type(e).__name__}: {e}",
            )
        for t, version in aliased:
            if t._version != version:
                _refuse_branch_aliased_write(kind, target)
        if _holds_numpy_scalar((fake_args, fake_kwargs)):
            self._check_plain_scalars_agree(target, run, fake_args, fake_kwargs, example)
        if not _contains_tensor(example):
            if is_pure_call(kind, target):
                # metadata-only result (e.g. torch.is_floating_point): a constant of the
                # capture. Only calls known to be pure are folded (see pure_calls.py).
                if config.debug_check_pure:
                    check_fold_left_inputs_unchanged(target, fake_args, fake_kwargs, versions)
                from .variables.builder import wrap_constant_or_object

                return wrap_constant_or_object(example)
            if not is_mutating_call(kind, target, node_kwargs):
                unimplemented(
                    gbt.SIDE_EFFECT,
                    f"{describe_call(kind, target)} returned no tensor and is not known to be"
                    " pure (its effect cannot be replayed)",
                )
            if example is not None:
                unimplemented(
                    gbt.SIDE_EFFECT,
                    f"{describe_call(kind, target)} mutates a tensor and returns a"
                    f" {type(example).__name__}",
                )
            # An in-place call whose result is None (``t[i] = v``, ``Tensor.__setitem__``):
            # a graph node, so the mutation happens when the graph runs.
            node = self.graph.create_node(kind, target, node_args, node_kwargs)
            node.meta["example_value"] = None
            node.meta["stack_trace"] = tx.current_location_text()
            return ConstantVariable(None)
        node = self.graph.create_node(kind, target, node_args, node_kwargs)
        node.meta["example_value"] = example
        node.meta["stack_trace"] = tx.current_location_text()
        return self._wrap_result(tx, node, example, _argument_variables(args, kwargs))

    def _check_branch_aliases(self, kind: str, target, fake_args: tuple, fake_kwargs: dict):
        """Refuse a call that writes in place to memory a conditional's output may share on
        one way of its branch (``branch_aliased``): which tensors that write changes depends
        on tensor data, and the graph (functionalized by AOTAutograd, its pieces compiled
        apart: conditional_execution.py) would not update the others. The write is found by
        the call's form (``add_``, ``x[i] = v``, see ``pure_calls.mutated_tensor``) and, for
        any other call (``out=``, a module), by the version counters of such arguments after
        it runs: returns (FakeTensor, version) pairs for the caller to compare."""
        if not self.branch_aliased:
            return []
        touched = [
            t
            for t, _ in tensor_versions(fake_args, fake_kwargs)
            if any(_shares_memory(t, other) for other in self.branch_aliased)
        ]
        if not touched:
            return []
        dst = mutated_tensor(kind, target, fake_args)
        if any(t is dst for t in touched) or (
            kind == "call_module" and any(t.is_inference() for t in touched)
        ):
            _refuse_branch_aliased_write(kind, target)
        return [(t, t._version) for t in touched if not t.is_inference()]

    def _check_plain_scalars_agree(
        self, target, run: Callable, fake_args: tuple, fake_kwargs: dict, example: Any
    ) -> None:
        """The graph spells a NumPy scalar argument (``np.float64(2.5)``, a ``float``
        subclass) as the Python number of the same value (its FX code has no ``np``, see
        :func:`_plain_scalar`). Allowed only where that gives the same result's type, dtype,
        shape, strides, device and requires_grad as the NumPy scalar did (FakeTensor runs the
        call both ways): ``torch.tensor(np.float64(2.5))`` is float64 where
        ``torch.tensor(2.5)`` is float32, a graph break."""
        plain_args = _plain_scalar(fake_args)
        plain_kwargs = _plain_scalar(fake_kwargs)
        try:
            with self.fake_mode, self._guard_context(target, plain_args):
                plain = run(*plain_args, **plain_kwargs)
        except Exception:  # noqa: BLE001 - any difference is a graph break
            plain = _MISMATCH
        if not _same_metadata(example, plain):
            unimplemented(
                gbt.FAKE_TENSOR,
                f"{getattr(target, '__name__', target)} with a NumPy scalar argument gives"
                " another result than with the Python number of its value",
            )

    def _guard_context(self, target, fake_args: tuple):
        """Convolutions on contiguous input and weight: no guards from the fake kernel.

        FakeTensor's convolution asks ATen which backend the real kernel would pick
        (``torch._C._select_conv_backend``), only to choose the output's memory format. On
        CPU that choice reads the batch size (oneDNN from 16 on), so a symbolic batch would
        get a guard ``s0 < 16`` and a batch sweep would compile three times. For contiguous
        input and weight every CPU backend returns a contiguous output
        (``_determine_backend_memory_format`` in ATen's Convolution.cpp), so the decision
        does not change the graph and need not be guarded.
        """
        import contextlib

        if not self.shape_bindings:
            return contextlib.nullcontext()
        if len(fake_args) < 2:
            return self._symbolic_context()
        if self._conv_targets is None:
            F = torch.nn.functional
            self._conv_targets = {
                F.conv1d,
                F.conv2d,
                F.conv3d,
                torch.conv1d,
                torch.conv2d,
                torch.conv3d,
                torch.ops.aten.convolution.default,
            }
        x, w = fake_args[0], fake_args[1]
        if (
            target in self._conv_targets
            and isinstance(x, torch.Tensor)
            and isinstance(w, torch.Tensor)
            and x.device.type == "cpu"
            and w.is_contiguous()
            and x.is_contiguous()
        ):
            stack = contextlib.ExitStack()
            stack.enter_context(self._symbolic_context())
            stack.enter_context(self.shape_env.suppress_guards())
            return stack
        return self._symbolic_context()

    def _symbolic_context(self):
        """PyTorch's Python dispatcher, on when sizes are symbolic: composite ops (matmul,
        ...) then decompose through their symbolic-size-aware Python decompositions instead
        of C++ code that reads concrete sizes (which would specialize a symbol, e.g.
        ``Eq(s0, 2)`` from a 4-d ``torch.matmul``). Dynamo does the same while tracing."""
        from torch._dispatch.python import enable_python_dispatcher

        return enable_python_dispatcher()

    def _wrap_result(
        self, tx, node: torch.fx.Node, example: Any, known: dict | None = None
    ) -> VariableTracker:
        """The variable for ``node``'s result. A tensor that is one of the call's tensor
        arguments (an in-place op's ``self``, an ``out=`` tensor, ``x.to(x.dtype)``: FakeTensor
        returns the very fake object it was given, as the real op returns the very tensor) is
        that argument's variable (``known``: id of its example -> variable), so ``x.add_(1) is
        x`` holds and every later use is that one variable. The node itself stays in the
        graph, in order, and carries the mutation (nothing removes unused nodes; AOTAutograd
        traces every node and functionalizes the mutation)."""
        from .variables.lists import ListVariable, NamedTupleVariable, TupleVariable

        known = known or {}
        if isinstance(example, torch.Tensor):
            same = known.get(id(example))
            if same is not None and same.example is example:
                return same
            return TensorVariable(node, example)
        if isinstance(example, (tuple, list)):
            items = []
            for i, ex in enumerate(example):
                if isinstance(ex, torch.Tensor):
                    n = self.graph.call_function(operator.getitem, (node, i))
                    n.meta["example_value"] = ex
                    items.append(self._wrap_result(tx, n, ex, known))
                elif _contains_tensor(ex):
                    n = self.graph.call_function(operator.getitem, (node, i))
                    items.append(self._wrap_result(tx, n, ex, known))
                else:
                    from .variables.builder import wrap_constant_or_object

                    items.append(wrap_constant_or_object(ex))
            if isinstance(example, tuple) and type(example) is not tuple:
                return NamedTupleVariable(items, type(example))
            return (
                TupleVariable(items)
                if isinstance(example, tuple)
                else ListVariable(items, mutable_local=True)
            )
        unimplemented(gbt.FAKE_TENSOR, f"operation returning {type(example).__name__}")

    def call_function(self, tx, fn, args: list, kwargs: dict) -> VariableTracker:
        return self._record(tx, "call_function", fn, args, kwargs, fn)

    def call_method(self, tx, name: str, args: list, kwargs: dict) -> VariableTracker:
        def run(self_, *a, **k):
            return getattr(self_, name)(*a, **k)

        return self._record(tx, "call_method", name, args, kwargs, run)

    def call_module(
        self, tx, module: torch.nn.Module, source, args: list, kwargs: dict
    ) -> VariableTracker:
        name = self.register_module(module, source)
        run = _eval_batch_norm_shape_rule(module, args, kwargs) or module
        return self._record(tx, "call_module", name, args, kwargs, run)

    def _const_arg(self, value: Any, fake: bool) -> Any:
        """A constant argument; symbolic numbers in it become graph values (see sym_arg)."""
        if fake:
            return value
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return self.sym_arg(value)
        if _holds_numpy_scalar(value):
            # checked to give the same result (_check_plain_scalars_agree)
            value = _plain_scalar(value)
        if isinstance(value, (tuple, list)) and any(
            isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool, tuple, list)) for v in value
        ):
            items = [self._const_arg(v, fake) for v in value]
            return type(value)(items) if type(value) in (tuple, list) else tuple(items)
        if isinstance(value, slice) and any(
            isinstance(v, torch.SymInt) for v in (value.start, value.stop, value.step)
        ):
            return slice(*(self._const_arg(v, fake) for v in (value.start, value.stop, value.step)))
        return value


def _argument_variables(args: list, kwargs: dict) -> dict:
    """id of each tensor argument's example -> its variable (also inside list, tuple and dict
    arguments): the variables a call's result may be (see ``OutputGraph._wrap_result``)."""
    from .variables.dicts import ConstDictVariable
    from .variables.lists import BaseListVariable

    found: dict = {}
    todo = [*args, *kwargs.values()]
    while todo:
        v = todo.pop()
        if isinstance(v, TensorVariable):
            found.setdefault(id(v.example), v)
        elif isinstance(v, BaseListVariable):
            todo.extend(v.items)
        elif isinstance(v, ConstDictVariable):
            todo.extend(v.items.values())
    return found


_MISMATCH = object()


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a is b or torch._C._is_alias_of(a, b)
    except RuntimeError:  # a tensor kind without storage
        return False


def _refuse_branch_aliased_write(kind: str, target) -> None:
    unimplemented(
        gbt.DATA_DEPENDENT,
        f"{describe_call(kind, target)} writes in place to a tensor that a branch on tensor"
        " data may have made another tensor (which tensors change depends on tensor data)",
    )


def _is_numpy_scalar(value: Any) -> bool:
    """A NumPy scalar (``np.float64(2.5)``, ``np.float32``, ``np.int64``, ``np.bool_``:
    ``numpy_calls.SCALAR_TYPES``): a constant of the capture, but not one FX code can spell
    (it prints as ``np.float64(2.5)``)."""
    from .variables.numpy_calls import is_numpy_scalar

    return is_numpy_scalar(value)


def _holds_numpy_scalar(value: Any) -> bool:
    if _is_numpy_scalar(value):
        return True
    if isinstance(value, (tuple, list)):
        return any(_holds_numpy_scalar(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_numpy_scalar(v) for v in value.values())
    return False


def _plain_scalar(value: Any) -> Any:
    """``value`` with each NumPy scalar replaced by the Python number of the same value
    (exact: ``np.float64`` is a double, as ``float``), inside tuples, lists and dicts."""
    if _is_numpy_scalar(value):
        return value.item()  # exact: SCALAR_TYPES are at most a double
    if type(value) in (tuple, list):
        return type(value)(_plain_scalar(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain_scalar(v) for k, v in value.items()}
    return value


def _same_metadata(a: Any, b: Any) -> bool:
    """Whether two fake results agree in everything the graph's result would show
    except values (type, dtype, shape, strides, device, requires_grad; containers item by
    item; other values equal and of one type)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            type(a) is type(b)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and a.stride() == b.stride()
            and a.device == b.device
            and a.requires_grad == b.requires_grad
        )
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same_metadata, a, b))
    return type(a) is type(b) and a == b


def _contains_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)):
        return any(_contains_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_contains_tensor(v) for v in value.values())
    return False


def _eval_batch_norm_shape_rule(module: torch.nn.Module, args: list, kwargs: dict):
    """For a BatchNorm module that normalizes with its running statistics, a function
    giving its output's metadata (``empty_like`` of the input, which is what the kernel
    returns: same sizes, strides and dtype) without running it on FakeTensors, or None.

    FakeTensor has no fast kernel for batch norm and runs PyTorch's Python decomposition
    (about 30 ops) instead: 0.2-0.4 s of capturing a ResNet-50. The checks the
    decomposition would make on the input (rank, channel count) are made here; anything
    else (training mode, no running statistics, other arguments) returns None and takes
    the FakeTensor path.
    """
    if (
        not isinstance(module, torch.nn.modules.batchnorm._BatchNorm)
        or type(module).forward is not torch.nn.modules.batchnorm._BatchNorm.forward
        or module.training
        or module.running_mean is None
        or module.running_var is None
        or kwargs
        or len(args) != 1
        or not isinstance(args[0], TensorVariable)
    ):
        return None
    expected_dims = {
        torch.nn.BatchNorm1d: (2, 3),
        torch.nn.BatchNorm2d: (4,),
        torch.nn.BatchNorm3d: (5,),
    }.get(type(module))
    if expected_dims is None:
        return None

    def run(x: torch.Tensor) -> torch.Tensor:
        stats_dtype = module.running_mean.dtype
        if (
            x.dim() not in expected_dims
            or x.shape[1] != module.num_features  # the module raises the real error
            or any(isinstance(d, torch.SymInt) for d in x.shape)
            or not (x.dtype == stats_dtype or x.dtype in (torch.float16, torch.bfloat16))
            or not (
                x.is_contiguous()
                or (x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last))
            )
        ):
            return module(x)
        return torch.empty_like(x)

    return run
