"""The optimizer step compiled by the "plugin" compiler (issue #30).

Capture ends a graph at a call of ``optimizer.step()`` (graph-break type "optimizer step")
and, when the backend offers one (:data:`torch_plugin.contract.OPTIMIZER_STEP`), runs the
backend's step in its place: :func:`run` here. It updates SGD (with or without momentum),
Adam and AdamW through graphs compiled by the plugin compiler, and calls the optimizer's own
``step`` for everything else (:func:`why_eager` says why, on ``torch_plugin.backends.plugin``).

*One graph per (device, dtype) group.* The parameters that have a gradient are grouped by
device and dtype (eager's foreach grouping), a group split into chunks whose new tensors stay
within :data:`CHUNK_BYTES`; each chunk's update is one ATen graph, traced
from :func:`_sgd_update` / :func:`_adam_update` (the math of PyTorch's foreach and for-loop
implementations, written per tensor so that the fusion pass makes one kernel of each
parameter's whole update) and compiled by :func:`torch_plugin.compiler.stages.compile_graph`.
The graph is functional: it returns the new parameters and state, which one
``torch._foreach_copy_`` per list writes back (parameters and state keep their identity and
their version counters move, as eager's in-place update does).

*Hyperparameters are tensor inputs.* Every number of the update (learning rate, betas,
momentum, dampening, weight decay, eps, and the bias corrections of each parameter's step
count) is read from the optimizer at each call and passed as one ``[rows, k]`` float32
tensor, a row per param group and step count, each row read once in the graph (on CUDA through pinned memory and a non-blocking copy: no host synchronisation), so an LR
scheduler or a changed beta never recompiles and never meets a stale constant. What changes
the graph's structure (which terms exist: weight decay on or off, momentum, nesterov,
decoupled decay; the tensors' sizes, strides and dtypes) is the cache key.

*State as eager keeps it.* Adam's ``step`` stays the CPU float32 tensor eager keeps and is
incremented in place by eager's own ``_foreach_add_``; its bias corrections are computed on
the host in double precision as eager computes them. A parameter without state yet (the first
step) makes the whole call eager, which creates the state exactly as eager does.

Key parts: :func:`run` (the backend's step), :func:`why_eager`, :class:`StepCompiler`.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any

import torch

log = logging.getLogger("torch_plugin.backends.plugin")

# Per optimizer: its compiled group updates, by cache key. At most MAX_GRAPHS keys each.
MAX_GRAPHS = 64
# The most bytes of new parameters and state one update graph returns (they live until
# written back): larger groups are split into chunks, compiled and run one after the other,
# so the step's transient memory stays near this whatever the model's size.
CHUNK_BYTES = 256 << 20
_compilers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Steps run compiled / run as eager in this process (tests read them).
counters = {"compiled_steps": 0, "eager_steps": 0, "graphs_compiled": 0}

_KINDS = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw"}


def _optimizer_and_step(step: Callable[..., Any]) -> tuple[Any, bool]:
    """The optimizer behind ``step`` (``opt.step`` as the program reads it) and whether
    calling ``step`` is the optimizer's class ``step`` (possibly through an LR scheduler's
    counting wrapper); (None, False) otherwise."""
    func = getattr(step, "__func__", step)
    opt = getattr(step, "__self__", None)
    if getattr(func, "_wrapped_by_lr_sched", False):
        # LRScheduler's patch_track_step_called: a function on the instance that sets
        # opt._opt_called and calls the class's step.
        cells = dict(zip(func.__code__.co_freevars, func.__closure__ or ()))
        ref = cells.get("opt_ref")
        inner = cells.get("func")
        opt = ref.cell_contents() if ref is not None else None
        if opt is None or inner is None or inner.cell_contents is not type(opt).step:
            return None, False
        return opt, True
    if opt is None or func is not getattr(type(opt), "step", None):
        return None, False
    return opt, True


def why_eager(opt: Any, args: tuple, kwargs: dict) -> str | None:
    """Why this call of ``opt.step(*args, **kwargs)`` runs the optimizer's own step; None
    when :func:`run` compiles it."""
    from torch.optim import optimizer as optim_mod

    kind = _KINDS.get(type(opt))
    if kind is None:
        return f"{type(opt).__name__} is not SGD, Adam or AdamW"
    if args or kwargs:
        return "step() got arguments (a closure)"
    if (
        opt._optimizer_step_pre_hooks
        or opt._optimizer_step_post_hooks
        or optim_mod._global_optimizer_pre_hooks
        or optim_mod._global_optimizer_post_hooks
    ):
        return "the optimizer has step hooks"
    for group in opt.param_groups:
        for flag in ("fused", "capturable", "differentiable", "maximize", "amsgrad"):
            if group.get(flag):
                return f"{flag}=True"
        for name in ("lr", "momentum", "dampening", "weight_decay", "eps"):
            if isinstance(group.get(name), torch.Tensor):
                return f"{name} is a tensor"
        if any(isinstance(b, torch.Tensor) for b in group.get("betas", ())):
            return "betas are tensors"
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse or p.is_complex() or p.grad.dtype != p.dtype:
                return "a sparse or complex gradient, or one of another dtype"
            if type(p.grad) is not torch.Tensor or type(p.detach()) is not torch.Tensor:
                return "a tensor subclass (DTensor under FSDP2)"
            if p.grad.device != p.device or p.device.type not in ("cpu", "cuda"):
                return "a parameter off cpu/cuda or its gradient on another device"
            state = opt.state.get(p)
            if kind == "sgd":
                if group["momentum"] != 0 and (state is None or "momentum_buffer" not in state):
                    return "no momentum buffer yet (the first step)"
            else:
                if not state or "exp_avg" not in state:
                    return "no state yet (the first step)"
                step = state["step"]
                if not isinstance(step, torch.Tensor) or step.device.type != "cpu":
                    return "the step count is not a CPU tensor"
    return None


def run(step: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``step(*args, **kwargs)``, where ``step`` is ``opt.step`` as the program read it: the
    compiled update for SGD, Adam and AdamW (see the module docstring), else ``step`` itself.
    Returns what the optimizer's step returns (None without a closure)."""
    opt, is_class_step = _optimizer_and_step(step)
    why = "not an optimizer's own step" if not is_class_step else why_eager(opt, args, kwargs)
    if why is not None:
        log.debug("plugin: optimizer step runs as eager: %s", why)
        counters["eager_steps"] += 1
        return step(*args, **kwargs)
    if getattr(getattr(step, "__func__", step), "_wrapped_by_lr_sched", False):
        opt._opt_called = True  # what the scheduler's wrapper does
    compiler = _compilers.get(opt)
    if compiler is None:
        compiler = _compilers[opt] = StepCompiler(_KINDS[type(opt)])
    profile_name = f"Optimizer.step#{type(opt).__name__}.step"
    with torch.autograd.profiler.record_function(profile_name), torch.no_grad():
        if not compiler.step(opt):
            counters["eager_steps"] += 1
            return step()
        opt._optimizer_step_code()
    counters["compiled_steps"] += 1
    return None


