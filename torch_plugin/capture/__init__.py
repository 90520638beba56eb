"""Capture: Python frames → FX graphs + guards + transformed bytecode.

Layout, in data-flow order:
- ``eval_frame``: the optimize context, disable/run/reset (turns the C++ hook on and off);
- ``convert_frame``: the hook's callback; ``stats`` counters; the one compile step, which
  hands each graph to a compiler function through ``torch_plugin.contract`` (capture imports
  only contract, config, logs and _C of the rest of the package);
- ``skipfiles``: which code is left alone;
- ``symbolic_convert``: the bytecode interpreter; ``variables/``: value kinds;
- ``sources`` and ``guards``: where values came from and the guard tree built from them;
- ``output_graph`` and ``output_structure``: the FX graph, its inputs and outputs;
- ``bytecode_emission``: the transformed code object.
"""

from .convert_frame import CaptureError, CaptureStats, stats
from .exc import Unsupported

__all__ = ["CaptureError", "CaptureStats", "Unsupported", "stats"]
