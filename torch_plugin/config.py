"""User-facing flags of torch_plugin, all in this one module.

Set a flag by assigning the module attribute, before or between calls::

    import torch_plugin
    torch_plugin.config.suppress_errors = True

Flags are read when they are needed (at capture or backend-compile time), so a change takes
effect from the next frame that is captured. Each flag below states its default, what reads
it, and the test that covers it.

Flags:
- :data:`suppress_errors` (False): a backend that fails to compile a graph falls back to
  running the graph eagerly, with a warning, instead of raising.
- :data:`cache_size_limit` (8): most compiled entries kept per code object; past it the
  frame runs without compiling.
- :data:`graph_breaks` (True): break the graph where capture cannot continue, and resume
  capture after the instruction; when False the frame runs unmodified.
- :data:`verbose` (False): more detail in log messages (backend compile times, tracebacks
  of frames that were not captured).
- :data:`debug_check_pure` (False): check that each call folded at capture time as pure
  changed no tensor (the tests turn it on).
- :data:`debug_raise_internal_errors` (False): an internal error of the translator raises
  instead of letting the frame run unmodified (the tests turn it on).
- :data:`optimize_ddp` (True): a graph captured inside DistributedDataParallel's forward is
  compiled as one subgraph per gradient bucket, so DDP's all-reduces overlap the backward.
- :data:`share_module_code` (True): layers of one class that run as separate frames share
  one compiled entry after the first recompile (guarded on type, parameters as inputs).
- :data:`logs` (``()``, or what ``TORCH_PLUGIN_LOGS`` says): the log channels printed to
  stderr; assigning it switches them at once.
"""

import sys
import types

suppress_errors: bool = False
"""When a backend raises while compiling a graph, warn and run that graph eagerly (its FX
``forward``) instead of raising :class:`torch_plugin.backends.registry.BackendCompilerFailed`.
Read by ``torch_plugin.backends.registry.call_backend``.
Tested in ``tests/python/backends/test_registry.py``."""

cache_size_limit: int = 8
"""Most compiled entries (one per distinct set of guards) kept for one code object. When a
guard fails and the limit is reached, the frame runs unmodified from then on, and a message
says so once. Read by the capture layer (``torch_plugin.capture``)."""

graph_breaks: bool = True
"""When capture cannot continue at an instruction of a frame, compile the graph captured so
far, run that instruction with CPython and resume capture after it (a *graph break*). When
False, such a frame runs unmodified. Read by ``torch_plugin.capture.convert_frame``.
Tested in ``tests/python/capture/test_graph_breaks.py``."""

verbose: bool = False
"""Say more in torch_plugin's log messages: each backend compile (backend, graph, number of
nodes, seconds) from ``torch_plugin.backends.registry.call_backend``, and the traceback of
each "not capturing ..." message from the capture layer. Messages go to the
``torch_plugin.*`` loggers at INFO level, so they show once logging is configured for it,
e.g. ``logging.basicConfig(level=logging.INFO)``. The backend part is tested in
``tests/python/backends/test_registry.py``."""

share_module_code: bool = True
"""When a frame's code is recompiled because a module argument now holds another object of
the same class (layers of one class run as separate frames: a graph break at each layer call,
FSDP2's sharded layers), capture that code from then on with its modules guarded on their
type and what the graph reads, and their parameters and buffers as graph inputs, so one
compiled entry serves every layer (``torch_plugin/capture/shared_modules.py``). False: each
module object gets its own entries, guarded on identity, as before. Read at each capture.
Tested in ``tests/python/capture/test_shared_modules.py``."""

optimize_ddp: bool = True
"""While the forward of a ``torch.nn.parallel.DistributedDataParallel`` module runs, split each
captured graph that computes gradients into one subgraph per DDP gradient bucket, each
compiled by the backend on its own, so each bucket's all-reduce starts while the backward of
the earlier layers still runs (see ``torch_plugin.distributed.ddp`` and docs/distributed.md).
False compiles such graphs whole (every all-reduce then waits for the end of the backward).
Read by ``torch_plugin.capture.convert_frame`` at each compile.
Tested in ``tests/python/distributed/test_ddp.py``."""

logs: tuple = ()
"""The log channels printed to stderr, as a tuple of names from
``torch_plugin.logs.CHANNELS``: ``graph_breaks``, ``recompiles``, ``guards``, ``bytecode``,
``graph``. Set at import from the ``TORCH_PLUGIN_LOGS`` environment variable
(``TORCH_PLUGIN_LOGS=graph_breaks,recompiles``, or ``all``). Unlike the other flags,
assigning it acts at once: ``config.logs = "graph_breaks,guards"`` (a comma-separated string
or a list of names) calls :func:`torch_plugin.set_logs`, which stores the normalized tuple
here. Tested in ``tests/python/test_logs.py``."""

debug_check_pure: bool = False
"""Debug mode for capture: every torch call folded to a constant at capture time (because
its result holds no tensor) is checked to have changed no tensor argument, and raises
AssertionError if it did (see ``torch_plugin.capture.pure_calls``). Calls that are neither
known pure nor in-place always become graph nodes or graph breaks; this checks the list of
pure calls itself. The test suite turns it on (``tests/python/conftest.py``)."""

debug_raise_internal_errors: bool = False
"""Debug mode for capture: an internal error of the translator (an exception other than
"cannot capture this", i.e. a bug of torch_plugin) propagates to the caller as
``torch_plugin.capture.InternalCaptureError``, with the original exception as its cause,
instead of being logged while the frame runs unmodified (the default, so that a bug never
breaks a user's program). The test suite turns it on (``tests/python/conftest.py``), so
every such bug fails the test that meets it."""


class _ConfigModule(types.ModuleType):
    """This module's class: assigning ``logs`` goes through :func:`torch_plugin.set_logs`."""

    def __setattr__(self, name: str, value) -> None:
        if name == "logs":
            from .logs import set_logs

            set_logs(value)  # validates, switches handlers, stores the tuple in this module
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _ConfigModule
