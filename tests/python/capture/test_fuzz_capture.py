"""Random programs (tests/fuzz/program_gen/) under capture must behave as in eager PyTorch.

Fixed seeds 0..1999, four calls each (compile, cached, recompile, second recompile), every
observable compared (tests/fuzz/differential.py). Backends, to keep the default run near
four minutes on a 2-core machine:

- "eager" on all 2,000 programs;
- "aot_eager" on every 10th program (200): AOTAutograd costs ~0.2 s per graph;
- "plugin" on every 20th program (100): it also generates and compiles C++ kernels
  (cached on disk by source, so later runs are faster).

One program in four has a function without parameters (program_gen.FRAMES);
test_fuzz_zero_argument_frames runs 30 of each such form.

Statement families that still hit a known bug (KNOWN_BUGS) are left out of these programs;
test_fuzz_family runs each newer family (program_gen.NEW_FAMILIES) on its own, 30 programs.

The long tests (TORCH_PLUGIN_FUZZ_LONG=1) run "aot_eager" and "plugin" on all 2,000 and
"inductor" on every 10th. A failure lists each mismatch class with one program's source; reproduce and shrink
one with ``python tests/fuzz/run.py --replay SEED --backends NAME --minimize``.
"""

import collections
import os

import program_gen
import pytest
from differential import signature

N_PROGRAMS = 2000
CHUNK = 500

# Statement families (program_gen.NEW_FAMILIES) that still find a known capture bug on the
# committed code: left out of the programs here (program_gen then makes exactly the programs
# it made before those families existed) and expected to fail in test_fuzz_family. Delete an
# entry once its bug is fixed.
KNOWN_BUGS: dict[str, str] = {
    # none today: the five families' bugs (in-place identity, descriptors, tensor attributes,
    # attributes on NamedTuple subclasses, NumPy scalars) were fixed for issue #25
}
EXCLUDE = tuple(KNOWN_BUGS)


def _run(seeds, backends_for, exclude=EXCLUDE, frame=None):
    classes = collections.defaultdict(list)
    examples = {}
    for seed in seeds:
        backends = backends_for(seed)
        if not backends:
            continue
        src = program_gen.generate(seed, exclude, frame).source()
        try:
            mismatches = program_gen.check_program(src, backends, seed=seed)
        except Exception as e:  # noqa: BLE001 - a harness crash is reported like a mismatch
            classes[("harness", type(e).__name__, str(e)[:80])].append(seed)
            examples.setdefault(("harness", type(e).__name__, str(e)[:80]), (seed, str(e), src))
            continue
        for m in mismatches:
            sig = signature(m)
            classes[sig].append(seed)
            examples.setdefault(sig, (seed, str(m), src))
    if classes:
        lines = [f"{sum(map(len, classes.values()))} mismatches in {len(classes)} classes:"]
        for sig, seeds_ in sorted(classes.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"  {len(seeds_):4d} x {sig} seeds {seeds_[:8]}")
        for sig, (seed, msg, src) in list(examples.items())[:5]:
            body = src.split("\n\n\ndef make")[1]
            lines += ["", f"seed {seed}: {msg}", "def make" + body]
        pytest.fail("\n".join(lines), pytrace=False)


def _default_backends(seed):
    backends = ["eager"]
    if seed % 10 == 0:
        backends.append("aot_eager")
    if seed % 20 == 0:
        backends.append("plugin")
    return backends


@pytest.mark.parametrize("start", range(0, N_PROGRAMS, CHUNK))
def test_fuzz_programs(fresh_capture, start):
    _run(range(start, start + CHUNK), _default_backends)


# The long runs take 20-30 minutes on 2 cores: opt in with TORCH_PLUGIN_FUZZ_LONG=1 (or run
# tests/fuzz/run.py), so the default test run (CI) stays well under 30 minutes.
LONG = pytest.mark.skipif(
    os.environ.get("TORCH_PLUGIN_FUZZ_LONG") != "1",
    reason="long fuzz run: set TORCH_PLUGIN_FUZZ_LONG=1 (or use tests/fuzz/run.py)",
)


@pytest.mark.slow
@LONG
@pytest.mark.parametrize("start", range(0, N_PROGRAMS, CHUNK))
def test_fuzz_programs_all_backends(fresh_capture, start):
    _run(range(start, start + CHUNK), lambda seed: ["aot_eager", "plugin"])


@pytest.mark.slow
@LONG
def test_fuzz_programs_inductor(fresh_capture):
    _run(range(0, N_PROGRAMS, 10), lambda seed: ["inductor"])


# Each newer family on its own (program_gen then draws most statements from it): 30 short
# programs, "eager" on all and "aot_eager" on every 5th, a few seconds per family.
FAMILY_SEEDS = range(30)


@pytest.mark.parametrize(
    "family",
    [
        pytest.param(f, marks=pytest.mark.xfail(reason=KNOWN_BUGS[f], strict=False))
        if f in KNOWN_BUGS
        else f
        for f in program_gen.NEW_FAMILIES
    ],
)
def test_fuzz_family(fresh_capture, family):
    others = tuple(f for f in program_gen.FEATURES if f != family)
    _run(FAMILY_SEEDS, lambda seed: ["eager"] + ["aot_eager"] * (seed % 5 == 0), others)


# Frames without parameters (program_gen.FRAMES "global", "closure"): f() reads its inputs
# from a global or a closure cell. One program in four of the runs above has one; here 30 of
# each form, "eager" on all and "aot_eager" and "plugin" on every 5th.
@pytest.mark.parametrize("frame", ["global", "closure"])
def test_fuzz_zero_argument_frames(fresh_capture, frame):
    def backends(seed):
        return ["eager"] + ["aot_eager", "plugin"] * (seed % 5 == 0)

    _run(FAMILY_SEEDS, backends, exclude=EXCLUDE, frame=frame)


def test_zero_argument_frames_keep_the_statements():
    # drawn from an RNG of its own: a seed's statements, returns and inputs are those it
    # made before; excluding "zero-args" gives its program of before exactly
    frames = set()
    for seed in range(40):
        drawn, before = program_gen.generate(seed), program_gen.generate(seed, ("zero-args",))
        assert (drawn.body, drawn.ret, drawn.inputs_src) == (
            before.body,
            before.ret,
            before.inputs_src,
        )
        assert before.frame == "args" and "def f(x, y" in before.source()
        frames.add(drawn.frame)
        if drawn.frame != "args":
            assert "    def f():" in drawn.source() and "zero-args" in drawn.features
    assert frames == set(program_gen.FRAMES)


def test_new_families_are_generated_and_excludable():
    # The newer families draw from the RNG only when enabled, so with them all excluded a
    # seed gives the program it gave before they were added (CI's seeds keep their meaning).
    seen = set()
    for seed in range(40):
        seen |= program_gen.generate(seed).features
        src = program_gen.generate(seed, program_gen.NEW_FAMILIES).source()
        assert "import numpy" not in src and "class DObj" not in src and "class NTX" not in src
    assert set(program_gen.NEW_FAMILIES) <= seen


def test_generator_is_deterministic():
    assert program_gen.generate(123).source() == program_gen.generate(123).source()
    assert program_gen.generate(123).source() != program_gen.generate(124).source()
