"""Errors raised while capturing a frame.

Key classes:
- :class:`Unsupported`: the translator met something it cannot capture (yet). The frame
  then runs unmodified; the reason and the user's file:line are logged.
- :class:`UserSourceLocation`: where in the user's code the translator was.
- :class:`GraphBreakReason`: the reason text, which also names its graph-break type
  (graph_break_types.py).
"""

from __future__ import annotations

import dataclasses
import linecache
from typing import NoReturn

from .graph_break_types import GraphBreakType


@dataclasses.dataclass(frozen=True)
class UserSourceLocation:
    """A position in user code: file, line and function name, with the source line."""

    filename: str
    lineno: int
    function: str

    @property
    def source_line(self) -> str:
        return linecache.getline(self.filename, self.lineno).strip()

    def __str__(self) -> str:
        text = f'File "{self.filename}", line {self.lineno}, in {self.function}'
        line = self.source_line
        return f"{text}\n    {line}" if line else text


class GraphBreakReason(str):
    """The text of a graph-break reason (``"call to builtin print()"``) that also names its
    type (:attr:`gb_type`). It is a ``str``, so the statistics, capture records and errors
    that pass the reason along carry the type without changing shape; ``explain`` and the
    logs read it to show the type's id and hint."""

    gb_type: GraphBreakType

    def __new__(cls, text: str, gb_type: GraphBreakType) -> GraphBreakReason:
        self = super().__new__(cls, text)
        self.gb_type = gb_type
        return self

    def __reduce__(self):
        return (GraphBreakReason, (str(self), self.gb_type))


class Unsupported(Exception):
    """The translator cannot capture this frame.

    Attributes:
        reason: one line saying what was not supported (``"call to print"``); a
            :class:`GraphBreakReason` when the type is known.
        gb_type: the graph-break type (graph_break_types.py), or None if not given.
        location: the innermost user location being translated when it happened, if known.
    """

    def __init__(
        self,
        reason: str,
        location: UserSourceLocation | None = None,
        gb_type: GraphBreakType | None = None,
    ):
        super().__init__(reason)
        if gb_type is None:
            gb_type = getattr(reason, "gb_type", None)
        self.gb_type = gb_type
        self.reason = GraphBreakReason(reason, gb_type) if gb_type is not None else reason
        self.location = location
        # Index (in dis.get_instructions order) of the captured frame's own instruction that
        # was running when this was raised: where a graph break would go.
        self.root_index: int | None = None
        # Index of the BEFORE_WITH of the outermost ``with`` block of the captured frame
        # open at that point (None: none): a graph break inside a with block is not
        # possible, one at its ``with`` statement is.
        self.with_index: int | None = None

    def __str__(self) -> str:
        if self.location is None:
            return str(self.reason)
        return f"{self.reason}\n  at {self.location}"

    def describe(self) -> str:
        """``str(self)`` and, when the type is known, a line with its id, name and hint (for
        the graph_breaks log)."""
        if self.gb_type is None:
            return str(self)
        return f"{self}\n  [{self.gb_type.summary()}]"


def unimplemented(gb_type: GraphBreakType, context: str) -> NoReturn:
    """Raise :class:`Unsupported`: a graph break of type ``gb_type`` (graph_break_types.py)
    with ``context``, the specific detail, as its reason; the translator adds the location."""
    raise Unsupported(context, gb_type=gb_type)
