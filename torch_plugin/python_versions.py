"""The CPython versions torch_plugin supports, and the import-time check.

Capture depends on CPython's private frame layout and on its bytecode, both of which change
with every minor version: csrc/capture/frame_compat.h (the frame layer) and
torch_plugin/capture/bytecode_compat.py (the bytecode layer) hold what differs. A version
neither has been audited for is refused at import with an ImportError naming the supported
versions, before anything touches the C++ extension (which would not have been built for it:
frame_compat.h stops the build with ``#error``). A free-threaded build (PEP 703: 3.13t,
configured with ``--disable-gil``) is refused the same way, at import and at build time
(CMakeLists.txt, frame_compat.h): the frame hook, the code extras and the guards assume the GIL
serializes every frame the hook sees, and its object layout is another ABI (cp313t). A leaf:
imports only the standard library.
"""

from __future__ import annotations

import sys
import sysconfig

__all__ = ["SUPPORTED_VERSIONS", "check_supported", "is_free_threaded_build", "supported_text"]

SUPPORTED_VERSIONS: tuple[tuple[int, int], ...] = ((3, 11), (3, 12), (3, 13))


def supported_text() -> str:
    """The supported versions as text, e.g. ``"3.11, 3.12, 3.13"``."""
    return ", ".join(f"{major}.{minor}" for major, minor in SUPPORTED_VERSIONS)


def is_free_threaded_build() -> bool:
    """True on a free-threaded CPython build (``Py_GIL_DISABLED``, PEP 703), whether or not
    the GIL was turned back on at run time (``PYTHON_GIL=1``: the object layout stays the
    free-threaded one)."""
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def check_supported(
    version: tuple[int, ...] | None = None, free_threaded: bool | None = None
) -> None:
    """Raise ImportError unless ``version`` (default: the running interpreter's) is a
    supported CPython ``(major, minor)`` of the default build, the one with the GIL
    (``free_threaded``, default: :func:`is_free_threaded_build`, must be false)."""
    impl = sys.implementation.name
    major_minor = tuple((version or sys.version_info)[:2])
    if impl != "cpython" or major_minor not in SUPPORTED_VERSIONS:
        found = f"{impl} {major_minor[0]}.{major_minor[1]}"
        raise ImportError(
            f"torch_plugin supports CPython {supported_text()}; this is {found}. Its frame "
            "capture depends on each version's interpreter internals (see "
            "docs/internals/capture_hook.md): install it on a supported Python."
        )
    if is_free_threaded_build() if free_threaded is None else free_threaded:
        raise ImportError(
            f"torch_plugin supports CPython {supported_text()} in their default build, with "
            f"the GIL; this is free-threaded CPython {major_minor[0]}.{major_minor[1]}t "
            "(PEP 703), which it does not support: its frame capture and guards assume the "
            "GIL (see docs/internals/capture_hook.md). Install it on a default build of "
            "CPython (e.g. python3.13, not python3.13t)."
        )
