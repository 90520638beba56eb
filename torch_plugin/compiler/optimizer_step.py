"""The optimizer step compiled by the "plugin" compiler (issue #30).

Capture ends a graph at a call of ``optimizer.step()`` (graph-break type "optimizer step")
and, when the backend offers one (:data:`torch_plugin.contract.OPTIMIZER_STEP`), runs the
backend's step in its place: :func:`run` here. It updates SGD (with or without momentum),
Adam and AdamW with multi-tensor kernels, and calls the optimizer's own ``step`` for
everything else (:func:`why_eager` says why, on ``torch_plugin.backends.plugin``).

*One launch per group.* The parameters that have a gradient are grouped by structure (which
terms the update has: weight decay, momentum, nesterov, decoupled decay, eager's foreach or
for-loop code), device and dtype (eager's foreach grouping); each group is one launch of a
multi-tensor kernel (:mod:`torch_plugin.compiler.multi_tensor`: PyTorch's
``multi_tensor_apply`` with the whole update fused, as its FusedAdam) that reads parameters,
gradients and state through a table of addresses and writes parameters and state in place
(their identity kept, their version counters moved as eager's in-place ops move them). The
kernel depends only on (structure, device, dtype): a new model, new shapes or a different
number of tensors reuse it; the table is rebuilt when an address moves.

*Hyperparameters are data.* Every number of the update (learning rate, betas, momentum,
dampening, weight decay, eps, and the bias corrections of each parameter's step count) is
read from the optimizer at each call, computed in double precision as eager computes it, and
passed as a ``[rows, k]`` float64 tensor, a row per param group and step count (on CUDA
through pinned memory and a non-blocking copy: no host synchronisation), so an LR scheduler
or a changed beta never recompiles and never meets a stale constant; which row each tensor
reads is in the table.

*State as eager keeps it.* Adam's ``step`` stays the CPU float32 tensor eager keeps and is
incremented in place by eager's own ``_foreach_add_``; its value is read on the host (a CPU
tensor: no device synchronisation) as eager's ``_get_value`` reads it. A parameter without
state yet (the first step) makes the whole call eager, which creates the state exactly as
eager does. A tensor the kernels cannot take (non-contiguous, state of another dtype or
shape, a dtype other than fp32/fp64/bf16/fp16) makes the call eager too.

Key parts: :func:`run` (the backend's step), :func:`why_eager`, :class:`StepCompiler`.
"""

from __future__ import annotations

import logging
import operator
import os
import weakref
from collections.abc import Callable
from typing import Any

import torch

from torch_plugin import _C
from torch_plugin.compiler import multi_tensor

log = logging.getLogger("torch_plugin.backends.plugin")

# Per optimizer: its kernels, one per (structure, device, dtype). At most MAX_GRAPHS each.
MAX_GRAPHS = 64
_compilers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Steps run compiled / run as eager in this process (tests read them).
counters = {"compiled_steps": 0, "eager_steps": 0, "graphs_compiled": 0}

_KINDS = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw"}


# The CUDA kernels of multi_tensor.py (NVRTC) are on by default since they passed the GPU
# tests on an H100 (test_optimizer_step.py, test_cuda_training_compiled.py: 90 cases);
# this environment variable set to "0" makes CUDA parameter groups take eager's step.
CUDA_KERNELS_ENV = "TORCH_PLUGIN_CUDA_OPTIMIZER_KERNELS"


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


def _why_eager_config(opt: Any, args: tuple, kwargs: dict) -> str | None:
    """Why the optimizer's own step runs, from its class, the call and its param groups'
    settings (the tensors are :meth:`StepCompiler.collect`'s)."""
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
    return None


def why_eager(opt: Any, args: tuple, kwargs: dict) -> str | None:
    """Why this call of ``opt.step(*args, **kwargs)`` runs the optimizer's own step; None
    when :func:`run` compiles it (the configuration, then each parameter's tensors)."""
    why = _why_eager_config(opt, args, kwargs)
    if why is None:
        found = StepCompiler(_KINDS[type(opt)]).collect(opt)
        why = found if isinstance(found, str) else None
    return why


