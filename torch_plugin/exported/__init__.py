"""The standalone graph module that :func:`torch_plugin.export` returns, and what it carries.

- :mod:`.graph_module`: :class:`ExportedGraph` (a ``torch.fx.GraphModule``), the submodule that
  rebuilds structured return values (:class:`ExportedOutput`) and the helpers its graph calls;
- :mod:`.guards`: :class:`ExportGuards`, the submodule that checks, on every call and before
  computing, the conditions the capture assumed about the call's arguments;
- :mod:`.serialization`: ``torch.save`` / ``torch.load`` of an exported graph with
  ``torch.load``'s defaults (``weights_only=True``): a structured, allowlisted description of the
  graph, never pickled code; :mod:`.allowlist`: the functions and classes such a file may
  name, and how their names are resolved on load.

Depends on capture (output structure) only; capture never imports it.
"""

from . import serialization  # noqa: F401 - registers load_exported with add_safe_globals
