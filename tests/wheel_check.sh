#!/usr/bin/env bash
# The wheel as users get it (issue #13): builds it with `pip wheel`, checks what it carries
# (LICENSE, the version of torch_plugin/__init__.py, the README as long description, only
# $ORIGIN-relative RUNPATH entries in the extension), installs it into a fresh virtual
# environment and runs the demo from there. The environment sees the system's site-packages
# for torch (a second multi-GB torch download would add nothing); the check asserts that
# torch_plugin itself is imported from the environment's copy.
#
# Usage: bash tests/wheel_check.sh   (after README's first set-up command)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

python3 -m pip wheel -q --no-build-isolation --no-deps -w "$OUT/dist" "$ROOT"
WHEEL="$(ls "$OUT"/dist/torch_plugin-*.whl)"
echo "wheel: $(basename "$WHEEL")"

python3 - "$WHEEL" "$ROOT" "$OUT" <<'PY'
import re, subprocess, sys, zipfile
from pathlib import Path

wheel, root, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
version = re.search(r'^__version__ = "([^"]+)"', (root / "torch_plugin/__init__.py").read_text(), re.M)[1]
z = zipfile.ZipFile(wheel)
names = z.namelist()
meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
assert f"\nVersion: {version}\n" in meta, "wheel version differs from torch_plugin.__version__"
assert "Description-Content-Type: text/markdown" in meta and "# torch_plugin" in meta, "README"
assert any(n.endswith("LICENSE") and ".dist-info/" in n for n in names), "no LICENSE in the wheel"
libs = [n for n in names if re.fullmatch(r"torch_plugin/(_C\..*|_onednn)\.so", n)]
assert any("/_C." in n for n in libs), "no extension module in the wheel"
for lib in libs:
    z.extract(lib, out / "ext")
    dyn = subprocess.run(["readelf", "-d", str(out / "ext" / lib)], capture_output=True, text=True, check=True).stdout
    runpath = re.search(r"\((?:RUNPATH|RPATH)\)\s+Library (?:runpath|rpath): \[(.*)\]", dyn)
    entries = runpath[1].split(":") if runpath else []
    bad = [e for e in entries if not e.startswith("$ORIGIN")]
    assert not bad, f"build-machine paths in the RUNPATH of {lib}: {bad}"
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", dyn)
    if "/_C." in lib:
        assert not [n for n in needed if "dnnl" in n], "the extension must not link libdnnl"
    print(f"{lib}: RUNPATH {entries}; NEEDED {', '.join(needed)}")
print(f"wheel ok: version {version}, LICENSE, README")
PY

python3 -m venv --system-site-packages "$OUT/venv"
"$OUT/venv/bin/python" -m pip install -q --no-deps --ignore-installed "$WHEEL"
# oneDNN's wheel (onednn-cpu-gomp, or onednn) puts libdnnl.so into <prefix>/lib of the environment it is installed
# in, where _onednn.so's RPATH ($ORIGIN/../../..) looks. Here it is the system's prefix, not the
# venv's (a split install: the venv borrows the system's packages), so the library path names it.
ONEDNN_LIB="$(python3 -c 'import importlib.metadata as m, os
for d in m.distributions():
    if (d.metadata["Name"] or "").lower().startswith("onednn"):
        for f in d.files or []:
            if f.name == "libdnnl.so":
                print(os.path.dirname(str(d.locate_file(f).resolve())))
                raise SystemExit')"
if [ -n "$ONEDNN_LIB" ]; then export LD_LIBRARY_PATH="$ONEDNN_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
WITH_ONEDNN=0
if unzip -l "$WHEEL" | grep -q 'torch_plugin/_onednn.so'; then WITH_ONEDNN=1; fi
cd "$OUT"
"$OUT/venv/bin/python" -c "
import torch_plugin, sys
assert torch_plugin.__file__.startswith('$OUT/venv/'), torch_plugin.__file__
print('torch_plugin', torch_plugin.__version__, 'imported from', torch_plugin.__file__)
from torch_plugin import _C
if $WITH_ONEDNN:
    assert _C._compiler.has_onednn, _C._compiler.onednn_error
    print('oneDNN loaded from the wheel\'s _onednn.so')
"
"$OUT/venv/bin/python" "$ROOT/examples/resnet18_demo.py"
echo "tests/wheel_check.sh: ok"