def run(step: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``step(*args, **kwargs)``, where ``step`` is ``opt.step`` as the program read it: the
    compiled update for SGD, Adam and AdamW (see the module docstring), else ``step`` itself.
    Returns what the optimizer's step returns (None without a closure)."""
    opt, is_class_step = _optimizer_and_step(step)
    why = (
        "not an optimizer's own step" if not is_class_step else _why_eager_config(opt, args, kwargs)
    )
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
        if not _compiled_step(compiler, opt):
            counters["eager_steps"] += 1
            return step()
        opt._optimizer_step_code()
    counters["compiled_steps"] += 1
    return None


def _step_uncaptured(compiler: Any, opt: Any) -> bool:
    return compiler.step(opt)


# ``compiler.step(opt)`` with capture off on this thread: it runs inside the user's compiled
# frame, and what it calls back into user code (a logging handler of the user's, when it logs
# the kernels it compiles) is not the user's program to capture.
_compiled_step = _C.disable_wrapper(_step_uncaptured)


# --- the multi-tensor update ---------------------------------------------------------------


def _hyper_rows(kind: str, classes: list[tuple[dict, float | None]]) -> list[list[float]]:
    """One row of :data:`multi_tensor.COLUMNS` per (param group, step count): eager's Python
    arithmetic on the group's numbers, in double precision, read now."""
    rows = []
    for group, step in classes:
        if kind == "sgd":
            rows.append(
                [group["weight_decay"], group["momentum"], 1 - group["dampening"], -group["lr"]]
            )
            continue
        lr, (beta1, beta2), wd = group["lr"], group["betas"], group["weight_decay"]
        bias_correction1 = 1 - beta1**step
        bias_correction2 = 1 - beta2**step
        rows.append(
            [wd, 1 - lr * wd, 1 - beta1, beta2, 1 - beta2, bias_correction2**0.5, group["eps"],
             (lr / bias_correction1) * -1]
        )  # fmt: skip
    return rows


_PLAIN = (torch.Tensor, torch.nn.Parameter)  # no subclass (DTensor, FakeTensor)


class _Group:
    """The tensors of one (structure, device, dtype) group of one step."""

    __slots__ = ("addresses", "device", "dtype", "groups", "lists", "steps", "structure")

    def __init__(self, structure: tuple, device: torch.device, dtype: torch.dtype, n: int):
        self.structure, self.device, self.dtype = structure, device, dtype
        self.lists: list[list[torch.Tensor]] = [[] for _ in range(n)]
        self.groups: list[dict] = []  # each parameter's param group
        self.steps: list[torch.Tensor] = []  # Adam's step counts
        self.addresses: list[int] = []  # every tensor's, list by list (StepCompiler._check)


class StepCompiler:
    """The multi-tensor updates of one optimizer (``kind``: "sgd", "adam", "adamw"): one kernel
    per (structure, device, dtype) (:mod:`torch_plugin.compiler.multi_tensor`), one launch per
    group and step."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.mt_kind = "sgd" if kind == "sgd" else "adam"
        # (structure, device, dtype) -> (source, entry), or None: failed to compile.
        self.kernels: dict[Any, tuple[str, str] | None] = {}
        # (structure, device, dtype) -> the parameters, state and steps checked last (the
        # same objects), the parameters' numbers of elements and every tensor's address then.
        self.checked: dict[Any, tuple[list[torch.Tensor], list[int], list[int]]] = {}
        # (structure, device, dtype) -> (addresses, rows, table, blocks): the last table.
        self.tables: dict[Any, tuple[list[int], list[int], torch.Tensor, int]] = {}

    def step(self, opt: torch.optim.Optimizer) -> bool:
        """Update every parameter with a gradient; False (nothing changed) when the step must
        run as eager's (a kernel beyond :data:`MAX_GRAPHS` or failed to compile, a tensor the
        kernels do not take: :meth:`collect` says why)."""
        groups = self.collect(opt)
        if isinstance(groups, str):
            log.debug("plugin: optimizer step runs as eager: %s", groups)
            return False
        for key, g in groups.items():
            if key not in self.kernels:
                if len(self.kernels) >= MAX_GRAPHS:
                    log.info("plugin: optimizer step: %d kernels compiled; eager", MAX_GRAPHS)
                    return False
                self.kernels[key] = self._compile(g)
            if self.kernels[key] is None:  # failed to compile: eager's step, every time
                return False
        if self.kind != "sgd":  # eager's step increment, before the bias corrections
            steps = [s for g in groups.values() for s in g.steps]
            if steps:
                torch._foreach_add_(steps, torch.tensor(1.0, device="cpu"), alpha=1.0)
        for key, g in groups.items():
            self._run(key, g)
        return True

    def collect(self, opt: torch.optim.Optimizer) -> dict[Any, _Group] | str:
        """The parameters with gradients by (structure, device, dtype) with their gradients and
        state, or why the kernels cannot take them (a string): every tensor must be contiguous,
        of its parameter's dtype, device and number of elements."""
        from torch.optim.optimizer import _default_to_fused_or_foreach

        out: dict[Any, _Group] = {}
        sgd = self.kind == "sgd"
        for group in opt.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            # eager's foreach code or its for-loop (they round differently: below)
            foreach = group.get("foreach")
            if foreach is None:
                foreach = _default_to_fused_or_foreach(params, False, False)[1]
            if sgd:
                momentum, nesterov = group["momentum"] != 0, group["nesterov"]
                wd = group["weight_decay"] != 0
                # eager's foreach SGD adds the nesterov term to the gradients in place when
                # there is no weight decay (sgd.py _multi_tensor_sgd); its for-loop does not
                write_grad = bool(momentum and nesterov and not wd and foreach)
                structure = (wd, momentum, nesterov, write_grad, bool(foreach))
            else:
                decoupled = self.kind == "adamw" or group.get("decoupled_weight_decay", False)
                structure = (group["weight_decay"] != 0, bool(decoupled), bool(foreach))
            names = multi_tensor.lists_of(self.mt_kind, structure)[2:]
            states = [opt.state.get(p) for p in params]
            try:
                lists = [params, [p.grad for p in params]]
                lists += [[st[name] for st in states] for name in names]
                steps = [] if sgd else [st["step"] for st in states]
            except (KeyError, TypeError):  # TypeError: no state at all
                return "no state yet (the first step)"
            if any(t is None for ts in lists[2:] for t in ts):
                return "a state tensor is None (the first step)"
            where = [(p.device, p.dtype) for p in params]
            first = where[0]
            if all(w == first for w in where):  # one device and dtype: the usual case
                spans = [(first, range(len(params)))]
            else:
                spans = {}
                for i, w in enumerate(where):
                    spans.setdefault(w, []).append(i)
                spans = list(spans.items())
            for (device, dtype), idx in spans:
                key = (structure, device, dtype)
                g = out.get(key)
                if g is None:
                    g = out[key] = _Group(structure, device, dtype, len(lists))
                whole = isinstance(idx, range)
                for ts, new in zip(g.lists, lists):
                    ts.extend(new if whole else [new[i] for i in idx])
                g.groups.extend([group] * len(idx))
                if not sgd:
                    g.steps.extend(steps if whole else [steps[i] for i in idx])
        for key, g in out.items():
            why = self._check(key, g)
            if why is not None:
                return why
        return out

    def _check(self, key: Any, g: _Group) -> str | None:
        """Why the kernels cannot take a group's tensors, or None. Every tensor must be a plain
        contiguous tensor of its parameter's dtype, device and number of elements (the kernel
        reads them as flat arrays), Adam's step counts CPU tensors. The parameters, state and
        step counts that passed last time (the same objects, kept here, the parameters of the
        same sizes, every tensor at the same address: a ``.data`` swapped in moves it) are not
        checked again; the gradients are, at every step."""
        if g.device.type == "cuda" and os.environ.get(CUDA_KERNELS_ENV) == "0":
            return f"the CUDA multi-tensor kernels are turned off ({CUDA_KERNELS_ENV}=0)"
        grads = g.lists[1]
        try:
            if not all(type(t) in _PLAIN and t.is_contiguous() for t in grads):
                return "a non-contiguous gradient or a tensor subclass (DTensor under FSDP2)"
        except RuntimeError:  # a sparse gradient has no is_contiguous
            return "a sparse gradient"
        known = [t for ts in g.lists[:1] + g.lists[2:] for t in ts] + g.steps
        known_numels = [p.numel() for p in g.lists[0]]
        g.addresses = [t.data_ptr() for ts in g.lists for t in ts]
        n = len(grads)
        known_addresses = g.addresses[:n] + g.addresses[2 * n :]  # all but the gradients'
        last = self.checked.get(key)
        if (
            last is not None
            and len(last[0]) == len(known)
            and all(map(operator.is_, last[0], known))
            and last[1] == known_numels
            and last[2] == known_addresses
        ):
            return None
        if g.dtype not in multi_tensor.SUPPORTED_DTYPES:
            return f"parameters of dtype {g.dtype}"
        if g.device.type not in ("cpu", "cuda"):
            return f"parameters on {g.device}"
        for i, p in enumerate(g.lists[0]):
            n = p.numel()
            for ts in g.lists:
                t = ts[i]
                if not (
                    type(t) in _PLAIN
                    and t.is_contiguous()
                    and t.dtype == p.dtype
                    and t.device == p.device
                    and t.numel() == n
                ):
                    return "a non-contiguous tensor, or one of another dtype, device or size"
        for s in g.steps:
            if not isinstance(s, torch.Tensor) or s.device.type != "cpu":
                return "the step count is not a CPU tensor"
        self.checked[key] = (known, known_numels, known_addresses)
        return None

    def _compile(self, g: _Group) -> tuple[str, str] | None:
        """The kernel of a group's (structure, device, dtype), compiled (or loaded from the
        kernel cache); None when that fails (logged)."""
        target = "cuda" if g.device.type == "cuda" else "cpp"
        try:
            source, entry = multi_tensor.kernel_source(self.mt_kind, g.structure, g.dtype, target)
            k = len(multi_tensor.COLUMNS[self.mt_kind])
            multi_tensor.warm_up(source, entry, g.device, k, f"optimizer step ({self.kind})")
        except Exception as e:  # noqa: BLE001 - the optimizer's own step is correct
            log.warning("plugin: optimizer step not compiled (%s); eager", e)
            return None
        counters["graphs_compiled"] += 1
        log.info("plugin: optimizer step (%s) kernel for %s %s", self.kind, g.device, g.dtype)
        return source, entry

    def _run(self, key: Any, g: _Group) -> None:
        """One group's launch: its hyperparameter rows (one per param group and step count),
        its table (the last one when no address or row moved), the kernel; then the version
        counters of what it wrote move, as eager's in-place ops move them."""
        if self.kind == "sgd":
            step_values = [None] * len(g.groups)
        else:  # the counts after the increment, as eager's _get_value reads them
            step_values = torch.stack(g.steps).tolist() if len(g.steps) > 1 else [
                g.steps[0].item()]  # fmt: skip
        classes: dict[Any, int] = {}
        firsts: list[tuple[dict, float | None]] = []
        rows = []
        for group, step in zip(g.groups, step_values):
            cls = (id(group), step)
            r = classes.get(cls)
            if r is None:
                r = classes[cls] = len(firsts)
                firsts.append((group, step))
            rows.append(r)
        hyper = multi_tensor.to_device(
            torch.tensor(_hyper_rows(self.kind, firsts), dtype=torch.float64), g.device
        )
        addresses = g.addresses
        cached = self.tables.get(key)
        if cached is not None and cached[0] == addresses and cached[1] == rows:
            table, blocks = cached[2], cached[3]
        else:
            table = multi_tensor.build_table(g.lists, rows, g.device)
            blocks = len(multi_tensor.block_map([p.numel() for p in g.lists[0]],
                                                multi_tensor.chunk_of(g.device)))  # fmt: skip
            self.tables[key] = (addresses, rows, table, blocks)
        source, entry = self.kernels[key]
        multi_tensor.launch(source, entry, table, hyper, blocks, f"optimizer step ({self.kind})")
        written = list(g.lists[0])
        if self.kind == "sgd":
            if g.structure[3]:
                written += g.lists[1]
            if g.structure[1]:
                written += g.lists[2]
        else:
            written += g.lists[2] + g.lists[3]
        torch.autograd.graph.increment_version(written)
