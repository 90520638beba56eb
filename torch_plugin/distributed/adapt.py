"""The compiler function for one frame's graphs, adapted to torch.distributed's wrappers.

Capture knows nothing of DistributedDataParallel or FSDP2: the public API gives it
:func:`adapt_compiler`, which capture calls once per frame it converts, with the frame and
the backend's compiler function, and uses what it returns for that frame's graphs:

- FSDP2: when the frame reads modules whose parameters FSDP2 rewrites without a version bump
  (:func:`torch_plugin.distributed.fsdp.reads_fsdp2_modules`, decided when the frame is
  converted), each graph is marked ``gm.meta[UNVERSIONED_PARAMETERS]`` before the backend runs.
- DDP: while the forward of a DistributedDataParallel module runs (and
  ``config.optimize_ddp``, read at each compile), the backend is wrapped to compile one
  subgraph per gradient bucket (:func:`torch_plugin.distributed.ddp.bucket_splitting_compiler`);
  the split is reported in ``gm.meta[DDP_SPLIT]``, which capture puts in its record.
"""

from __future__ import annotations

from typing import Any

import torch

from torch_plugin import config
from torch_plugin.contract import DDP_SPLIT, OPTIMIZER_STEP, UNVERSIONED_PARAMETERS, CompilerFn
from torch_plugin.distributed.ddp import active_ddp_module, bucket_splitting_compiler
from torch_plugin.distributed.fsdp import reads_fsdp2_modules


def adapt_compiler(frame: Any, compiler: CompilerFn) -> CompilerFn:
    """``compiler`` as the graphs of ``frame`` (a ``FrameInfo`` of the capture hook) must be
    compiled under torch.distributed (see the module docstring)."""
    unversioned = reads_fsdp2_modules(frame)

    def compile_graph(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        if unversioned:
            gm.meta[UNVERSIONED_PARAMETERS] = True
        backend = compiler
        ddp = active_ddp_module() if config.optimize_ddp else None
        if ddp is not None:
            backend = bucket_splitting_compiler(
                compiler, ddp, lambda split: gm.meta.__setitem__(DDP_SPLIT, split)
            )
        return backend(gm, example_inputs)

    # The backend's optimizer step (contract.OPTIMIZER_STEP), unchanged under distributed.
    step_fn = getattr(compiler, OPTIMIZER_STEP, None)
    if step_fn is not None:
        setattr(compile_graph, OPTIMIZER_STEP, step_fn)
    return compile_graph
