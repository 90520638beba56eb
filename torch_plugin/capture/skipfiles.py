"""Which code objects capture leaves alone.

:func:`should_skip_frame` decides for frames the hook sees: the standard library, PyTorch's
internals (except ``torch/nn/modules`` forwards, which users wrap directly), torch_plugin
itself and test runners run unmodified; module-level code too. :func:`check_inline` decides
for functions the translator is about to inline: those whose behaviour it cannot model
(logging, warnings, threading, ...) stop capture of the frame.
"""

from __future__ import annotations

import os
import sysconfig
import types

import torch

from . import graph_break_types as gbt
from .exc import unimplemented

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_NN_MODULES_DIR = os.path.join(_TORCH_DIR, "nn", "modules") + os.sep
_NN_MODULE_FILE = os.path.join(_TORCH_DIR, "nn", "modules", "module.py")
# PyTorch code that must run for real, never on FakeTensors: activation checkpointing
# installs saved-tensor hooks and reruns the function in backward (a call to it is a graph
# break; the checkpointed function's own frame is then captured like any other).
_RUN_FOR_REAL_FILES = (os.path.join(_TORCH_DIR, "utils", "checkpoint.py"),)
_PLUGIN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB_DIRS = tuple(
    {os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib")}
)
_SKIP_PACKAGES = (
    "_pytest",
    "pytest",
    "pluggy",
    "numpy",
    "scipy",
    "IPython",
    "typing_extensions",
    "tqdm",
)
_SKIP_PACKAGE_DIRS: tuple[str, ...] = ()


def _package_dirs() -> tuple[str, ...]:
    global _SKIP_PACKAGE_DIRS
    if not _SKIP_PACKAGE_DIRS:
        dirs = []
        import importlib.util

        for name in _SKIP_PACKAGES:
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                spec = None
            if spec is not None and spec.origin:
                if spec.submodule_search_locations:  # a package: skip its folder
                    dirs.append(os.path.dirname(spec.origin) + os.sep)
                else:  # a single-file module
                    dirs.append(spec.origin)
        _SKIP_PACKAGE_DIRS = tuple(dirs) or ("\0",)
    return _SKIP_PACKAGE_DIRS


def _is_stdlib(filename: str) -> bool:
    if filename.startswith("<frozen"):
        return True
    real = os.path.realpath(filename) if os.path.isabs(filename) else filename
    return real.startswith(_STDLIB_DIRS) and "site-packages" not in real


def skip_reason(code: types.CodeType) -> str | None:
    """Why the hook should run frames of ``code`` unmodified, or None to capture them."""
    filename = code.co_filename
    if code.co_name == "<module>":
        return "module-level code"
    if filename.startswith(_PLUGIN_DIR):
        return "torch_plugin itself"
    if filename.startswith(_TORCH_DIR):
        if (
            filename.startswith(_NN_MODULES_DIR)
            and filename != _NN_MODULE_FILE
            and code.co_name == "forward"
        ):
            return None
        return "PyTorch internals"
    if _is_stdlib(filename):
        return "standard library"
    if filename.startswith(_package_dirs()):
        return "third-party infrastructure (test runner, numpy)"
    if filename.startswith("<eval_with_key>") or "torchinductor" in filename:
        return "generated graph code"
    return None


# Standard-library modules whose functions the translator may inline (pure helpers).
_INLINE_STDLIB_OK = (
    "functools.py",
    "operator.py",
    "typing.py",
    "contextlib.py",
    "enum.py",
    "dataclasses.py",
    "inspect.py",
    "collections",
    "abc.py",
    "copy.py",
    "_collections_abc.py",
)


def check_inline(code: types.CodeType) -> None:
    """Raise Unsupported if a call to ``code`` must not be inlined."""
    filename = code.co_filename
    if filename.startswith(_TORCH_DIR):
        if filename == _NN_MODULE_FILE:
            unimplemented(gbt.SKIPPED_CODE, f"call to torch.nn.Module internals ({code.co_name})")
        if filename in _RUN_FOR_REAL_FILES:
            unimplemented(
                gbt.RUNS_OUTSIDE_CAPTURE,
                f"call to {code.co_name} of torch.utils.checkpoint (runs for real: it installs "
                "saved-tensor hooks and recomputes in backward)",
            )
        return
    if _is_stdlib(filename):
        base = os.path.basename(filename)
        if not any(ok in filename for ok in _INLINE_STDLIB_OK) and base not in _INLINE_STDLIB_OK:
            unimplemented(
                gbt.SKIPPED_CODE, f"call to standard library function {code.co_name} ({base})"
            )


# Standard-library modules whose functions are free of effects when given constants.
_PURE_STDLIB = (
    "inspect.py",
    "dataclasses.py",
    "typing.py",
    "enum.py",
    "functools.py",
    "copy.py",
    "_collections_abc.py",
    "abc.py",
    "operator.py",
    "re",
    "string.py",
    "keyword.py",
    "types.py",
)


def is_pure_stdlib(code: types.CodeType) -> bool:
    """True for standard-library functions that may run for real on constant arguments."""
    if not _is_stdlib(code.co_filename):
        return False
    base = os.path.basename(code.co_filename)
    parent = os.path.basename(os.path.dirname(code.co_filename))
    return base in _PURE_STDLIB or parent in _PURE_STDLIB
