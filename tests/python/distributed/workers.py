"""Worker side of the distributed tests (tests/python/distributed): DDP (``run_case``) and
FSDP2 (``run_fsdp2_case``).

For DDP, each rank of a gloo process group (CPU) trains the same model twice for three optimizer
steps, once under eager DDP and once under DDP with torch_plugin, on the same per-rank random
batches, and writes what a user could observe to ``rank<N>.json``: losses, the largest
differences of parameters, gradients and buffers, DDP's own buckets (after its rebuild), the
subgraphs the capture layer compiled and how often the backend compiled. The test process
compares; nothing here decides pass or fail.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import weakref
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 3


def mlp() -> tuple[torch.nn.Module, callable]:
    layers = [torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()) for _ in range(6)]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(64, 4))

    def batch(g: torch.Generator):
        return (torch.randn(8, 64, generator=g),)

    return model, batch


class SmallCNN(torch.nn.Module):
    """Conv/BatchNorm/ReLU blocks and a linear head: buffers change in every step."""

    def __init__(self) -> None:
        super().__init__()
        chans = [3, 16, 32, 32, 64]
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(
                torch.nn.Conv2d(a, b, 3, padding=1, bias=False),
                torch.nn.BatchNorm2d(b),
                torch.nn.ReLU(),
            )
            for a, b in itertools.pairwise(chans)
        )
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean((2, 3)))


def cnn() -> tuple[torch.nn.Module, callable]:
    def batch(g: torch.Generator):
        return (torch.randn(4, 3, 16, 16, generator=g),)

    return SmallCNN(), batch


def bert() -> tuple[torch.nn.Module, callable]:
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=128,
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = BertModel(config, add_pooling_layer=False)

    def batch(g: torch.Generator):
        return (torch.randint(0, 128, (2, 16), generator=g),)

    return model, batch


MODELS = {"mlp": mlp, "cnn": cnn, "bert": bert}


def _output_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    return out[0]  # HF ModelOutput: last_hidden_state


def _train(
    rank: int,
    model_name: str,
    compiled: str | None,
    bucket_cap_mb: float,
    wrap: str,
    device: str = "cpu",
):
    import torch_plugin

    torch.manual_seed(0)
    model, cpu_batch = MODELS[model_name]()
    model = model.to(device)

    def batch(g):
        return tuple(t.to(device) for t in cpu_batch(g))

    if compiled is not None and wrap == "before":
        model_for_ddp = torch_plugin.optimize(compiled)(model)
    else:
        model_for_ddp = model
    device_ids = [torch.device(device).index] if device != "cpu" else None
    ddp = DDP(model_for_ddp, bucket_cap_mb=bucket_cap_mb, device_ids=device_ids)
    runner = torch_plugin.optimize(compiled)(ddp) if compiled and wrap == "after" else ddp
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses, grads = [], {}
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * step + rank)
        loss = _output_tensor(runner(*batch(g))).square().mean()
        loss.backward()
        losses.append(loss.item())
        if step == STEPS - 1:
            grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters()}
        opt.step()
        opt.zero_grad()
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    data = ddp._get_ddp_logging_data()
    names = [n for n, _ in model.named_parameters()]
    buckets = [
        sorted(names[int(i)] for i in group.split())
        for group in str(data.get("rebuilt_per_bucket_param_indices", "")).split(",")
        if group.strip()
    ]
    return losses, grads, params, buffers, buckets, _max_diff(initial, params)


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    diffs = ((x.double() - y.double()).abs().max().item() for x, y in zip(a.values(), b.values()))
    return max(diffs, default=0.0)


def run_case(rank: int, world: int, port: int, out_dir: str, case: dict) -> None:
    """One rank: eager DDP, then DDP with torch_plugin (``case``: model, backend, bucket_cap_mb,
    wrap "after" = optimize(DDP(model)) or "before" = DDP(optimize(model)), optimize_ddp)."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    device = "cpu"
    if case.get("device") == "cuda":  # one GPU per rank, NCCL
        device = f"cuda:{rank}"
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=world)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        import torch_plugin
        from torch_plugin.capture import convert_frame

        torch_plugin.config.optimize_ddp = case.get("optimize_ddp", True)
        train_args = (case["bucket_cap_mb"], case["wrap"], device)
        eager = _train(rank, case["model"], None, *train_args)
        compiles = []
        records = []
        backend = torch_plugin.lookup_backend(case["backend"])

        def counting_backend(gm, example_inputs):
            compiles.append(len(gm.graph.nodes))
            return backend(gm, example_inputs)

        convert_frame.listeners.append(records.append)
        try:
            compiled = _train(rank, case["model"], counting_backend, *train_args)
        finally:
            convert_frame.listeners.remove(records.append)
        splits = [r.ddp_split for r in records if r.ddp_split is not None]
        result = {
            "rank": rank,
            "eager_losses": eager[0],
            "compiled_losses": compiled[0],
            "grad_diff": _max_diff(eager[1], compiled[1]),
            "param_diff": _max_diff(eager[2], compiled[2]),
            "buffer_diff": _max_diff(eager[3], compiled[3]),
            "param_change": eager[5],
            "eager_buckets": eager[4],
            "compiled_buckets": compiled[4],
            "backend_compiles": len(compiles),
            "frames_converted": len(records),
            "splits": [
                {
                    "not_split": s.not_split,
                    "num_buckets": s.num_buckets,
                    "subgraph_params": [sorted(sg.param_names) for sg in s.subgraphs],
                    "describe": s.describe(),
                }
                for s in splits
            ],
        }
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.barrier()  # no rank tears gloo down while another still communicates
        dist.destroy_process_group()


