"""What an exported graph file may name, and how names are resolved on load.

:mod:`torch_plugin.exported.serialization` writes functions and classes by qualified name and
resolves them on load only through the allowlists here (see its docstring for the rules):
:func:`function_ref` / :func:`resolve_function` for call targets and function values,
:func:`class_ref` / :func:`resolve_class` for classes. Anything else is refused at save time
(:class:`ExportSaveError`) or at load time (:class:`ExportLoadError`).
"""

from __future__ import annotations

import builtins
import importlib
import math
import operator
import pickle
import re
import sys
import types
from typing import Any

import torch
import torch.fx

ALLOWED_PACKAGES = frozenset(
    {"torch", "torch_plugin", "transformers", "torchvision", "timm", "collections", "typing",
     "builtins"}
)  # fmt: skip
# Standard-library packages whose classes may be referenced (others never: tempfile,
# subprocess, ... hold classes whose finalizers act on their attributes).
_STDLIB_ALLOWED = frozenset({"collections", "typing", "builtins"})

#: Builtins allowed as graph functions.
_BUILTINS = (
    "getattr", "hasattr", "len", "abs", "min", "max", "round", "pow", "divmod", "sum", "all",
    "any", "isinstance", "int", "float", "bool", "complex", "tuple", "list", "dict", "range",
    "slice", "iter", "next", "reversed", "sorted", "zip", "enumerate",
)  # fmt: skip

_OPERATOR_DUNDERS = frozenset(
    f"__{p}{n}__"
    for n in (
        "add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "pow", "lshift", "rshift",
        "and", "or", "xor", "divmod", "div",
    )
    for p in ("", "r", "i")
) | frozenset(
    f"__{n}__"
    for n in (
        "neg", "pos", "abs", "invert", "eq", "ne", "lt", "le", "gt", "ge", "getitem",
        "setitem", "delitem", "len", "contains", "bool", "int", "float", "index", "complex",
        "round", "floor", "ceil", "trunc",
    )
)  # fmt: skip

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Builtin types that are no attribute of the builtins module, by qualified name.
_UNNAMED_BUILTIN_TYPES = {
    t.__qualname__: t for t in (type(None), type(Ellipsis), type(NotImplemented))
}


class ExportSaveError(pickle.PicklingError):
    """``torch.save`` of an exported graph holding something the safe format does not
    allow (the message names the node or module and the object)."""


class ExportLoadError(ValueError):
    """A file's exported-graph payload is malformed or names something not allowed."""


