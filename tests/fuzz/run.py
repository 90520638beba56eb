"""Fuzz torch_plugin's capture with random programs, compared against eager PyTorch.

    python tests/fuzz/run.py --seed 0 --count 500 --backends eager,aot_eager,plugin
    python tests/fuzz/run.py --replay 1234                 # one program by its seed
    python tests/fuzz/run.py --count 200 --minimize        # shrink each failing program
    python tests/fuzz/run.py --only descriptors,numpy-scalars  # mostly these families
    python tests/fuzz/run.py --replay 249 --no-tensor-branches  # config.capture_tensor_branches off
    python tests/fuzz/run.py --frame global             # f() without parameters

Each program (tests/fuzz/program_gen/) runs three calls under eager PyTorch and under each
backend (tests/fuzz/differential.py compares results and every observable). For a mismatch
it prints the program's source, the first differing observable and, with --minimize, a
reduced program that still fails the same way. Mismatches are grouped at the end by
(backend, where, what) so one bug that many programs hit shows up once.

Run with the repository on PYTHONPATH (or torch_plugin installed); OMP_NUM_THREADS=1 keeps
it polite on a shared machine.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import differential
import program_gen

signature = differential.signature


def _fails_like(backend: str, sig: tuple):
    def pred(prog: program_gen.Program) -> bool:
        try:
            ms = program_gen.check_program(prog.source(), [backend], seed=prog.seed)
        except Exception:  # noqa: BLE001 - a harness crash is not the same failure
            return False
        return any(signature(m)[1:] == sig[1:] for m in ms)

    return pred


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seed", type=int, default=0, help="first program seed")
    ap.add_argument("--count", type=int, default=200, help="number of programs")
    ap.add_argument("--backends", default="eager,aot_eager,plugin")
    ap.add_argument("--replay", type=int, default=None, help="run only this program seed")
    ap.add_argument("--minimize", action="store_true", help="shrink each failing program")
    ap.add_argument(
        "--exclude",
        default="",
        help="comma-separated statement families to leave out (e.g. setitem,generator,"
        "autocast: known bugs), see program_gen.FEATURES",
    )
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated statement families to keep (all others excluded; the newer "
        "families then make up most statements), e.g. inplace-identity,descriptors",
    )
    ap.add_argument(
        "--tensor-branches",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="config.capture_tensor_branches on or off (a branch on a one-element tensor "
        "captured as a conditional in the graph, or a graph break); default: the config's",
    )
    ap.add_argument(
        "--frame",
        default=None,
        choices=program_gen.FRAMES,
        help="how f gets its inputs in every program: parameters (args) or none (global, "
        "closure: zero-argument frames); by default drawn, one program in four without",
    )
    ap.add_argument("--quiet", action="store_true", help="only the summary")
    ap.add_argument("--max-print", type=int, default=3, help="programs printed per mismatch class")
    args = ap.parse_args(argv)
    import torch_plugin

    # As in the test suite: a translator bug raises (a mismatch) instead of a logged warning
    # while the frame runs unmodified (which would compare equal to eager and hide it).
    torch_plugin.config.debug_raise_internal_errors = True
    torch_plugin.config.debug_check_pure = True
    if args.tensor_branches is not None:
        torch_plugin.config.capture_tensor_branches = args.tensor_branches
    backends = [b for b in args.backends.split(",") if b]
    exclude = [f for f in args.exclude.split(",") if f]
    only = [f for f in args.only.split(",") if f]
    if only:
        exclude += [f for f in program_gen.FEATURES if f not in only and f not in exclude]
    unknown = (set(exclude) | set(only)) - set(program_gen.FEATURES)
    if unknown:
        ap.error(f"unknown --exclude {sorted(unknown)}; known: {program_gen.FEATURES}")
    seeds = [args.replay] if args.replay is not None else range(args.seed, args.seed + args.count)

    classes: dict = collections.defaultdict(list)
    crashes = []
    t0 = time.time()
    for seed in seeds:
        prog = program_gen.generate(seed, exclude, args.frame)
        src = prog.source()
        try:
            mismatches = program_gen.check_program(src, backends, seed=seed)
        except Exception as e:  # noqa: BLE001 - report harness/compiler crashes, go on
            crashes.append((seed, f"{type(e).__name__}: {e}"))
            print(f"seed {seed}: CRASH {type(e).__name__}: {e}")
            continue
        for m in mismatches:
            sig = signature(m)
            classes[sig].append(seed)
            if args.quiet or len(classes[sig]) > args.max_print:
                continue
            print("=" * 100)
            print(f"seed {seed}: MISMATCH {m}")
            print("-" * 100)
            print(src.split("\n\n\ndef make")[1] if "\n\n\ndef make" in src else src)
            if args.minimize:
                small = program_gen.minimize(prog, _fails_like(m.backend, sig))
                ms = program_gen.check_program(small.source(), [m.backend], seed=seed)
                print(
                    f"--- minimized ({prog.n_statements()} -> {small.n_statements()} "
                    f"statements): {ms[0] if ms else '(passes now?)'}"
                )
                print("def make" + small.source().split("\n\n\ndef make")[1])
    dt = time.time() - t0
    n = len(seeds)
    print("=" * 100)
    print(f"{n} programs x backends {backends} in {dt:.1f} s ({dt / max(n, 1):.3f} s/program)")
    failing = {s for v in classes.values() for s in v}
    print(f"{len(failing)} programs mismatch; {len(crashes)} crashed")
    for sig, seeds_ in sorted(classes.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(seeds_):5d}  {sig}  e.g. seeds {seeds_[:6]}")
    for seed, msg in crashes[:20]:
        print(f"  CRASH seed {seed}: {msg[:200]}")
    return 1 if failing or crashes else 0


if __name__ == "__main__":
    sys.exit(main())