def _fsdp2_model(model_name: str, mesh):
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model, batch = MODELS[model_name]()
    layers = model.encoder.layer if model_name == "bert" else list(model)[:-1]
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, batch


def _fsdp2_train(rank: int, model_name: str, mesh, compiled: str | None, records: list):
    """Three optimizer steps under FSDP2; after each step, an evaluation call under no_grad
    (the compiled model's inference graphs read the freshly all-gathered weights)."""
    import torch_plugin

    model, batch = _fsdp2_model(model_name, mesh)
    runner = torch_plugin.optimize(compiled)(model) if compiled is not None else model
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses, evals, converted = [], [], []
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * step + rank)
        inputs = batch(g)
        loss = _output_tensor(runner(*inputs)).square().mean()
        loss.backward()
        losses.append(loss.item())
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            evals.append(_output_tensor(runner(*inputs)).detach().clone())
        converted.append(len(records))
    # The root's parameters may still be unsharded plain tensors after the last forward.
    params = {
        n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
        for n, p in model.named_parameters()
    }
    return losses, evals, params, converted, weakref.ref(model)


def run_fsdp2_case(rank: int, world: int, port: int, out_dir: str, case: dict) -> None:
    """One rank: FSDP2 (``fully_shard`` on each layer and the root) eager, then with
    torch_plugin's ``case["backend"]``; writes losses, evaluation outputs' and parameters'
    largest differences, and the frames converted."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        from torch.distributed.device_mesh import init_device_mesh

        from torch_plugin.capture import convert_frame

        mesh = init_device_mesh("cpu", (world,))
        records = []
        eager = _fsdp2_train(rank, case["model"], mesh, None, records)
        convert_frame.listeners.append(records.append)
        try:
            compiled = _fsdp2_train(rank, case["model"], mesh, case["backend"], records)
        finally:
            convert_frame.listeners.remove(records.append)
        # The compiled model (with its FSDP2 state and process-group references) must be
        # freed like the eager one once the program drops it: before, the compiled frames
        # kept it alive until exit, past destroy_process_group.
        gc.collect()
        gc.collect()
        models_alive = [eager[4]() is not None, compiled[4]() is not None]
        eval_diff = max((a - b).abs().max().item() for a, b in zip(eager[1], compiled[1]))
        result = {
            "rank": rank,
            "eager_losses": eager[0],
            "compiled_losses": compiled[0],
            "eval_diff": eval_diff,
            "param_diff": _max_diff(eager[2], compiled[2]),
            "frames": [r.code.co_qualname for r in records],
            "frames_converted_per_step": compiled[3],
            "graph_breaks": [r.graph_break[0] for r in records if r.graph_break is not None],
            "models_alive_after_use": models_alive,
        }
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.barrier()  # no rank tears gloo down while another still communicates
        dist.destroy_process_group()


def run_ddp_dynamic_case(rank: int, world: int, port: int, out_dir: str, case: dict) -> None:
    """One rank: an MLP under DDP called with five batch sizes (the graph turns dynamic after
    the second), compiled vs an eager DDP twin; writes the largest output/gradient
    difference and each compile's DDP split."""
    import copy

    import torch_plugin
    from torch_plugin.capture import convert_frame

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    device = torch.device("cpu")
    if case.get("device") == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=world)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        layers = [torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()) for _ in range(6)]
        model = torch.nn.Sequential(*layers, torch.nn.Linear(64, 4)).to(device)
        twin = copy.deepcopy(model)
        ddp = DDP(model, bucket_cap_mb=case["bucket_cap_mb"])
        ddp_twin = DDP(twin, bucket_cap_mb=case["bucket_cap_mb"])
        records: list = []
        convert_frame.listeners.append(records.append)
        worst = 0.0
        try:
            opt = torch_plugin.optimize(case["backend"])(ddp)
            for n in (8, 12, 16, 20, 24):
                g = torch.Generator().manual_seed(n + rank)
                x = torch.randn(n, 64, generator=g).to(device)
                got, want = opt(x), ddp_twin(x)
                got.square().mean().backward()
                want.square().mean().backward()
                worst = max(worst, (got - want).abs().max().item())
                for p, q in zip(model.parameters(), twin.parameters()):
                    worst = max(worst, (p.grad - q.grad).abs().max().item())
                    p.grad = q.grad = None
        finally:
            convert_frame.listeners.remove(records.append)
        result = {
            "worst": worst,
            "splits": [len(r.ddp_split.subgraphs) for r in records if r.ddp_split is not None],
            "graphs": torch_plugin.stats.graphs_compiled,
        }
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.barrier()
        dist.destroy_process_group()
