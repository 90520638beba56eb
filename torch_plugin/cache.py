"""The disk cache of the "plugin" compiler from the command line.

Command line::

    python -m torch_plugin.cache info     # where it is, entries and bytes per kind, the limit
    python -m torch_plugin.cache clear    # remove every entry (the folder stays)
    python -m torch_plugin.cache evict    # remove least recently used entries down to the limit

The folder, its entries and its size limit are :mod:`torch_plugin.compiler.cache_dir`'s (its
one owner); this module re-exports its functions for scripts.

Key parts: :func:`main`.
"""

from __future__ import annotations

import argparse
import sys

from torch_plugin.compiler.cache_dir import (
    DEFAULT_LIMIT_GB,
    CacheInfo,
    Entry,
    cache_root,
    clear,
    enforce_limit,
    entries,
    human,
    info,
    limit_bytes,
    touch,
)

__all__ = [
    "DEFAULT_LIMIT_GB",
    "CacheInfo",
    "Entry",
    "cache_root",
    "clear",
    "enforce_limit",
    "entries",
    "info",
    "limit_bytes",
    "main",
    "touch",
]


def main(argv: list[str] | None = None) -> int:
    """``python -m torch_plugin.cache info|clear|evict`` (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m torch_plugin.cache", description="torch_plugin's disk cache"
    )
    parser.add_argument("command", choices=("info", "clear", "evict"))
    args = parser.parse_args(argv)
    root = cache_root()
    try:
        if args.command == "info":
            print(info(root))
        elif args.command == "clear":
            print(f"removed {clear(root)} entries from {root}")
        else:
            print(f"removed {human(enforce_limit(root))} from {root}")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
