"""The exported graph module: :class:`ExportedGraph` and the pieces its graph calls.

An exported graph is an ordinary ``torch.fx.GraphModule`` (it prints, re-traces and runs
without the hook) of class :class:`ExportedGraph`, whose ``__reduce__`` gives
``torch.save`` a structured description of the graph (see :mod:`.serialization`) that
``torch.load`` rebuilds with its default ``weights_only=True``.

Below :mod:`.serialization`, which builds on this module: it installs its reducer here
(:func:`install_reducer`), and this module registers :func:`tensor_setitem` in the allowlist
(:func:`.allowlist.allow_function`).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from ..capture.output_structure import rebuild
from .allowlist import ExportLoadError, allow_function

_reduce_exported: Callable[[torch.fx.GraphModule], tuple] | None = None


def install_reducer(reduce: Callable[[torch.fx.GraphModule], tuple]) -> None:
    """Make ``ExportedGraph.__reduce__`` return ``reduce(self)``
    (``torch_plugin.exported.serialization.reduce_exported`` installs itself at import)."""
    global _reduce_exported
    _reduce_exported = reduce


class ExportCodeGen(torch.fx.graph._PyTreeCodeGen):
    """FX's pytree code generation (``forward(self, arg0, ..., kw...)`` flattening the call's
    arguments by ``self._in_spec``), with the guard check first: the generated ``forward``
    calls ``self._export_guards.check((args, kwargs))`` on the arguments as given, before
    flattening them (a flatten against the export's spec would accept a longer tuple or a
    list for a tuple silently)."""

    def gen_var_bindings(self, fn_args, free_vars, expanded_def) -> str:
        in_spec = self.pytree_info.in_spec
        n_args = in_spec.child(0).num_children
        names = self.pytree_info.orig_args
        kwargs = ", ".join(f"{k!r}: {v}" for k, v in zip(in_spec.child(1).context, names[n_args:]))
        positional = "".join(f"{a}, " for a in names[:n_args])
        check = f"""
    self._export_guards.check((({positional}), {{{kwargs}}}))"""
        return check + super().gen_var_bindings(fn_args, free_vars, expanded_def)


class ExportedGraph(torch.fx.GraphModule):
    """The graph module :func:`torch_plugin.export` returns (see its docstring).

    Submodules ``_export_guards`` (:class:`torch_plugin.exported.guards.ExportGuards`, called
    first by the graph) and, for structured return values, ``_export_output``
    (:class:`ExportedOutput`, called last)."""

    @property
    def checked_guards(self) -> list[str]:
        """What each call checks before computing, in source terms (``L['x'].size()[0] ==
        4``); a violation raises ``torch_plugin.exported.guards.ExportGuardError``."""
        guards = self._modules.get("_export_guards")
        return [] if guards is None else [c[3] for c in guards.checks if c[0] != "symbol"]

    @property
    def unchecked_guards(self) -> list[str]:
        """What the capture assumed that a call of the graph cannot check (one line per
        source: ``self`` of a module, globals, closure variables, the global torch state):
        the graph keeps those values from export."""
        guards = self._modules.get("_export_guards")
        return [] if guards is None else list(guards.unchecked)

    def __reduce__(self):
        if _reduce_exported is None:
            raise pickle.PicklingError("torch_plugin.exported.serialization is not imported")
        return _reduce_exported(self)


def tensor_setitem(tensor: torch.Tensor, index: Any, value: Any) -> None:
    """``tensor[index] = value`` in an exported graph. ``torch.load`` rebuilds a graph module
    by tracing its code with FX proxies, which take no item assignment; under that trace
    this records itself as a node instead."""
    if isinstance(tensor, torch.fx.Proxy):
        tensor.tracer.create_proxy("call_function", tensor_setitem, (tensor, index, value), {})
        return
    tensor[index] = value


allow_function("torch_plugin.exported.graph_module.tensor_setitem", tensor_setitem)


class ExportedOutput(torch.nn.Module):
    """The exported call's return value from the graph's output tensors, for a return value
    holding objects the code builds or ModelOutputs (``spec`` is the capture's output
    description, see ``capture/output_structure.py``): each call builds its own objects, as
    eager does. A submodule, so that ``torch.load``'s re-trace of the graph keeps it as one
    call (a function would run on the tracer's proxies)."""

    def __init__(self, spec: tuple) -> None:
        super().__init__()
        self.spec = spec

    def forward(self, *tensors: torch.Tensor) -> Any:
        return rebuild(self.spec, tensors)

    def payload(self) -> dict:
        """What ``torch.save`` writes for this module (see :mod:`.serialization`): the output
        spec, whose classes are written as references to their module and name."""
        return {"spec": self.spec}

    @classmethod
    def from_payload(cls, payload: dict) -> ExportedOutput:
        """The module :meth:`payload` described (classes already resolved by the loader).

        Raises:
            torch_plugin.exported.serialization.ExportLoadError: a malformed spec, or a class
                in a role it cannot play (a named tuple that is not a tuple subclass, ...)."""
        if type(payload) is not dict or "spec" not in payload:
            raise ExportLoadError("malformed ExportedOutput payload")
        check_output_spec(payload["spec"])
        return cls(payload["spec"])


def check_output_spec(spec: Any) -> None:
    """Checks that ``spec`` is a well-formed output structure (capture/output_structure.py)
    whose classes fit their roles: named tuples are tuple subclasses, dicts and
    ModelOutputs dict subclasses, objects classes.

    Raises:
        ExportLoadError: otherwise."""

    def parts(items, pair: bool) -> None:
        if type(items) is not list:
            raise ExportLoadError("malformed output structure")
        for item in items:
            if pair:
                if type(item) is not tuple or len(item) != 2:
                    raise ExportLoadError("malformed output structure")
                check_output_spec(item[1])
            else:
                check_output_spec(item)

    if type(spec) is not tuple or not spec or not isinstance(spec[0], str):
        raise ExportLoadError(f"malformed output structure {spec!r:.80}")
    kind, n = spec[0], len(spec)
    role = {"namedtuple": tuple, "dict": dict, "model_output": dict, "object": object}
    if kind == "tensor" and n == 2 and type(spec[1]) is int:
        return
    if kind == "const" and n == 2:
        return
    if kind == "object_ref" and n == 2 and type(spec[1]) is int:
        return
    if kind == "tuple" and n in (2, 3):  # (an id at the end, for some)
        return parts(spec[1], False)
    if kind == "list" and n == 3 and type(spec[2]) is int:
        return parts(spec[1], False)
    if kind in role and n == (3 if kind == "namedtuple" else 4):
        cls = spec[1]
        if not (isinstance(cls, type) and issubclass(cls, role[kind])):
            raise ExportLoadError(f"output structure {kind} with class {cls!r}")
        if kind == "object" and isinstance(cls, type) and issubclass(cls, type):
            raise ExportLoadError(f"output structure object of metaclass {cls!r}")
        return parts(spec[2], kind != "namedtuple")
    raise ExportLoadError(f"malformed output structure part {kind!r}")
