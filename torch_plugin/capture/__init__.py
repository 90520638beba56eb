"""Capture: Python frames → FX graphs + guards + transformed bytecode.

Layout, in data-flow order:
- ``eval_frame``: the optimize context, disable/run/reset (turns the C++ hook on and off);
- ``convert_frame``: the hook's callback; ``stats`` counters; the one compile step, which
  hands each graph to a compiler function through ``torch_plugin.contract`` (capture imports
  only contract, config, logs and _C of the rest of the package);
- ``skipfiles``: which code is left alone;
- ``symbolic_convert``: the bytecode interpreter (loop, names, control flow), with the opcode
  families in mixins ``container_instructions``, ``operator_instructions``,
  ``attribute_instructions`` and ``call_instructions`` (calls, inlining); ``variables/``: value
  kinds;
- ``sources`` and ``guards``: where values came from and the guard tree built from them;
- ``output_graph`` (with ``operation_recording``) and ``output_structure``: the FX graph, its
  operations, inputs and outputs;
- ``graph_break`` (with ``reconstruct``) and ``resume_execution``: graph breaks and resume
  functions; ``graph_break_types``: the registry of graph-break types;
- ``bytecode_emission``: the transformed code object.
"""

from .convert_frame import CaptureError, CaptureStats, RecompileError, stats
from .exc import Unsupported

__all__ = ["CaptureError", "CaptureStats", "RecompileError", "Unsupported", "stats"]
