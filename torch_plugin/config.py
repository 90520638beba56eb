"""User-facing flags and options of torch_plugin, and every environment variable it reads.

This module is the one place where a flag or an option is declared and where the environment
is read; it imports nothing of the project (the other modules read it).

Set a flag by assigning the module attribute, before or between calls::

    import torch_plugin
    torch_plugin.config.suppress_errors = True

Flags are read when they are needed (at capture or backend-compile time), so a change takes
effect from the next frame that is captured. An assignment is checked at once: an unknown name
raises AttributeError (naming the closest flag and listing them all), a value of the wrong type
TypeError, an integer below a flag's minimum ValueError. Each flag below states its default, what reads
it, and the test that covers it.

Flags:
- :data:`suppress_errors` (False): a backend that fails to compile a graph falls back to
  running the graph eagerly, with a warning, instead of raising.
- :data:`cache_size_limit` (8): most compiled entries kept per code object; past it the
  frame runs without compiling.
- :data:`graph_breaks` (True): break the graph where capture cannot continue, and resume
  capture after the instruction; when False the frame runs unmodified.
- :data:`capture_tensor_branches` (True): a branch on a one-element tensor becomes a
  conditional in the graph where both ways can be traced without effects outside the graph
  (HF's LayerDrop trains as one graph); False breaks the graph at the branch, as
  torch.compile does. Tested on CPython 3.11, 3.12 and 3.13, and by the program generator
  (``tests/fuzz/run.py``, on unless ``--no-tensor-branches``).
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
- :data:`size_variant_limit` (8): most statically compiled variants (one per concrete size)
  the "plugin" compiler keeps for one graph with symbolic sizes; past it the least recently
  used is evicted.
- :data:`fallback_random` (False): random ops stay ATen calls (eager's numbers) instead of
  being generated in kernels.
- :data:`always_run_compiled` (False): the "plugin" compiler always runs the graph it
  compiled, never the eager graph it would have picked for speed (test harnesses).
- :data:`error_on_recompile` (False): a recompile raises ``torch_plugin.RecompileError``
  naming the guard that failed, instead of compiling the frame again.
- :data:`logs` (``()``, or what ``TORCH_PLUGIN_LOGS`` says): the log channels printed to
  stderr; assigning it switches them at once.

Environment variables (read when needed, by the functions at the end of this module):

| environment variable | default | read by | effect |
|---|---|---|---|
| ``TORCH_PLUGIN_LOGS`` | unset | :func:`logs_spec` (at import), :func:`compiler_environment` | log channels (``torch_plugin.logs``; ``+name`` DEBUG, ``-name`` errors only, as in ``TORCH_LOGS``); ``kernels`` in it prints each generated kernel, ``patterns`` each library-pattern rule that fires or is rejected (rule name, source line, failed constraint) |
| ``TORCH_PLUGIN_TRACE`` | unset | :func:`trace_dir` (at import, by ``torch_plugin.trace``) | a folder: each process writes its compile trace there (``trace-<pid>.jsonl``, one JSON object per event: frames, graphs, graph breaks, guards, recompiles, stage times, kernels, library-pattern decisions); ``python -m torch_plugin.report DIR`` makes an HTML page of it |
| ``TORCH_LOGS`` | unset | :func:`logs_spec` | torch.compile's log components; those in :data:`TORCH_LOGS_COMPONENTS` switch on the channel they mean here (``graph_code``: ``graph``, ``output_code``: ``kernels``, ``recompiles_verbose``: ``+recompiles``; a ``+``/``-`` on them is ignored, as torch does; ``TORCH_PLUGIN_LOGS`` overrides them) |
| ``TORCH_PLUGIN_DISABLE`` | ``0`` | :func:`optimization_disabled` (at each ``torch_plugin.optimize()`` call, and each graph ``torch.compile(backend="plugin")`` hands the backend) | ``1`` turns all optimization off: ``optimize`` returns the model or function unchanged (a context manager that captures nothing), as ``optimize(..., disable=True)`` does; the ``"plugin"`` backend under ``torch.compile`` returns each graph uncompiled (Dynamo's capture stays: ``TORCHDYNAMO_DISABLE=1`` turns that off) |
| ``TORCH_PLUGIN_FREEZE`` | ``1`` | :func:`compiler_environment` | inference graphs take parameters as constants (guarded by identity and version): conv+BN folding, constant folding (views of weights stay views), prepacked convolution weights |
| ``TORCH_PLUGIN_LIBRARY_PATTERNS`` | ``1`` | :func:`compiler_environment` | convolutions and matrix products (+epilogue) go to oneDNN / cuBLASLt |
| ``TORCH_PLUGIN_FUSION`` | ``1`` | :func:`compiler_environment` | pointwise/reduction/norm groups become generated kernels |
| ``TORCH_PLUGIN_MEMORY_PLANNING`` | ``1`` | :func:`compiler_environment` | library outputs share one preplanned per-run arena (buffer reuse by liveness) |
| ``TORCH_PLUGIN_VERIFY`` | ``0`` | :func:`compiler_environment` | run the IR verifier after every pass |
| ``TORCH_PLUGIN_DUMP_DIR`` | unset | :func:`compiler_environment` | write each graph before and after each pass there |
| ``TORCH_PLUGIN_GRAPH_CACHE`` | ``1`` | :func:`compiler_environment` | a warm compile of an inference graph replays its cached lowering instead of tracing with AOTAutograd |
| ``TORCH_PLUGIN_CUDA_GRAPHS`` | ``1`` | :func:`compiler_environment` | CUDA inference graphs are captured into CUDA graphs where that is safe |
| ``TORCH_PLUGIN_FALLBACK_RANDOM`` | ``0`` | :func:`compiler_environment` | random ops (rand, randn, bernoulli, dropout) stay ATen calls, for eager's numbers bit for bit; by default they are generated in kernels (Philox, reproducible per seed, not eager's numbers) |
| ``TORCH_PLUGIN_ALWAYS_RUN_COMPILED`` | ``0`` | :func:`run_compiled_always` | as :data:`always_run_compiled` = True: compiled graphs never give way to the eager graph for speed |
| ``TORCH_PLUGIN_CACHE_DIR`` | ``$XDG_CACHE_HOME/torch_plugin``, else ``$HOME/.cache/torch_plugin`` (the password database's home folder when ``HOME`` is unset or empty) | :func:`cache_root` | the disk caches' root (kernels, lowered graphs; see ``torch_plugin.compiler.options`` for the trust checks and ``python -m torch_plugin.cache``) |
| ``TORCH_PLUGIN_CACHE_LIMIT_GB`` | ``4`` | :func:`cache_limit_gb` | least recently used entries are evicted after each new graph entry until the cache is under the limit |
| ``CXX`` | unset: the first of ``c++``, ``g++``, ``clang++`` on ``PATH`` | :func:`runtime_options` | the host compiler of generated CPU kernels (split on whitespace, run without a shell) |
| ``TORCH_PLUGIN_ONEDNN_LIBRARY`` | unset: ``torch_plugin/_onednn.so`` | :func:`runtime_options` | the oneDNN adapter library loaded by the C++ side |
| ``TORCH_PLUGIN_ONEDNN_WEIGHTS`` | ``borrowed`` | :func:`runtime_options` | CPU linear steps read the frozen weight where it is (one copy of each weight: peak memory as eager's); ``packed`` reorders a copy into oneDNN's blocked layout (BERT-base batch 1 on 2 cores: about 5-10% faster, 300 MB more) |
| ``TORCH_PLUGIN_CUBLASLT_TUNING`` | ``1`` | :func:`runtime_options` | CUDA products: time cuBLASLt's candidates and cuBLAS's gemm; ``0``: the heuristic's first; ``verbose``; ``gemm`` (tests) |
| ``TORCH_PLUGIN_CUBLASLT_CANDIDATES`` | ``8`` | :func:`runtime_options` | how many candidates cuBLASLt's heuristic is asked for (1 to 64) |
| ``TORCH_PLUGIN_CUDNN_THREADS`` | min(8, cores) | :func:`runtime_options` | threads that build a compiled graph's cuDNN convolution plans at once (1: one after another) |

The C++ side reads none of these itself: :func:`runtime_options` is the dict it receives
(``torch_plugin.compiler.configure_runtime`` hands it to ``_C._runtime.configure`` at import,
and the per-graph ones again before each executor is built; csrc/runtime/options.h).
"""