# --- the update graphs: one parameter's math, as eager's foreach and for-loop code -------
# Columns of the hyperparameter tensor, per kind.
_SGD_COLUMNS = ("weight_decay", "momentum", "one_minus_dampening", "neg_lr")
_ADAM_COLUMNS = (
    "weight_decay", "decay_factor", "one_minus_beta1", "beta2", "one_minus_beta2",
    "bias_correction2_sqrt", "eps", "neg_step_size",
)  # fmt: skip


def _columns(hyper, row_of, k):
    """Each parameter's hyperparameters as 0-dim tensors: ``row_of[i]`` is parameter ``i``'s
    row of ``hyper``; each distinct row is read (one select per column) once."""
    rows = {}
    for r in row_of:
        if r not in rows:
            row = hyper[r]
            rows[r] = [row[j] for j in range(k)]
    return [rows[r] for r in row_of]


def _sgd_update(params, grads, bufs, hyper, structure, row_of):
    """SGD (torch.optim.sgd): new parameters and momentum buffers."""
    weight_decay, momentum, nesterov = structure
    new_params, new_bufs = [], []
    columns = _columns(hyper, row_of, len(_SGD_COLUMNS))
    for i, (p, g) in enumerate(zip(params, grads)):
        h = columns[i]
        if weight_decay:
            g = g + h[0] * p  # grad.add(param, alpha=weight_decay)
        if momentum:
            buf = bufs[i] * h[1] + h[2] * g  # buf.mul_(momentum).add_(grad, alpha=1-dampening)
            new_bufs.append(buf)
            g = g + h[1] * buf if nesterov else buf
        new_params.append(p + h[3] * g)  # param.add_(grad, alpha=-lr)
    return new_params + new_bufs


