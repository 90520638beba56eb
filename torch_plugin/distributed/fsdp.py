"""FSDP2 (``torch.distributed.fsdp.fully_shard``): which frames read parameters it rewrites.

FSDP2 all-gathers into the unsharded parameters before each forward and frees them after,
keeping their version counters (``torch.autograd._unsafe_preserve_version_counter``): their
values change with no version bump. A graph captured from a frame that reads such modules is
marked ``gm.meta[UNVERSIONED_PARAMETERS]`` (:mod:`torch_plugin.contract`) so backends do not
freeze its parameters (see :func:`torch_plugin.distributed.adapt.adapt_compiler`).

Key parts: :func:`reads_fsdp2_modules`, :func:`fsdp2_managed_modules`.
"""

from __future__ import annotations

import sys
from typing import Any

import torch


def reads_fsdp2_modules(frame: Any) -> bool:
    """Whether a module among the frame's locals (``frame.f_locals``: a ``FrameInfo`` of the
    capture hook, or a Python frame) is, or holds, a module sharded by FSDP2, or one whose
    parameters an FSDP2 state manages (:func:`fsdp2_managed_modules`)."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    fsdp_module = getattr(fsdp, "FSDPModule", None)
    if fsdp_module is None:  # FSDP2 never imported: no module can be sharded by it
        return False
    managed = None
    for value in frame.f_locals.values():
        if not isinstance(value, torch.nn.Module):
            continue
        if managed is None:
            managed = fsdp2_managed_modules()
        if any(isinstance(m, fsdp_module) or id(m) in managed for m in value.modules()):
            return True
    return False


def fsdp2_managed_modules() -> set[int]:
    """Ids of the modules whose parameters an FSDP2 state manages, sharded modules or not:
    ``fully_shard(root)`` also manages the parameters of the root's submodules that are not
    sharded on their own (a final ``Linear``), and such a submodule's ``forward`` can be
    captured as its own frame (called from code that runs unmodified). Read from the states
    ``fully_shard`` registers (``torch.distributed._composable_state``, each state's
    ``FSDPParamGroup.fsdp_params[i]._module_info``: torch 2.x internals, so any change there
    makes this an empty set and only the sharded modules themselves are recognised)."""
    ids: set[int] = set()
    try:
        from torch.distributed import _composable_state

        for state_ref in list(_composable_state._module_state_mapping.values()):
            group = getattr(state_ref(), "_fsdp_param_group", None)
            for fsdp_param in getattr(group, "fsdp_params", ()) or ():
                info = fsdp_param._module_info
                ids.add(id(info.module))
                ids.update(id(m) for m in info.shared_modules)
    except (ImportError, AttributeError, TypeError):
        return set()
    return ids
