"""The CPython versions torch_plugin supports, and the import-time check.

Capture depends on CPython's private frame layout and on its bytecode, both of which change
with every minor version: csrc/capture/frame_compat.h (the frame layer) and
torch_plugin/capture/bytecode_compat.py (the bytecode layer) hold what differs. A version
neither has been audited for is refused at import with an ImportError naming the supported
versions, before anything touches the C++ extension (which would not have been built for it:
frame_compat.h stops the build with ``#error``). A leaf: imports only the standard library.
"""

from __future__ import annotations

import sys

__all__ = ["SUPPORTED_VERSIONS", "check_supported", "supported_text"]

SUPPORTED_VERSIONS: tuple[tuple[int, int], ...] = ((3, 11), (3, 12), (3, 13))


def supported_text() -> str:
    """The supported versions as text, e.g. ``"3.11, 3.12, 3.13"``."""
    return ", ".join(f"{major}.{minor}" for major, minor in SUPPORTED_VERSIONS)


def check_supported(version: tuple[int, ...] | None = None) -> None:
    """Raise ImportError unless ``version`` (default: the running interpreter's) is a
    supported CPython ``(major, minor)``."""
    impl = sys.implementation.name
    major_minor = tuple((version or sys.version_info)[:2])
    if impl != "cpython" or major_minor not in SUPPORTED_VERSIONS:
        found = f"{impl} {major_minor[0]}.{major_minor[1]}"
        raise ImportError(
            f"torch_plugin supports CPython {supported_text()}; this is {found}. Its frame "
            "capture depends on each version's interpreter internals (see "
            "docs/internals/capture_hook.md): install it on a supported Python."
        )