def _adam_update(params, grads, exp_avgs, exp_avg_sqs, hyper, structure, row_of):
    """Adam and AdamW (torch.optim.adam, amsgrad and maximize off): new parameters, first
    and second moments."""
    weight_decay, decoupled = structure
    out_p, out_m, out_v = [], [], []
    columns = _columns(hyper, row_of, len(_ADAM_COLUMNS))
    for i, (p, g) in enumerate(zip(params, grads)):
        h = columns[i]
        if weight_decay:
            if decoupled:
                p = p * h[1]  # param.mul_(1 - lr * weight_decay)
            else:
                g = g + h[0] * p  # grad.add(param, alpha=weight_decay)
        m = torch.lerp(exp_avgs[i], g, h[2])
        v = exp_avg_sqs[i] * h[3] + (h[4] * g) * g  # mul_(beta2).addcmul_(g, g, 1-beta2)
        denom = torch.sqrt(v) / h[5] + h[6]
        out_p.append(p + (h[7] * m) / denom)  # param.addcdiv_(m, denom, value=-step_size)
        out_m.append(m)
        out_v.append(v)
    return out_p + out_m + out_v


class StepCompiler:
    """The compiled group updates of one optimizer (``kind``: "sgd", "adam", "adamw")."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.graphs: dict[Any, Callable[[list[torch.Tensor]], Any] | None] = {}  # None: failed

    def step(self, opt: torch.optim.Optimizer) -> bool:
        """Update every parameter with a gradient; False (nothing changed) when a group would
        need a graph beyond :data:`MAX_GRAPHS` (the caller then runs eager's step)."""
        groups = self._groups(opt)
        graphs = []
        for key, plan in groups.items():
            if key not in self.graphs:
                if len(self.graphs) >= MAX_GRAPHS:
                    log.info("plugin: optimizer step: %d graphs compiled; eager", MAX_GRAPHS)
                    return False
                try:
                    graph = self._compile(plan)
                except Exception as e:  # noqa: BLE001 - the optimizer's own step is correct
                    log.warning("plugin: optimizer step not compiled (%s); eager", e)
                    graph = None
                self.graphs[key] = graph
            graph = self.graphs[key]
            if graph is None:  # this key failed to compile: eager's step, every time
                return False
            graphs.append((graph, plan))
        if self.kind != "sgd":  # eager's step increment, before the bias corrections
            steps = [s for _, plan in graphs for s in plan["steps"]]
            if steps:
                torch._foreach_add_(steps, torch.tensor(1.0, device="cpu"), alpha=1.0)
        for graph, plan in graphs:
            hyper = self._hyper(plan)
            outs = graph([*plan["inputs"], hyper])
            targets = plan["targets"]
            torch._foreach_copy_(targets, list(outs)[: len(targets)])
        return True

    def _groups(self, opt: torch.optim.Optimizer) -> dict[Any, dict[str, Any]]:
        """The parameters with gradients by (structure, device, dtype): each group's tensors,
        hyperparameter rows and cache key."""
        out: dict[Any, dict[str, Any]] = {}
        for group in opt.param_groups:
            if self.kind == "sgd":
                structure = (group["weight_decay"] != 0, group["momentum"] != 0, group["nesterov"])
            else:
                decoupled = self.kind == "adamw" or group.get("decoupled_weight_decay", False)
                structure = (group["weight_decay"] != 0, bool(decoupled))
            for p in group["params"]:
                if p.grad is None:
                    continue
                # A chunk of a (structure, device, dtype) group: its outputs, new tensors
                # until written back, stay within CHUNK_BYTES (beyond one parameter's).
                new_bytes = p.numel() * p.element_size() * self._outputs_per_param(structure)
                chunks = out.setdefault((structure, p.device, p.dtype), [])
                if not chunks or chunks[-1]["bytes"] + new_bytes > CHUNK_BYTES:
                    chunks.append({"structure": structure, "device": p.device, "steps": [],
                                   "groups": [], "bytes": 0})  # fmt: skip
                chunks[-1]["groups"].append((group, p))
                chunks[-1]["bytes"] += new_bytes
        plans = {}
        for k, chunks in out.items():
            for i, plan in enumerate(chunks):
                self._fill(opt, plan)
                plans[(k, i, plan["key"])] = plan
        return plans

    def _outputs_per_param(self, structure: tuple) -> int:
        if self.kind == "sgd":
            return 2 if structure[1] else 1  # the parameter, its momentum buffer
        return 3  # the parameter, exp_avg, exp_avg_sq

    def _fill(self, opt: torch.optim.Optimizer, plan: dict[str, Any]) -> None:
        params = [p for _, p in plan["groups"]]
        grads = [p.grad for p in params]
        if self.kind == "sgd":
            bufs = [opt.state[p]["momentum_buffer"] for p in params] if plan["structure"][1] else []
            lists = [params, grads, bufs]
            plan["targets"] = params + bufs
        else:
            m = [opt.state[p]["exp_avg"] for p in params]
            v = [opt.state[p]["exp_avg_sq"] for p in params]
            plan["steps"] = [opt.state[p]["step"] for p in params]
            lists = [params, grads, m, v]
            plan["targets"] = params + m + v
        plan["lists"] = lists
        plan["inputs"] = [t for ts in lists for t in ts]
        # One hyperparameter row per param group (and, for Adam, per step count: parameters
        # of one group normally step together); which row each parameter reads is part of
        # the graph, so it is part of the key. The step counts are read before they are
        # incremented: all move by one, so the rows' classes are the same after.
        classes: dict[Any, int] = {}
        row_of = []
        firsts = []
        for i, (group, _) in enumerate(plan["groups"]):
            cls = (id(group), plan["steps"][i].item() if plan["steps"] else None)
            if cls not in classes:
                classes[cls] = len(classes)
                firsts.append(i)
            row_of.append(classes[cls])
        plan["row_of"] = tuple(row_of)
        plan["row_firsts"] = firsts  # the parameter whose group and step give each row
        plan["key"] = (
            tuple(len(ts) for ts in lists),
            plan["row_of"],
            tuple((tuple(t.shape), t.stride(), t.dtype) for t in plan["inputs"]),
        )

    def _hyper(self, plan: dict[str, Any]) -> torch.Tensor:
        """The ``[rows, k]`` float32 hyperparameters of a group, on its device (eager's Python
        arithmetic, in double precision, read now): one row per (param group, step count)."""
        rows = []
        firsts = plan["row_firsts"]
        if self.kind == "sgd":
            for group, _ in (plan["groups"][i] for i in firsts):
                rows.append(
                    [group["weight_decay"], group["momentum"], 1 - group["dampening"],
                     -group["lr"]]
                )  # fmt: skip
        else:
            for (group, _), step_t in ((plan["groups"][i], plan["steps"][i]) for i in firsts):
                lr, (beta1, beta2), wd = group["lr"], group["betas"], group["weight_decay"]
                step = step_t.item()  # a CPU tensor: no device synchronisation
                bias_correction1 = 1 - beta1**step
                bias_correction2 = 1 - beta2**step
                rows.append(
                    [wd, 1 - lr * wd, 1 - beta1, beta2, 1 - beta2, bias_correction2**0.5,
                     group["eps"], (lr / bias_correction1) * -1]
                )  # fmt: skip
        hyper = torch.tensor(rows, dtype=torch.float32)
        device = plan["device"]
        if device.type == "cuda":
            return hyper.pin_memory().to(device, non_blocking=True)
        return hyper

    def _compile(self, plan: dict[str, Any]) -> Callable[[list[torch.Tensor]], Any]:
        """One group's update, traced to an ATen graph and compiled by the plugin compiler."""
        from torch.fx.experimental.proxy_tensor import make_fx

        from torch_plugin import _C
        from torch_plugin.compiler import options as options_mod
        from torch_plugin.compiler import stages
        from torch_plugin.compiler.decompositions import decomposition_table

        sizes = [len(ts) for ts in plan["lists"]]
        structure = plan["structure"]
        update = _sgd_update if self.kind == "sgd" else _adam_update

        def flat(*tensors):
            lists, pos = [], 0
            for n in sizes:
                lists.append(list(tensors[pos : pos + n]))
                pos += n
            return update(*lists, tensors[pos], structure, plan["row_of"])

        columns = len(_SGD_COLUMNS if self.kind == "sgd" else _ADAM_COLUMNS)
        example_hyper = torch.zeros(len(plan["row_firsts"]), columns, device=plan["device"])
        with torch.no_grad():
            gm = make_fx(flat, decomposition_table(), tracing_mode="fake")(
                *plan["inputs"], example_hyper
            )
        counters["graphs_compiled"] += 1
        log.info(
            "plugin: optimizer step (%s) compiled for %d tensors on %s",
            self.kind, sizes[0], plan["device"],
        )  # fmt: skip
        # No CUDA graph: its runner would hold static copies of every output and return clones
        # of them (the step's memory twice over), for launches the step makes once.
        with options_mod.overridden({"cuda_graphs": False}):
            compiled = _C.disable_wrapper(stages.compile_graph)(gm)
        return compiled
