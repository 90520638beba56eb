"""torch.distributed support: captured graphs split where DistributedDataParallel reduces.

A graph compiled whole through AOTAutograd has one backward node: every parameter's gradient
appears when the whole backward has finished, so DDP could start no all-reduce before the
end of the backward pass. :mod:`torch_plugin.distributed.ddp` splits a graph captured
inside DDP's forward into one subgraph per gradient bucket; each subgraph is compiled by the
chosen backend on its own, so its gradients (and DDP's all-reduce of that bucket) are ready
while the backward of the earlier subgraphs still runs. See docs/distributed.md.

FSDP2 (``fully_shard``) rewrites its parameters in place without a version bump: graphs of
frames that read such modules are marked so backends never freeze their parameters
(:mod:`torch_plugin.distributed.fsdp`).

Capture knows nothing of either: :func:`torch_plugin.distributed.adapt.adapt_compiler`, given
to capture by the public API, adapts the backend's compiler function for each frame.

Key parts:
- :func:`torch_plugin.distributed.adapt.adapt_compiler`: the compiler for one frame's graphs.
- :func:`torch_plugin.distributed.fsdp.reads_fsdp2_modules`: whether a frame reads modules
  sharded (or managed) by FSDP2.
- :func:`torch_plugin.distributed.ddp.active_ddp_module`: the DDP module whose forward is
  running, if any.
- :func:`torch_plugin.distributed.ddp.bucket_splitting_compiler`: a backend wrapped so it
  compiles one subgraph per bucket.
- :class:`torch_plugin.distributed.ddp.DDPSplit`: what a split did (for ``explain()``).
"""
