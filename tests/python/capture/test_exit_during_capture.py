"""Interpreter exit while another thread is converting a frame (issue #13): the exit waits for
the conversion (torch_plugin/capture/shutdown.py) instead of aborting the process.

The backend here is a test double that takes a second, as a slow compile does, and returns a
callable with no torch call, so that nothing but the conversion runs on the thread at exit
(a daemon thread running torch operations while the interpreter exits aborts in plain PyTorch
as well; that is not this project's to change)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import threading, time, torch, torch_plugin

marker = sys.argv[1]

def slow_backend(gm, example_inputs):
    time.sleep(1.0)  # a compile in flight when the main thread exits
    with open(marker, "w") as f:
        f.write("compiled")
    out = gm(*example_inputs)
    return lambda *args: out

def f(x):
    return x * 2 + 1

def work():
    torch_plugin.optimize(slow_backend)(f)(torch.ones(3))

threading.Thread(target=work, daemon=True).start()
time.sleep(0.3)
"""


def test_exit_waits_for_a_conversion_in_flight(tmp_path):
    marker = tmp_path / "compiled"
    proc = subprocess.run(
        [sys.executable, "-c", "import sys\n" + SCRIPT, str(marker)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "terminate called" not in proc.stderr
    assert marker.read_text() == "compiled"
