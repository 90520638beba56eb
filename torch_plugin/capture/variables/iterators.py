"""Lazy iterators: generators of inlined generator functions, and enumerate/zip/map/filter
over them.

A generator function called from captured code (``def gen(): yield ...``, and generator
expressions) becomes a :class:`GeneratorVariable` that holds the function's own inlining
translator, suspended at its last ``yield``. Each ``next`` (a ``for`` loop's FOR_ITER,
``next()``, ``any``/``all``) resumes it until the next ``yield``, so the generator's body
runs exactly as far as eager Python runs it, interleaved with the caller as in CPython: a
loop that stops early leaves the rest of the body unrun (issue #10: materializing the
generator at the call ran it past where eager stopped). Consuming it whole (``list(g)``,
``sum(g)``, unpacking) runs it to the end.

:class:`LazyIteratorVariable` is an itertools iterator over such an iterator, pulling from
its arguments in CPython's order (``enumerate``/``zip``/``map``/``filter`` and the iterators
over live containers are in container_iterators.py).

Neither can be rebuilt at a graph break (a suspended generator has no constructor): a break
while one is live stops capture of the frame at the break's reconstruction, and the frame
runs unmodified.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import graph_break_types as gbt
from ..exc import unimplemented
from .base import VariableTracker

MAX_ITEMS = 1_000_000  # items one iterator may give while consumed whole at capture


class IteratorVariable(VariableTracker):
    """An iterator advanced one item at a time by FOR_ITER and ``next()``."""

    def next_item(self) -> VariableTracker | None:
        """The next item, or None when the iterator is exhausted."""
        raise NotImplementedError

    def unpack_var_sequence(self, tx) -> list[VariableTracker]:
        out = []
        while (item := self.next_item()) is not None:
            out.append(item)
            if len(out) > MAX_ITEMS:  # a generator over a list it appends to, ...
                unimplemented(gbt.CAPTURE_LIMIT, "an iterator gave too many items (endless?)")
        return out

    def python_type(self) -> type:
        return type(iter([]))


class GeneratorVariable(IteratorVariable):
    """A generator object of an inlined generator function; ``sub`` is the translator of
    its body, run up to the next ``yield`` by each :meth:`next_item`."""

    def __init__(self, sub) -> None:
        super().__init__()
        self.sub = sub
        self.done = False
        self.started = False

    def next_item(self) -> VariableTracker | None:
        if self.done:
            return None
        self.started = True
        item = self.sub.run_to_yield()
        if item is None:
            self.done = True  # returned: StopIteration
        return item

    def send_item(self, value: VariableTracker) -> VariableTracker | None:
        """``gen.send(value)``: the paused ``yield`` evaluates to ``value``; the next yielded
        value, or None once the body returned. Sending a value other than None to a
        generator not started raises TypeError in eager (a graph break)."""
        from .constant import ConstantVariable

        is_none = isinstance(value, ConstantVariable) and value.value is None
        if self.done:
            return None
        if not self.started:
            if not is_none:
                unimplemented(
                    gbt.EXCEPTION, "can't send non-None value to a just-started generator"
                )
        else:
            self.sub.stack[-1] = value  # the value YIELD_VALUE left for the resumed body
        return self.next_item()

    def var_getattr(self, tx, name):
        if name in ("send", "__next__", "__iter__"):
            from .base import method_getattr

            return method_getattr(self, name)
        return super().var_getattr(tx, name)

    def return_value(self) -> VariableTracker | None:
        """What the body returned (``StopIteration.value``), once done."""
        return getattr(self.sub, "generator_return", None)

    def call_method(self, tx, name, args, kwargs):
        if name == "__next__" and not args and not kwargs:
            item = self.next_item()
            if item is None:
                unimplemented(gbt.GENERATOR, "next() on an exhausted generator (StopIteration)")
            return item
        if name == "send" and len(args) == 1 and not kwargs:
            item = self.send_item(args[0])
            if item is None:
                unimplemented(gbt.GENERATOR, "generator.send() on a finished generator")
            return item
        if name == "__iter__" and not args and not kwargs:
            return self
        unimplemented(gbt.GENERATOR, f"generator.{name}() in captured code")

    def python_type(self) -> type:
        import types

        return types.GeneratorType

    def __repr__(self) -> str:
        return f"GeneratorVariable({self.sub.code.co_name}{', done' if self.done else ''})"


class LazyIteratorVariable(IteratorVariable):
    """An iterator whose items are produced on demand by ``produce()`` (None: exhausted)."""

    def __init__(self, produce: Callable[[], VariableTracker | None], name: str) -> None:
        super().__init__()
        self.produce = produce
        self.name = name
        self.done = False

    def next_item(self) -> VariableTracker | None:
        if self.done:
            return None
        item = self.produce()
        if item is None:
            self.done = True
        return item

    def call_method(self, tx, name, args, kwargs):
        if name == "__iter__" and not args and not kwargs:
            return self
        unimplemented(gbt.UNMODELLED_VALUE, f"{self.name} iterator .{name}() in captured code")

    def __repr__(self) -> str:
        return f"LazyIteratorVariable({self.name})"


def as_iterator(tx, var: VariableTracker) -> IteratorVariable:
    """``iter(var)``: the iterator itself, or CPython's iterator over a container
    (``container_iterators.make_iterator``: live over lists, dicts and sets)."""
    from .container_iterators import make_iterator

    return make_iterator(tx, var)
