"""Errors raised while capturing a frame.

Key classes:
- :class:`Unsupported`: the translator met something it cannot capture (yet). The frame
  then runs unmodified; the reason and the user's file:line are logged.
- :class:`UserSourceLocation`: where in the user's code the translator was.
"""

from __future__ import annotations

import dataclasses
import linecache


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


class Unsupported(Exception):
    """The translator cannot capture this frame.

    Attributes:
        reason: one line saying what was not supported (``"call to print"``).
        location: the innermost user location being translated when it happened, if known.
    """

    def __init__(self, reason: str, location: UserSourceLocation | None = None):
        super().__init__(reason)
        self.reason = reason
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
            return self.reason
        return f"{self.reason}\n  at {self.location}"


def unimplemented(reason: str) -> NoReturn:  # noqa: F821
    """Raise :class:`Unsupported` with ``reason``; the translator adds the location."""
    raise Unsupported(reason)