import os
import sys
import types

suppress_errors: bool = False
"""When a backend raises while compiling a graph, warn and run that graph eagerly (its FX
``forward``) instead of raising :class:`torch_plugin.contract.BackendCompilerFailed`.
Read by ``torch_plugin.contract.call_backend``.
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

capture_tensor_branches: bool = True
"""A branch on a one-element tensor (``if torch.rand([]) < p:``, HF's LayerDrop) is captured
as a conditional in the graph, both ways traced, where the two ways meet again in the
function and neither has an effect outside the graph: a ``torch.cond`` node, or a
``Conditional`` module run as an eager ``if`` between compiled pieces where a way draws
random numbers or gradients are needed (docs/internals/capture.md); otherwise (and when
False) the graph breaks at the branch. Read by ``torch_plugin.capture.conditionals``.
Branches inside the builtins' polyfills (``max``/``min`` of tensors,
``torch_plugin/capture/variables/polyfills.py``) are captured with it off too.
Tested in ``tests/python/capture/test_conditionals.py`` and
``tests/python/capture/test_conditional_identity.py``."""

verbose: bool = False
"""Say more in torch_plugin's log messages: each backend compile (backend, graph, number of
nodes, seconds) from ``torch_plugin.contract.call_backend``, and the traceback of
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
Read by ``torch_plugin.distributed`` at each compile.
Tested in ``tests/python/distributed/test_ddp.py``."""

size_variant_limit: int = 8
"""Most static variants the "plugin" compiler keeps for one graph with symbolic sizes: such
a graph is compiled once per concrete size (the sizes and strides of its symbolic inputs and
its integer inputs) and the variants are kept in a least-recently-used map; a new size past
this bound evicts the least recently used variant, with its executor and CUDA graph, and says
so on the ``recompiles`` log channel (at least 1). Read by
``torch_plugin.compiler.size_variants`` at each new variant.
Tested in ``tests/python/compiler/test_symbolic_sizes.py``."""

fallback_random: bool = False
"""Keep random ops (``rand``, ``randn``, their ``_like`` forms, ``bernoulli``, dropout in
training) as ATen calls, so that a compiled graph draws eager's numbers bit for bit; also set
by ``TORCH_PLUGIN_FALLBACK_RANDOM=1``. False (the default, as Inductor's
``config.fallback_random``): the "plugin" compiler generates them inside its kernels with a
counter-based generator (Philox4x32-10) seeded from PyTorch's default generator at each call:
the same ``torch.manual_seed`` gives the same results, each call advances the generator, but
the numbers are not eager's (docs/internals/compiler.md, "Random ops"). Read by
``torch_plugin.compiler.options`` when a graph is compiled (part of the graph cache's key).
Tested in ``tests/python/compiler/test_random_ops.py``."""

always_run_compiled: bool = False
"""The "plugin" compiler always runs the graph it compiled. False (the default): on CUDA it
times a pure inference graph against the eager graph once and runs the faster of the two
(``torch_plugin.compiler.pipeline``), so the compiler never costs a user speed; a harness
that checks the compiled graph's own results (kernels' numerics, op coverage) sets this, as
does ``TORCH_PLUGIN_ALWAYS_RUN_COMPILED=1``, since that choice varies with the GPU's load.
Read by :func:`run_compiled_always` at each compile.
Tested in ``tests/python/compiler/test_fallback.py``."""

logs: tuple = ()
"""The log channels printed to stderr, as a tuple of names from
``torch_plugin.logs.CHANNELS``: ``graph_breaks``, ``recompiles``, ``guards``, ``bytecode``,
``graph``, ``ddp``, ``perf`` (the stage times of compiles past about 2 s), ``passes`` (the IR
before and after the "plugin" pass pipeline), ``cache`` (graph-cache look-ups), each with its
verbosity prefix as in ``TORCH_LOGS``: ``name`` (INFO), ``+name`` (DEBUG: the channel's debug
records too), ``-name`` (ERROR: only its errors). Set at import from the
``TORCH_PLUGIN_LOGS`` environment variable (``TORCH_PLUGIN_LOGS=graph_breaks,+recompiles``,
or ``all``). Unlike the other flags, assigning it acts at once: ``config.logs =
"graph_breaks,guards"`` (a comma-separated string or a list of names) calls
:func:`torch_plugin.set_logs`, which stores the normalized tuple here
(``torch_plugin.logs.parse_spec``). Tested in ``tests/python/test_logs.py``."""

error_on_recompile: bool = False
"""A frame whose compiled entries all fail their guards raises
``torch_plugin.RecompileError`` (its message names the code, its file and line, and the guard
that failed) instead of compiling the frame again, as ``torch._dynamo.config.
error_on_recompile`` does for torch.compile: for tests and serving, where a recompile is a
bug. The first compile of a frame is not a recompile. Read by
``torch_plugin.capture.convert_frame`` at each guard failure.
Tested in ``tests/python/capture/test_optimize_forms.py``."""

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


_logs_setter = None
"""The function that assigning :data:`logs` calls (``torch_plugin.logs.set_logs``, which
installs itself with :func:`install_logs_setter`): it validates the value, switches the
channels and stores the tuple here."""


def install_logs_setter(setter) -> None:
    """Make ``config.logs = value`` call ``setter(value)`` (``torch_plugin.logs`` installs
    ``set_logs`` at import; config itself knows nothing of logging)."""
    global _logs_setter
    _logs_setter = setter


# The smallest value of each integer flag.
_MINIMUM = {"cache_size_limit": 0, "size_variant_limit": 1}


def _flags() -> dict[str, type]:
    """The flags a user may assign: the annotated public names of this module."""
    return {k: t for k, t in __annotations__.items() if not k.startswith("_") and k != "logs"}


def _checked_flag(name: str, value, kind: type):
    """``value`` if it suits flag ``name`` of type ``kind`` (bool: True or False only; int:
    an int that is not a bool, at least the flag's minimum), else TypeError or ValueError
    naming the flag, its type and the value given."""
    if kind is bool and not isinstance(value, bool):
        raise TypeError(f"torch_plugin.config.{name} takes True or False, not {value!r}")
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"torch_plugin.config.{name} takes an int, not {value!r}")
        low = _MINIMUM.get(name, 0)
        if value < low:
            raise ValueError(f"torch_plugin.config.{name} must be at least {low}, not {value}")
    return value


class _ConfigModule(types.ModuleType):
    """This module's class: a flag is checked when it is assigned (an unknown name is an
    AttributeError that lists the flags, a value of the wrong type a TypeError), so that a
    typo such as ``config.cach_size_limit = 2`` fails where it is written instead of having
    no effect; assigning ``logs`` goes through the installed setter
    (:func:`torch_plugin.set_logs`). Other names the module defines (its functions) may be
    reassigned, as test harnesses do."""

    def __setattr__(self, name: str, value) -> None:
        if name == "logs" and _logs_setter is not None:
            _logs_setter(value)  # validates, switches handlers, stores the tuple in this module
            return
        flags = _flags()
        if name in flags:
            value = _checked_flag(name, value, flags[name])
        elif not name.startswith("_") and name not in vars(self):
            import difflib

            close = difflib.get_close_matches(name, [*flags, "logs"], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise AttributeError(
                f"torch_plugin.config has no flag {name!r}{hint} "
                f"(flags: {', '.join(sorted([*flags, 'logs']))})"
            )
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _ConfigModule


# --- the environment ------------------------------------------------------------------------
# Every environment variable torch_plugin reads is read below (see the module docstring).


def env_flag(name: str, default: bool) -> bool:
    """The boolean environment variable ``name``: unset is ``default``; ``0``, ``false``,
    ``no``, ``off`` and the empty string are False; anything else is True."""
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() not in ("0", "false", "no", "off", "")


LOGS_ENV_VAR = "TORCH_PLUGIN_LOGS"


# torch.compile's TORCH_LOGS components that mean something here, and the channel item each
# gives (torch/_logging/_registrations.py names them; the others are torch's own). All are
# torch's "artifacts", which take no verbosity prefix (torch._logging ignores a + or - on
# them: TORCH_LOGS=-graph_breaks shows graph breaks too); recompiles_verbose, torch's
# artifact for every failed guard, is the recompiles channel at DEBUG here.
TORCH_LOGS_COMPONENTS = {
    "graph_breaks": "graph_breaks",
    "recompiles": "recompiles",
    "recompiles_verbose": "+recompiles",
    "guards": "guards",
    "verbose_guards": "guards",
    "bytecode": "bytecode",
    "graph": "graph",
    "graph_code": "graph",
    "output_code": "kernels",
    "kernel_code": "kernels",
}


def logs_spec() -> str:
    """The log channels the environment asks for, as a comma-separated spec (``""`` when
    none): the channels that torch.compile's ``TORCH_LOGS`` components mean here
    (:data:`TORCH_LOGS_COMPONENTS`: ``TORCH_LOGS=graph_breaks,recompiles,output_code``
    switches on ``graph_breaks``, ``recompiles`` and ``kernels``; a ``+`` or ``-`` on them is
    ignored, as torch ignores it on these components; its other components are torch's own
    and left to torch), followed by ``TORCH_PLUGIN_LOGS`` as set, whose items come later and
    so override them. Read at import (``torch_plugin.logs``) and by
    :func:`compiler_environment`."""
    names = []
    for item in os.environ.get("TORCH_LOGS", "").split(","):
        name = item.strip().lstrip("+-").strip()
        if name in TORCH_LOGS_COMPONENTS:
            names.append(TORCH_LOGS_COMPONENTS[name])
    names.append(os.environ.get(LOGS_ENV_VAR, ""))
    return ",".join(n for n in names if n.strip())


TRACE_ENV_VAR = "TORCH_PLUGIN_TRACE"


def trace_dir() -> str:
    """The folder ``TORCH_PLUGIN_TRACE`` names for the compile trace ("" when unset: no
    trace). Read once, at import, by ``torch_plugin.trace``."""
    return os.environ.get(TRACE_ENV_VAR, "").strip()


def _spec_has(spec: str, channel: str) -> bool:
    """Whether a log spec switches ``channel`` on (``all`` does; a later ``-channel``, which
    would log only its errors, switches it off: the compiler's channels print no errors;
    ``+`` and spaces are ignored), as ``torch_plugin.logs.parse_levels`` reads it."""
    on = False
    for item in spec.split(","):
        name = item.strip()
        remove = name.startswith("-")
        name = name.lstrip("+-").strip()
        if name in (channel, "all"):
            on = not remove
    return on


def cache_root() -> str:
    """The disk caches' root the environment names (not created, not checked), resolved as
    the C++ kernel cache resolved it before it received it from here: a non-empty
    ``TORCH_PLUGIN_CACHE_DIR``; else a non-empty ``XDG_CACHE_HOME`` + ``/torch_plugin``; else
    the home folder + ``/.cache/torch_plugin``, from a non-empty ``HOME`` or else the password
    database (never a folder shared with other users such as /tmp). "" when there is no home
    folder either (the C++ side then raises its own error when it needs the cache)."""
    env = os.environ.get("TORCH_PLUGIN_CACHE_DIR", "")
    if env:
        return env
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg:
        return xdg + "/torch_plugin"
    home = os.environ.get("HOME", "")
    if not home:
        import pwd

        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except KeyError:
            return ""
    return home + "/.cache/torch_plugin" if home else ""


DEFAULT_CACHE_LIMIT_GB = 4.0


def cache_limit_gb() -> str:
    """``TORCH_PLUGIN_CACHE_LIMIT_GB`` as set (default ``"4.0"``); ``torch_plugin.cache``
    parses and checks it."""
    return os.environ.get("TORCH_PLUGIN_CACHE_LIMIT_GB", str(DEFAULT_CACHE_LIMIT_GB))


def optimization_disabled() -> bool:
    """``TORCH_PLUGIN_DISABLE`` set to a true value: every ``torch_plugin.optimize()`` call
    returns its model or function unchanged (or a context that captures nothing), and the
    ``"plugin"`` backend returns each graph uncompiled. Read at each ``optimize()`` call and
    each backend call."""
    return env_flag("TORCH_PLUGIN_DISABLE", False)


def run_compiled_always() -> bool:
    """:data:`always_run_compiled`, or ``TORCH_PLUGIN_ALWAYS_RUN_COMPILED`` set to a true
    value: compiled graphs never give way to the eager graph for speed."""
    return always_run_compiled or env_flag("TORCH_PLUGIN_ALWAYS_RUN_COMPILED", False)


def compiler_environment() -> dict[str, bool | str]:
    """The "plugin" compiler's options as the environment sets them now (see the table in
    the module docstring); ``torch_plugin.compiler.options.current`` builds its typed,
    checked view from this dict. ``cache_dir`` is :func:`cache_root`, not yet checked."""
    return {
        "freeze": env_flag("TORCH_PLUGIN_FREEZE", True),
        "library_patterns": env_flag("TORCH_PLUGIN_LIBRARY_PATTERNS", True),
        "fusion": env_flag("TORCH_PLUGIN_FUSION", True),
        "memory_planning": env_flag("TORCH_PLUGIN_MEMORY_PLANNING", True),
        "verify": env_flag("TORCH_PLUGIN_VERIFY", False),
        "dump_dir": os.environ.get("TORCH_PLUGIN_DUMP_DIR", ""),
        "log_kernels": _spec_has(logs_spec(), "kernels"),
        "log_patterns": _spec_has(logs_spec(), "patterns"),
        "cache_dir": cache_root(),
        "graph_cache": env_flag("TORCH_PLUGIN_GRAPH_CACHE", True),
        "cuda_graphs": env_flag("TORCH_PLUGIN_CUDA_GRAPHS", True),
        "fallback_random": fallback_random or env_flag("TORCH_PLUGIN_FALLBACK_RANDOM", False),
    }


def runtime_options() -> dict[str, str | int | bool]:
    """The options the C++ runtime reads, as one dict, from the environment as the C++ side
    reads them today (to be passed to ``torch_plugin._C._runtime.configure``):

    - ``cache_dir``: the kernel cache's root (:func:`cache_root`);
    - ``cxx``: ``CXX`` ("" for the default: the first of c++, g++, clang++ on PATH);
    - ``onednn_library``: ``TORCH_PLUGIN_ONEDNN_LIBRARY`` ("" for ``torch_plugin/_onednn.so``);
    - ``onednn_weights``: ``TORCH_PLUGIN_ONEDNN_WEIGHTS`` ("" for borrowed; ``packed``);
    - ``cublaslt_tuning``: ``TORCH_PLUGIN_CUBLASLT_TUNING`` ("" for ``1``; ``0``, ``verbose``,
      ``gemm``);
    - ``cublaslt_candidates``: ``TORCH_PLUGIN_CUBLASLT_CANDIDATES`` ("" for 8; C++ clamps the
      number to 1..64).
    - ``cudnn_threads``: ``TORCH_PLUGIN_CUDNN_THREADS`` ("" for min(8, cores); an integer
      >= 1).

    The values are the raw strings of the environment ("" when unset), so C++ keeps its own
    defaults and parsing. A variable set to the empty string reads as unset (for
    ``TORCH_PLUGIN_CUBLASLT_CANDIDATES`` the C++ side read ``""`` as 0, clamped to 1).
    """
    return {
        "cache_dir": cache_root(),
        "cxx": os.environ.get("CXX", ""),
        "onednn_library": os.environ.get("TORCH_PLUGIN_ONEDNN_LIBRARY", ""),
        "onednn_weights": os.environ.get("TORCH_PLUGIN_ONEDNN_WEIGHTS", ""),
        "cublaslt_tuning": os.environ.get("TORCH_PLUGIN_CUBLASLT_TUNING", ""),
        "cublaslt_candidates": os.environ.get("TORCH_PLUGIN_CUBLASLT_CANDIDATES", ""),
        "cudnn_threads": os.environ.get("TORCH_PLUGIN_CUDNN_THREADS", ""),
    }
