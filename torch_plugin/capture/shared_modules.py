"""When one compiled entry serves every module object of a class: shared-module captures.

A frame whose argument is an nn.Module (``self`` of a layer's ``forward``) is first captured
specialized on that object: its identity is guarded and its parameters are graph constants
(``get_attr``), which backends may freeze. Layers of one class run the same code object, so
when the layers run as separate frames (a graph break between them; FSDP2 calling each
sharded layer from its hooks) each layer failed the identity guard and recompiled the same
code, until ``config.cache_size_limit`` sent the rest to eager.

So when ``code`` is about to be recompiled and a module argument now holds a different
object of the same class as at an earlier capture, ``code`` is captured shared from then on:
modules reached from the frame's arguments are guarded on their type, ``training``, hooks
and what the graph read from them (attribute values, submodule types, registry keys), not
on identity; their parameters and buffers become graph inputs (placeholders fed from the
module at each call, TENSOR_MATCH-guarded). Uses of a module object as a constant (returned
from the frame, rebuilt after a graph break, compared with ``is``) still guard its identity.
Modules reached from globals or closures stay specialized. This is PyTorch's capture's
``inline_inbuilt_nn_modules`` idea, applied from the first recompile, so a model called as
one frame keeps its frozen-constant graph.
"""

from __future__ import annotations

import types
import weakref

import torch

from .. import config
from .sources import LocalSource, Source

# code object -> {argument name: (module class, id of the module)} of its captures; weak on
# the code objects (resume functions' code dies with the entries that made it).
_seen: weakref.WeakKeyDictionary[types.CodeType, dict[str, tuple[type, int]]] = (
    weakref.WeakKeyDictionary()
)
_shared: weakref.WeakSet[types.CodeType] = weakref.WeakSet()


def _module_arguments(frame) -> dict[str, torch.nn.Module]:
    """The frame's arguments that are modules, or methods bound to one (HF's
    ``apply_chunking_to_forward(self.feed_forward_chunk, ...)``: ``name.__self__``)."""
    code = frame.f_code
    n_args = code.co_argcount + code.co_kwonlyargcount
    values = frame.f_locals
    out = {}
    for name in code.co_varnames[:n_args]:
        value = values.get(name)
        if isinstance(value, torch.nn.Module):
            out[name] = value
        elif isinstance(value, types.MethodType) and isinstance(value.__self__, torch.nn.Module):
            out[name + ".__self__"] = value.__self__
    return out


def decide(frame, recompiling: bool) -> bool:
    """Whether to capture ``frame`` with shared modules; records its module arguments.

    True once a recompile of the code sees, in an argument that held a module at an earlier
    capture, another object of the same class (sticky for the code object)."""
    code = frame.f_code
    modules = _module_arguments(frame)
    seen = _seen.setdefault(code, {})
    if recompiling and code not in _shared:
        for name, module in modules.items():
            prev = seen.get(name)
            if prev is not None and prev[0] is type(module) and prev[1] != id(module):
                _shared.add(code)
                break
    for name, module in modules.items():
        seen[name] = (type(module), id(module))
    return code in _shared and config.share_module_code


def is_frame_argument(source: Source | None) -> bool:
    """Whether ``source`` starts at an argument of the captured frame."""
    return source is not None and isinstance(source.root(), LocalSource)


def reset() -> None:
    """Forget the module arguments seen (called by ``torch_plugin.reset``)."""
    _seen.clear()
    _shared.clear()
