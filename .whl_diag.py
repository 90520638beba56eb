# Device diagnostic (issue #30, helper bn30): is ResNet-18's bf16-autocast training mismatch a
# bug or bf16 rounding amplified by an ill-conditioned gradient?  Run from the repository root:
#     python3 .whl_diag.py            # all experiments, each in its own process (~2-3 min)
#     python3 .whl_diag.py one VARIANT FEATS [cpu]   # one experiment in this process
# VARIANT: mom (SGD momentum 0.9 + wd 1e-4, as the test) | nomom (plain SGD);
# FEATS: feats (the step also returns every block's activation, to find the first op that
# differs) | plain (the test's step). The batch-norm gate is lifted here (monkeypatched).
#
# Per step (state reset from eager after each step, as the test does) it prints:
#   loss eager/compiled; grads compiled-vs-eager (max, median of per-tensor max-rel errors);
#   COND: eager bf16 with parameters perturbed by 1e-6 relative vs eager bf16 (how far a change
#         far below bf16's resolution moves the gradients: the test's noise floor);
#   COND2: eager bf16 run channels-last (other cuDNN kernels, other rounding) vs eager bf16;
#   ORACLE: eager-bf16 vs fp32 and compiled-bf16 vs fp32 (same state, same inputs, no autocast);
#   DET: compiled run twice from the same state (bitwise?; feats runs, from step 1 on, so that
#        the first compiled optimizer step is at step 1 as in the test), eager run twice;
#   RULE: the noise-aware rule (Dynamo's AMP accuracy rule): per gradient, the RMS error against
#         fp32 of compiled at most 2x eager's + 1e-2; also applied to the perturbed eager run;
#   FEATS: the first activation (in program order) whose compiled value differs from eager's,
#          with how many elements differ and by how many bf16 ulps at most.
import copy
import os
import subprocess
import sys
import time

import torch


def _rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()


