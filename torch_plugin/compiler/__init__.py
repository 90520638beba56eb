"""The "plugin" compiler's Python side: ATen FX graph → C++ IR → passes → executor.

The pipeline itself (IR, verifier, passes, code generation, executor) is C++
(``csrc/compiler``, ``csrc/runtime``, ``csrc/libs``), reached through ``torch_plugin._C._compiler``.

Key parts:
- :mod:`.lowering`: FX ATen graph → IR (``lower``), and :class:`~.lowering.Unsupported`.
- :mod:`.compile`: :func:`~.compile.compile_graph`, one ATen graph to a :class:`CompiledGraph`;
  freezing's guards on parameter identity and version.
- :mod:`.decompositions`: the decomposition table given to AOTAutograd.
- :mod:`.options`: options and their environment variables.
"""