# --- classes -----------------------------------------------------------------------------
def class_ref(cls: type, where: str) -> tuple:
    """``("class", module, qualname)`` for ``cls``.

    Raises:
        ExportSaveError: ``cls`` cannot be found again by that name (defined in a function,
            renamed) or lives where :func:`resolve_class` would refuse it."""
    module, qualname = getattr(cls, "__module__", None), getattr(cls, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        raise ExportSaveError(
            f"{where}: class {cls!r} cannot be saved by name (defined inside a function?); "
            "define it at module level"
        )
    try:
        found = resolve_class(module, qualname)
    except ExportLoadError as e:
        raise ExportSaveError(f"{where}: class {cls!r} would not load: {e}") from None
    if found is not cls:
        raise ExportSaveError(f"{where}: {module}.{qualname} names another object than {cls!r}")
    return ("class", module, qualname)


def resolve_class(module: str, qualname: str) -> type:
    """The class ``module.qualname``, under the rules in the module docstring.

    Raises:
        ExportLoadError: the module is not imported and not under :data:`ALLOWED_PACKAGES`,
            is a refused standard-library module, or the name is not a class."""
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise ExportLoadError(f"malformed class reference {module!r}, {qualname!r}")
    top = module.split(".")[0]
    name = f"{module}.{qualname}"
    if top in sys.stdlib_module_names and top not in _STDLIB_ALLOWED:
        raise ExportLoadError(
            f"class {name}: standard-library module {module} is not allowed (only "
            f"{', '.join(sorted(_STDLIB_ALLOWED))})"
        )
    mod = sys.modules.get(module)
    if mod is None:
        if top not in ALLOWED_PACKAGES:
            raise ExportLoadError(
                f"class {name}: module {module} is not imported; import it before torch.load "
                f"(modules of {', '.join(sorted(ALLOWED_PACKAGES))} are imported as needed)"
            )
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            raise ExportLoadError(f"class {name}: cannot import {module}: {e}") from None
    if module == "builtins" and qualname in _UNNAMED_BUILTIN_TYPES:
        return _UNNAMED_BUILTIN_TYPES[qualname]
    obj: Any = mod
    for part in qualname.split("."):
        if not IDENTIFIER.match(part):
            raise ExportLoadError(f"malformed class reference {name!r}")
        # the namespace itself: a module's __getattr__ (PEP 562) may import other modules
        obj = vars(obj).get(part) if isinstance(obj, (types.ModuleType, type)) else None
        if obj is None:
            raise ExportLoadError(f"class {name}: no {part!r} in {module}")
    if not isinstance(obj, type):
        raise ExportLoadError(f"{name} is not a class ({type(obj).__name__})")
    return obj


# --- functions -----------------------------------------------------------------------------
def _is_builtin(obj) -> bool:
    return isinstance(obj, types.BuiltinFunctionType)


def _python_function_of(*modules: str):
    return lambda obj: isinstance(obj, types.FunctionType) and obj.__module__ in modules


def allowed_name(name: str) -> bool:
    """An attribute or method name a graph may use: an identifier, no dunder but the
    operator ones."""
    return (
        isinstance(name, str)
        and bool(IDENTIFIER.match(name))
        and (not name.startswith("__") or name in _OPERATOR_DUNDERS)
    )


_FUNCTION_MODULES: dict[str, tuple] | None = None
_EXPLICIT: dict[str, Any] | None = None
_ALLOWED_BY_MODULES: dict[str, Any] = {}


def allow_function(name: str, fn: Any) -> None:
    """Allow ``fn`` in saved graphs under the reference ``name`` (its module and name): the
    modules above this one register their helpers this way
    (``torch_plugin.exported.graph_module.tensor_setitem``)."""
    _ALLOWED_BY_MODULES[name] = fn
    if _EXPLICIT is not None:
        _EXPLICIT[name] = fn


def _tables() -> tuple[dict, dict]:
    global _FUNCTION_MODULES, _EXPLICIT
    if _FUNCTION_MODULES is None:
        import torch.functional
        import torch.nn.functional as F

        from ..capture.variables.tensor import requires_grad_leaf

        vf = torch._C._VariableFunctions
        functional = _python_function_of("torch.functional")
        _FUNCTION_MODULES = {
            "torch": (
                torch,
                lambda obj: (
                    obj is getattr(vf, getattr(obj, "__name__", ""), None) or functional(obj)
                ),
            ),
            "torch.functional": (torch.functional, functional),
            "torch.nn.functional": (
                F,
                lambda obj: _is_builtin(obj) or _python_function_of("torch.nn.functional")(obj),
            ),
            "torch._C._VariableFunctions": (vf, _is_builtin),
            **{
                f"torch._C.{sub}": (getattr(torch._C, sub), _is_builtin)
                for sub in ("_nn", "_fft", "_linalg", "_special", "_nested")
                if hasattr(torch._C, sub)
            },
            **{
                f"torch.{sub}": (getattr(torch, sub), _is_builtin)
                for sub in ("fft", "linalg", "special")
            },
            "operator": (operator, lambda obj: _is_builtin(obj) and obj is not operator.call),
            "math": (math, _is_builtin),
            "torch.Tensor": (
                torch.Tensor,
                lambda obj: isinstance(
                    obj,
                    (
                        types.FunctionType,
                        types.MethodDescriptorType,
                        types.WrapperDescriptorType,
                        types.BuiltinFunctionType,
                    ),
                ),
            ),
        }
        explicit = {f"builtins.{name}": getattr(builtins, name) for name in _BUILTINS}
        explicit.update(
            {
                "torch._C._set_grad_enabled": torch._C._set_grad_enabled,
                "torch.amp._enter_autocast": torch.amp._enter_autocast,
                "torch.amp._exit_autocast": torch.amp._exit_autocast,
                "torch_plugin.capture.variables.tensor.requires_grad_leaf": requires_grad_leaf,
                **_ALLOWED_BY_MODULES,
            }
        )
        for name in ("_assert", "_check", "_check_is_size", "sym_int", "sym_float", "sym_max",
                     "sym_min", "sym_not", "sym_ite", "sym_sum"):  # fmt: skip
            if hasattr(torch, name):
                explicit[f"torch.{name}"] = getattr(torch, name)
        _EXPLICIT = explicit
    return _FUNCTION_MODULES, _EXPLICIT


def function_ref(fn: Any, where: str) -> tuple:
    """The reference :func:`resolve_function` turns back into ``fn``.

    Raises:
        ExportSaveError: ``fn`` is not in the allowlist (module docstring)."""
    modules, explicit = _tables()
    if isinstance(fn, torch._ops.OpOverload):
        return ("function", f"torch.ops.{fn.namespace}.{fn._opname}.{fn._overloadname}")
    if isinstance(fn, torch._ops.OpOverloadPacket):
        ns, op = fn._qualified_op_name.split("::")
        return ("function", f"torch.ops.{ns}.{op}")
    from ..capture.variables import autograd_function

    for cls, apply in autograd_function._APPLY_FUNCTIONS.items():
        if apply is fn:
            _, module, qualname = class_ref(cls, where)
            return ("autograd_apply", module, qualname)
    candidates = [name for name, obj in explicit.items() if obj is fn]
    attr = getattr(fn, "__name__", None)
    if isinstance(attr, str):
        candidates += [f"{m}.{attr}" for m in modules]
    for name in candidates:
        try:
            if resolve_function(("function", name)) is fn:
                return ("function", name)
        except ExportLoadError:
            continue
    raise ExportSaveError(
        f"{where}: function {describe(fn)} is not in the allowlist of functions an exported "
        "graph can be saved with (torch operators, torch.nn.functional, torch.Tensor methods, "
        "operator, math, a few builtins; see torch_plugin.exported.serialization). The file "
        "would otherwise have to hold code: save the graph's module and weights instead"
    )


def resolve_function(ref: tuple) -> Any:
    """The function a :func:`function_ref` reference names.

    Raises:
        ExportLoadError: the reference is malformed or names something not allowed."""
    modules, explicit = _tables()
    if ref[0] == "autograd_apply" and len(ref) == 3:
        from ..capture.variables.autograd_function import apply_function

        cls = resolve_class(ref[1], ref[2])
        if not issubclass(cls, torch.autograd.Function):
            raise ExportLoadError(f"{ref[1]}.{ref[2]} is not a torch.autograd.Function")
        return apply_function(cls)
    if ref[0] != "function" or len(ref) != 2 or not isinstance(ref[1], str):
        raise ExportLoadError(f"malformed function reference {ref!r}")
    name = ref[1]
    if name in explicit:
        return explicit[name]
    if name.startswith("torch.ops."):
        parts = name.split(".")[2:]
        if len(parts) not in (2, 3) or not all(IDENTIFIER.match(p) for p in parts):
            raise ExportLoadError(f"malformed operator name {name!r}")
        namespace = getattr(torch.ops, parts[0])
        if not isinstance(namespace, torch._ops._OpNamespace):
            raise ExportLoadError(f"{name}: torch.ops.{parts[0]} is not an operator namespace")
        try:
            obj = getattr(namespace, parts[1])
            if len(parts) == 3:
                obj = getattr(obj, parts[2])
        except (AttributeError, RuntimeError) as e:
            raise ExportLoadError(
                f"operator {name} is not registered (import the library defining it): {e}"
            ) from None
        if not isinstance(obj, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            raise ExportLoadError(f"{name} is not an operator")
        return obj
    module, _, attr = name.rpartition(".")
    entry = modules.get(module)
    if entry is None or not allowed_name(attr):
        raise ExportLoadError(f"function {name} is not in the allowlist")
    namespace = entry[0]
    if isinstance(namespace, types.ModuleType):  # not through a module __getattr__
        obj = vars(namespace).get(attr)
    else:
        obj = getattr(namespace, attr, None)
    if obj is None or not entry[1](obj):
        raise ExportLoadError(f"function {name} is not in the allowlist")
    return obj


def describe(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    module = getattr(obj, "__module__", None)
    return f"{module}.{name}" if name and module else repr(obj)