def _grad_errs(got, want):
    e = sorted(_rel(got[k], want[k]) for k in want)
    return e[-1], e[len(e) // 2]


def _rms_rel(a, o):
    a, o = a.double(), o.double()
    return ((a - o).square().mean().sqrt() / o.square().mean().sqrt().clamp_min(1e-30)).item()


def _oracle_rule(got, want, oracle):
    """Per tensor: RMS error of got and of want against the fp32 oracle (relative to the
    oracle's RMS); returns (worst got/want ratio, its tensor, count of tensors failing
    got <= 2 * want + 1e-2, median want error)."""
    rows = []
    for k in oracle:
        eg, ew = _rms_rel(got[k], oracle[k]), _rms_rel(want[k], oracle[k])
        rows.append((eg / max(ew, 1e-12), k, eg > 2 * ew + 1e-2, ew))
    rows.sort()
    ews = sorted(r[3] for r in rows)
    return rows[-1][0], rows[-1][1], sum(r[2] for r in rows), ews[len(ews) // 2]


def _ulps(a, b):
    """Elements that differ and the largest difference in units of a's dtype's spacing."""
    diff = a.float() != b.float()
    n = int(diff.sum())
    if n == 0:
        return 0, 0.0
    if a.dtype in (torch.bfloat16, torch.float16):
        spacing = torch.finfo(a.dtype).eps * b.float().abs().clamp_min(torch.finfo(a.dtype).tiny)
        return n, ((a.float() - b.float()).abs() / spacing).max().item()
    return n, (a.double() - b.double()).abs().max().item()


def _forward_feats(m, x):
    names, fs = [], []

    def keep(name, t):
        names.append(name)
        fs.append(t)

    x = m.conv1(x)
    keep("conv1", x)
    x = m.bn1(x)
    keep("bn1", x)
    x = m.maxpool(m.relu(x))
    for li, layer in enumerate((m.layer1, m.layer2, m.layer3, m.layer4), 1):
        for bi, blk in enumerate(layer):
            p = f"layer{li}.{bi}"
            idn = x
            y = blk.conv1(x)
            keep(p + ".conv1", y)
            y = blk.relu(blk.bn1(y))
            keep(p + ".bn1+relu", y)
            y = blk.conv2(y)
            keep(p + ".conv2", y)
            y = blk.bn2(y)
            keep(p + ".bn2", y)
            if blk.downsample is not None:
                idn = blk.downsample(x)
                keep(p + ".downsample", idn)
            x = blk.relu(y + idn)
            keep(p + ".out", x)
    x = torch.flatten(m.avgpool(x), 1)
    out = m.fc(x)
    keep("fc", out)
    return out, names, [f.detach() for f in fs]


def one(variant, feats, dev, N=4, H=32):
    import torch_plugin
    import torchvision
    from torch_plugin.compiler import optimizer_step, pipeline

    pipeline._unverified_cuda_training = lambda *a: None  # the gate, lifted
    if dev == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    else:
        torch.set_num_threads(1)
    torch_plugin.reset()
    torch.manual_seed(0)
    ref = torchvision.models.resnet18(weights=None, num_classes=10).to(dev).train()
    got, orc, pert = copy.deepcopy(ref), copy.deepcopy(ref), copy.deepcopy(ref)
    clast = copy.deepcopy(ref).to(memory_format=torch.channels_last)
    if variant == "mom":
        mk = lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4)  # noqa: E731
    else:
        mk = lambda p: torch.optim.SGD(p, lr=0.05)  # noqa: E731
    o_ref, o_got = mk(ref.parameters()), mk(got.parameters())
    scheds = [torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5) for o in (o_ref, o_got)]
    names_box = []

    def record(m):
        grads = {}
        for name, p in m.named_parameters():
            hook = torch_plugin.disable(lambda q, name=name: grads.__setitem__(name, q.grad.clone()))
            p.register_post_accumulate_grad_hook(hook)
        return grads

    g_ref, g_got = record(ref), record(got)

    def make_step(model, opt, bf16=True, with_opt=True):
        def step(x, target):
            with torch.autocast(dev, torch.bfloat16, enabled=bf16):
                if feats:
                    out, names, fs = _forward_feats(model, x)
                else:
                    out, names, fs = model(x), None, None
            loss = torch.nn.functional.cross_entropy(out.float(), target)
            loss.backward()
            if with_opt:
                opt.step()
                opt.zero_grad()
            return loss, names, fs

        return step

    eager_step = make_step(ref, o_ref)
    compiled_step = torch_plugin.optimize(make_step(got, o_got), backend="plugin")
    orc_step = make_step(orc, None, bf16=False, with_opt=False)
    pert_step = make_step(pert, None, with_opt=False)
    clast_step = make_step(clast, None, with_opt=False)

    def snapshot(model, opt):
        return (
            [p.detach().clone() for p in model.parameters()],
            [b.clone() for b in model.buffers()],
            {i: {k: v.clone() for k, v in opt.state[p].items()} for i, p in enumerate(model.parameters())},
        )

    @torch.no_grad()
    def restore(model, opt, snap, scale=None):
        ps, bs, st = snap
        for i, (p, v) in enumerate(zip(model.parameters(), ps)):
            p.copy_(v if scale is None else v * (1 + scale * torch.randn_like(v)))
            if opt is not None:
                if not st[i]:
                    opt.state.pop(p, None)  # no state yet (before the first step)
                for k, s in st[i].items():
                    opt.state[p][k].copy_(s)
        for b, v in zip(model.buffers(), bs):
            b.copy_(v)

    def grads_of(model):
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    def bitwise(a, b):
        return all(torch.equal(a[k], b[k]) for k in a)

    print(f"== variant {variant} feats {feats} device {dev} batch {N} size {H} "
          f"CUDA_LAUNCH_BLOCKING={os.environ.get('CUDA_LAUNCH_BLOCKING')}", flush=True)
    for step in range(4):
        torch.manual_seed(100 + step)
        x = torch.randn(N, 3, H, H, device=dev)
        t = torch.randint(0, 10, (N,), device=dev)
        S = snapshot(ref, o_ref)
        # oracle (fp32, no autocast) and perturbed eager bf16, from S; gradients only
        restore(orc, None, S)
        orc.zero_grad()
        l_o, _, f_o = orc_step(x, t)
        gr_o = grads_of(orc)
        torch.manual_seed(7)
        restore(pert, None, S, scale=1e-6)
        pert.zero_grad()
        l_p, _, _ = pert_step(x, t)
        gr_p = grads_of(pert)
        restore(clast, None, S)
        clast.zero_grad()
        l_cl, _, _ = clast_step(x.contiguous(memory_format=torch.channels_last), t)
        gr_cl = grads_of(clast)
        # eager twice from S (the second leaves ref where eager's step leaves it)
        g_ref.clear()
        l_r1, names, f_r1 = eager_step(x, t)
        gr_r1 = dict(g_ref)
        restore(ref, o_ref, S)
        g_ref.clear()
        l_r, names, f_r = eager_step(x, t)
        gr_r = dict(g_ref)
        # compiled twice from S (got was reset to S after the previous step)
        c0 = torch_plugin.stats.graphs_compiled
        e0 = pipeline.counters["eager_graphs"]
        s0 = optimizer_step.counters["compiled_steps"]
        Sg = snapshot(got, o_got)
        g_got.clear()
        l_g, _, f_g = compiled_step(x, t)
        gr_g = dict(g_got)
        if dev == "cuda":
            torch.cuda.synchronize()
        det = feats and step >= 1  # from step 1: the first compiled optimizer call stays run A's
        if det:
            restore(got, o_got, Sg)
            g_got.clear()
            l_g2, _, f_g2 = compiled_step(x, t)
            gr_g2 = dict(g_got)
        else:
            l_g2, f_g2, gr_g2 = l_g, f_g, gr_g
        gm, gmed = _grad_errs(gr_g, gr_r)
        cm, cmed = _grad_errs(gr_p, gr_r)
        clm, clmed = _grad_errs(gr_cl, gr_r)
        om_e, omed_e = _grad_errs(gr_r, gr_o)
        om_c, omed_c = _grad_errs(gr_g, gr_o)
        rule = _oracle_rule(gr_g, gr_r, gr_o)
        rule_p = _oracle_rule(gr_p, gr_r, gr_o)
        print(
            f"step {step}: graphs +{torch_plugin.stats.graphs_compiled - c0} eager_graphs "
            f"+{pipeline.counters['eager_graphs'] - e0} opt_compiled +{optimizer_step.counters['compiled_steps'] - s0}"
            f" | loss eager {l_r.item():.6f} compiled {l_g.item():.6f} (2nd {l_g2.item():.6f})"
            f" perturbed {l_p.item():.6f} fp32 {l_o.item():.6f}\n"
            f"   grads compiled-vs-eager max {gm:.3g} median {gmed:.3g}"
            f" | COND perturbed(1e-6)-vs-eager max {cm:.3g} median {cmed:.3g}"
            f" | COND2 eager channels_last-vs-eager loss {l_cl.item():.6f} grads max {clm:.3g} median {clmed:.3g}\n"
            f"   ORACLE vs fp32: eager-bf16 max {om_e:.3g} median {omed_e:.3g};"
            f" compiled-bf16 max {om_c:.3g} median {omed_c:.3g}\n"
            f"   RULE (rms vs fp32, compiled <= 2*eager + 1e-2): worst ratio {rule[0]:.3g} ({rule[1]}),"
            f" {rule[2]} tensors fail; eager's median rms error {rule[3]:.3g};"
            f" perturbed-eager as 'compiled': worst {rule_p[0]:.3g}, {rule_p[2]} fail\n"
            f"   DET{'' if det else ' (not run)'} compiled twice bitwise: loss {torch.equal(l_g, l_g2)} grads {bitwise(gr_g, gr_g2)}"
            f" (max {_grad_errs(gr_g2, gr_g)[0]:.3g}) | eager twice bitwise: loss {torch.equal(l_r, l_r1)}"
            f" grads {bitwise(gr_r, gr_r1)} (max {_grad_errs(gr_r1, gr_r)[0]:.3g})",
            flush=True,
        )
        if feats:
            for label, fa, fb in (("compiled-vs-eager", f_g, f_r), ("compiled2-vs-compiled", f_g2, f_g),
                                  ("eager2-vs-eager", f_r1, f_r)):
                diffs = [(n, *_ulps(a, b), a.numel(), a.dtype) for n, a, b in zip(names, fa, fb)]
                first = next((d for d in diffs if d[1]), None)
                ndiff = sum(1 for d in diffs if d[1])
                print(f"   FEATS {label}: {ndiff}/{len(diffs)} activations differ; first "
                      + (f"{first[0]} ({first[1]}/{first[3]} elements, max {first[2]:.3g} ulps, {first[4]})"
                         if first else "none"), flush=True)
                if label == "compiled-vs-eager":
                    print("     " + "; ".join(f"{d[0]} {d[1]}/{d[3]} {d[2]:.2g}" for d in diffs if d[1])[:1500])
        # every step starts from eager's state (as the test)
        with torch.no_grad():
            for p, q in zip(ref.parameters(), got.parameters()):
                q.copy_(p)
                for k, v in o_ref.state[p].items():
                    o_got.state[q][k].copy_(v)
            for b, c in zip(ref.buffers(), got.buffers()):
                c.copy_(b)
        for s in scheds:
            s.step()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "one":
        one(sys.argv[2], sys.argv[3] == "feats", sys.argv[4] if len(sys.argv) > 4 else "cuda",
            *(int(a) for a in sys.argv[5:7]))
        sys.exit(0)
    runs = [
        ({}, "mom", "plain", ()),
        ({}, "mom", "feats", ()),
        ({"CUDA_LAUNCH_BLOCKING": "1"}, "mom", "plain", ()),
        ({}, "nomom", "plain", ()),
        ({}, "mom", "plain", ("16", "64")),
    ]
    for env, variant, feats, size in runs:
        t0 = time.time()
        r = subprocess.run(
            [sys.executable, __file__, "one", variant, feats, os.environ.get("DIAG_DEVICE", "cuda"), *size],
            env={**os.environ, **env}, capture_output=True, text=True, timeout=240,
        )
        out = [ln for ln in (r.stdout + r.stderr).splitlines()
               if not any(w in ln for w in ("Warning", "Overriding", "operator:", "registered at",
                                            "dispatch key", "previous kernel", "new kernel", "self.m.impl"))]
        print("\n".join(out[-60:]))
        print(f"-- rc {r.returncode}, {time.time() - t0:.0f} s", flush=True)
