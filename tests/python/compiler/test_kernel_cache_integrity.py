"""The disk caches never run or trust a damaged or planted entry (issue #13).

Kernel entries (``<key>.kernel``, csrc/runtime/cache_file.h) carry the SHA-256 of their name and
payload, checked before the payload is loaded; graph entries (``graphs/<key>.json``,
torch_plugin/compiler/graph_format.py) carry the SHA-256 of their key and graph and are
validated field by field. A planted shared library never runs its constructor; truncated,
flipped, garbage and swapped entries are reported and compiled again; every call stays equal to
eager. The fuzz test applies 1,000 random mutations, each followed by a call that must read the
disk caches again.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import torch_plugin
from torch_plugin import _C

pytestmark = [
    pytest.mark.usefixtures("fresh_capture"),
    pytest.mark.skipif(not hasattr(_C, "_compiler"), reason="built without the compiler"),
]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(root))
    yield root


def _scale() -> float:
    return random.Random(os.getpid()).random()  # kernels no other test process compiled


def _functions():
    s = _scale()

    def pointwise(x):
        return torch.sigmoid(x * s + 1.5) * x

    def reduction(x):
        return torch.tanh(x - s).sum(-1) + x.amax(-1) * s

    return [pointwise, reduction]


def _fresh_call(fn, x) -> None:
    """Compile ``fn`` as a new process would (no frame, graph or kernel in memory) and check the
    call against eager."""
    torch_plugin.reset()
    _C._compiler.forget_loaded_kernels()
    with torch.no_grad():
        got = torch_plugin.optimize("plugin")(fn)(x)
    torch.testing.assert_close(got, fn(x), rtol=1e-5, atol=1e-5)


def _kernel_entries(root: Path) -> list[Path]:
    return sorted(root.glob("*.kernel"))


def _check_entry(entry: Path) -> bytes:
    """The entry's bytes, after checking its header against its name and payload."""
    data = entry.read_bytes()
    assert data[:8] == b"TPCACHE1" and data[72:73] == b"\n"
    assert (
        data[8:72].decode() == hashlib.sha256(entry.name.encode() + b"\0" + data[73:]).hexdigest()
    )
    return data


def test_sha256_matches_hashlib():
    rng = random.Random(0)
    sizes = [0, 1, 3, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 100_003]
    for n in sizes:
        data = bytes(rng.getrandbits(8) for _ in range(n))
        assert _C._compiler.sha256_hex(data) == hashlib.sha256(data).hexdigest(), n


def test_entries_are_verified_and_a_flipped_byte_recompiles(cache_dir, capfd):
    fn = _functions()[0]
    x = torch.randn(37)
    _fresh_call(fn, x)
    (entry,) = _kernel_entries(cache_dir)
    data = entry.read_bytes()
    assert data[:8] == b"TPCACHE1" and data[72:73] == b"\n"
    assert (
        data[8:72].decode() == hashlib.sha256(entry.name.encode() + b"\0" + data[73:]).hexdigest()
    )
    before = _C._compiler.kernel_cache_stats()
    _fresh_call(fn, x)  # a disk hit
    after = _C._compiler.kernel_cache_stats()
    assert after["disk_hits"] == before["disk_hits"] + 1
    assert after["compiled"] == before["compiled"]
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x40
    entry.write_bytes(bytes(flipped))
    capfd.readouterr()
    _fresh_call(fn, x)
    assert "is damaged (content hash mismatch); compiling it again" in capfd.readouterr().err
    final = _C._compiler.kernel_cache_stats()
    assert final["disk_rejected"] == after["disk_rejected"] + 1
    assert final["compiled"] == after["compiled"] + 1
    _check_entry(entry)  # rewritten by the recompile


_PLANTED = r"""
#include <fstream>
__attribute__((constructor)) static void planted() { std::ofstream("%s") << "ran"; }
extern "C" void kernel(void**) {}
"""


def test_a_planted_shared_library_never_runs(cache_dir, tmp_path, capfd):
    """A shared library with a constructor, planted under a kernel's entry name (raw, or
    behind a header whose hash was computed for another name), is never loaded."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    fn = _functions()[0]
    x = torch.randn(41)
    _fresh_call(fn, x)
    (entry,) = _kernel_entries(cache_dir)
    marker = tmp_path / "constructor-ran"
    src = tmp_path / "planted.cpp"
    src.write_text(_PLANTED % marker)
    so = tmp_path / "planted.so"
    subprocess.run([cxx, "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    payload = so.read_bytes()
    other_name_hash = hashlib.sha256(b"other.kernel\0" + payload).hexdigest().encode()
    for planted in (payload, b"TPCACHE1" + other_name_hash + b"\n" + payload):
        entry.write_bytes(planted)
        capfd.readouterr()
        _fresh_call(fn, x)
        assert "is damaged" in capfd.readouterr().err  # the C++ warning goes to stderr
        assert not marker.exists(), "the planted library's constructor ran"


def _mutate(rng: random.Random, path: Path, others: list[Path]) -> str:
    data = path.read_bytes()
    kind = rng.choice(["truncate", "flip", "garbage", "swap", "empty", "append"])
    if kind == "truncate":
        data = data[: rng.randrange(len(data))]
    elif kind == "flip":
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        data = bytes(b)
    elif kind == "garbage":
        data = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 4096)))
    elif kind == "swap":
        same_kind = [o for o in others if o.suffix == path.suffix and o != path]
        if not same_kind:
            return "none"
        other = rng.choice(same_kind)
        a, b = data, other.read_bytes()
        other.write_bytes(a)
        data = b
    elif kind == "empty":
        data = b""
    else:
        data = data + bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64)))
    path.write_bytes(data)
    return kind


@pytest.mark.slow
def test_fuzz_cache_entries(cache_dir):
    """1,000 random mutations (truncation, bit flips, garbage, swapped entries, empty files,
    appended bytes) of kernel and graph entries, each followed by fresh calls of both
    functions: every call equals eager and nothing crashes."""
    rng = random.Random(1234)
    fns = _functions()
    xs = [torch.randn(5, 33), torch.randn(4, 29)]
    for fn, x in zip(fns, xs):
        _fresh_call(fn, x)
    kinds: dict[str, int] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # damaged graph entries are logged, kernels warn
        for _ in range(1000):
            entries = _kernel_entries(cache_dir) + sorted((cache_dir / "graphs").glob("*.json"))
            assert len(entries) >= 4, sorted(os.listdir(cache_dir))
            target = rng.choice(entries)
            kind = _mutate(rng, target, entries)
            kinds[kind] = kinds.get(kind, 0) + 1
            for fn, x in zip(fns, xs):
                _fresh_call(fn, x)
    assert sum(kinds.values()) == 1000 and len(kinds) >= 6, kinds
    assert _C._compiler.kernel_cache_stats()["disk_rejected"] > 100


def test_damaged_entry_in_a_new_process_recompiles(cache_dir, tmp_path):
    """A truncated entry read by a new process (the SIGBUS case of issue #13) is recompiled."""
    fn_src = f"lambda x: torch.sigmoid(x * {_scale()!r} + 1.5) * x"
    script = f"""
import torch, torch_plugin
fn = {fn_src}
x = torch.randn(51)
with torch.no_grad():
    torch.testing.assert_close(torch_plugin.optimize("plugin")(fn)(x), fn(x))
print("ok")
"""
    env = dict(os.environ, TORCH_PLUGIN_CACHE_DIR=str(cache_dir))
    run = [sys.executable, "-c", script]
    first = subprocess.run(run, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert first.returncode == 0 and "ok" in first.stdout, first.stderr
    for entry in _kernel_entries(cache_dir):
        entry.write_bytes(entry.read_bytes()[:500])
    second = subprocess.run(run, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert second.returncode == 0 and "ok" in second.stdout, second.stderr
    assert "is damaged" in second.stderr
