"""Side effects: mutations of real Python state recorded while tracing, replayed after the graph.

While the translator runs, writes to state that outlives the frame are not performed; they
are recorded here, in program order (of each target's first write), and reads of the same
target inside the trace see the recorded value. After the compiled graph runs, the
transformed code replays them with the real values (tensors from the graph's outputs):

- ``setattr``: attribute writes on objects and nn.Modules (``self.cache = y``);
- ``global``: ``global g; g = ...`` (STORE_GLOBAL);
- ``cell``: ``nonlocal v; v = ...`` on a real closure cell;
- ``list`` / ``dict``: in-place mutation of a list or dict that came from the frame's inputs
  (``out.append(y)``, ``d["k"] = y``), replayed as ``lst[:] = items`` / ``d.clear(); d.update(...)``
  so the object keeps its identity.

Key class: :class:`SideEffects`; :meth:`SideEffects.make_replay` builds the replay function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .sources import Source
from .variables.base import VariableTracker


class SideEffects:
    """The recorded mutations of one capture."""

    def __init__(self) -> None:
        # key -> (kind, target, name, variable); dict order = order of first write.
        self._effects: dict[tuple, tuple[str, Any, Any, VariableTracker]] = {}
        self._views: list[VariableTracker] = []
        self._written: dict[int, Any] = {}  # id -> object seen by attribute writes
        # id -> the frame's variable of that object's instance ``__dict__``
        # (attribute_rules.InstanceDictVariable), kept equal to the dict the writes make
        self._dict_views: dict[int, VariableTracker] = {}

    def __bool__(self) -> bool:
        return bool(self._effects)

    def snapshot(self) -> tuple:
        """A value equal to a later ``snapshot()`` exactly when nothing was recorded in
        between (to check that inlined code had no side effect)."""
        return tuple(self._effects.items()), len(self._views)

    def values(self) -> list[VariableTracker]:
        return [entry[3] for entry in self._effects.values()]

    def store_attr(
        self,
        obj: Any,
        name: str,
        value: VariableTracker,
        source: Source | None = None,
        via_dict: bool = False,
    ) -> None:
        """``obj.name = value``. With ``source``, the replay writes to the object found at
        ``source`` at run time (``obj`` is the one seen while tracing, and keys the write).
        ``via_dict``: the write was ``obj.__dict__[name] = value`` and is replayed as that
        (no ``__setattr__``, no descriptor). A write after a deletion of the same name
        (``del o.a; o.a = v``) moves the key to the end of the instance ``__dict__``, as
        CPython's dict does: the replay deletes the key first."""
        target = source if source is not None else obj
        key = ("setattr", id(obj), name)
        kind = "dictset" if via_dict else "setattr"
        prev = self._effects.get(key)
        if prev is not None and prev[0] in _DELETES + _REINSERTS:
            kind = "re" + kind
        self._effects[key] = (kind, target, name, value)
        self._written[id(obj)] = obj
        view = self._dict_views.get(id(obj))
        if view is not None:
            view.items[name] = value

    def pending_attr(self, obj: Any, name: str) -> VariableTracker | None:
        entry = self._effects.get(("setattr", id(obj), name))
        if entry is not None and entry[0] in _DELETES:
            from . import graph_break_types as gbt
            from .exc import unimplemented

            unimplemented(gbt.EXCEPTION, f"attribute {name!r} was deleted in the frame")
        return entry[3] if entry is not None else None

    def delete_attr(
        self,
        obj: Any,
        name: str,
        source: Source | None = None,
        existed: bool = True,
        via_dict: bool = False,
    ) -> None:
        """``del obj.name`` (attribute_rules.delete_object_attr checked it can succeed).
        ``existed``: the real object has the attribute now (guarded); when False the
        attribute was set in this frame, and deleting it only drops that pending write.
        ``via_dict``: ``del obj.__dict__[name]`` (replayed as that, no ``__delattr__``)."""
        from .variables.constant import ConstantVariable

        target = source if source is not None else obj
        key = ("setattr", id(obj), name)
        self._effects.pop(key, None)  # a write before the deletion is not replayed
        view = self._dict_views.get(id(obj))
        if view is not None:
            view.items.pop(name, None)
        if not existed:
            return
        kind = "dictdel" if via_dict else "delattr"
        self._effects[key] = (kind, target, name, ConstantVariable(None))
        self._written[id(obj)] = obj

    def register_dict_view(self, obj: Any, view: VariableTracker) -> None:
        """``view`` models ``obj.__dict__`` from now on: later writes update it."""
        self._dict_views[id(obj)] = view
        self._written[id(obj)] = obj  # keeps the id unique while the capture runs

    def dict_view(self, obj: Any) -> VariableTracker | None:
        return self._dict_views.get(id(obj))

    def attr_effects(self, obj: Any) -> list[tuple[str, str, VariableTracker]]:
        """``(kind, name, value)`` of each recorded write or deletion of ``obj``'s
        attributes, in the order the instance ``__dict__`` saw them last (kinds: setattr,
        dictset, delattr, dictdel, and resetattr / redictset: a write after a deletion)."""
        return [
            (kind, name, var)
            for key, (kind, _t, name, var) in self._effects.items()
            if key[0] == "setattr" and key[1] == id(obj)
        ]

    def has_attr_writes(self, obj: Any) -> bool:
        """True if an attribute of ``obj`` was written or deleted in this frame."""
        return any(k[0] == "setattr" and k[1] == id(obj) for k in self._effects)

    def store_global(self, f_globals: dict, name: str, value: VariableTracker) -> None:
        self._effects[("global", id(f_globals), name)] = ("global", f_globals, name, value)

    def pending_global(self, f_globals: dict, name: str) -> VariableTracker | None:
        entry = self._effects.get(("global", id(f_globals), name))
        return entry[3] if entry is not None else None

    def store_cell(self, cell: Any, value: VariableTracker, source=None) -> None:
        """A write to a real closure cell. ``source`` (a ClosureCellSource) is given for the
        captured frame's own cells, which differ between function objects sharing the code."""
        self._effects[("cell", id(cell))] = (
            "cell",
            source if source is not None else cell,
            None,
            value,
        )

    def mutate_container(self, real: Any, var: VariableTracker) -> None:
        """``var`` (a list/dict variable from the frame's inputs) was mutated in place; the
        object is reached at run time through ``var.source``."""
        kind = "list" if isinstance(real, list) else "dict"
        if type(real).__name__ == "deque":
            kind = "deque"  # replayed as clear(); extend(items)
        self._effects.setdefault((kind, id(real)), (kind, var.source, None, var))

    def caller_visible(self) -> list[str]:
        """The effects a caller could observe after the call, described (``setattr
        M['x'].compiling``); an attribute write whose final value is a constant equal to the
        attribute's value now (a flag set and reset inside the call, as HF's
        ``CompileableContextVar``) is not listed. ``export`` refuses the listed ones."""
        from .variables.constant import ConstantVariable

        out = []
        for key, (kind, target, name, var) in self._effects.items():
            if kind == "setattr" and isinstance(var, ConstantVariable):
                obj = self._written.get(key[1])
                sentinel = object()
                now = getattr(obj, name, sentinel)
                if now is not sentinel and type(now) is type(var.value) and now == var.value:
                    continue
            where = (
                target.name()
                if hasattr(target, "name") and callable(target.name)
                else (type(target).__name__)
            )
            out.append(f"{kind} {where}" + (f".{name}" if isinstance(name, str) else ""))
        return out

    def mutated_objects(self) -> set[int]:
        """Ids of the real objects this capture writes to (attribute writes, mutated input
        lists and dicts)."""
        out = set()
        for key in self._effects:
            if key[0] in ("setattr", "list", "dict", "deque"):
                out.add(key[1])
        return out

    def make_replay(self, output_graph, outputs: list) -> Callable[..., None] | None:
        """A function ``replay(graph_outputs, runtime_args, memo)`` performing every effect,
        or None if none. Tensors it needs are appended to ``outputs`` (the graph's outputs);
        objects reached through sources become runtime arguments of ``output_graph``."""
        from .output_structure import flatten_output, rebuild

        if not self._effects:
            return None
        plan = []
        for kind, target, name, var in self._effects.values():
            if isinstance(target, Source):
                target = ("arg", output_graph.runtime_arg(target))
            if kind in ("list", "dict", "deque"):
                items_var = _items_view(var)
                # The spec names the view by id(); held for the capture's lifetime so no
                # later variable reuses that id (the replay's memo and the graph-break
                # reconstruction match containers by it).
                self._views.append(items_var)
                spec = flatten_output(items_var, outputs, output_graph)
            else:
                spec = flatten_output(var, outputs, output_graph)
            plan.append((kind, target, name, spec))

        def replay(graph_outputs, args, memo) -> None:
            """Perform the effects; ``memo`` receives every list/dict built (by variable id)."""
            for kind, target, name, spec in plan:
                if isinstance(target, tuple) and target[0] == "arg":
                    target = args[target[1]]
                value = rebuild(spec, graph_outputs, memo, args)
                if kind in _REINSERTS:  # deleted, then written again: the key moves last
                    del target.__dict__[name]
                    kind = kind[2:]
                if kind == "setattr":
                    setattr(target, name, value)
                elif kind == "delattr":
                    delattr(target, name)
                elif kind == "dictset":
                    target.__dict__[name] = value
                elif kind == "dictdel":
                    del target.__dict__[name]
                elif kind == "global":
                    target[name] = value
                elif kind == "cell":
                    target.cell_contents = value
                elif kind == "list":
                    target[:] = value
                elif kind == "deque":
                    target.clear()
                    target.extend(value)
                else:
                    target.clear()
                    target.update(value)

        replay.container_ids = set()
        for _kind, _target, _name, spec in plan:
            _collect_ids(spec, replay.container_ids)
        return replay


_DELETES = ("delattr", "dictdel")
_REINSERTS = ("resetattr", "redictset")


def _items_view(var: VariableTracker) -> VariableTracker:
    """A local copy of a mutated input container's current items (flattened by value)."""
    from .variables.dicts import ConstDictVariable
    from .variables.lists import ListVariable

    if isinstance(var, ConstDictVariable):
        return ConstDictVariable(dict(var.items), mutable_local=True)
    return ListVariable(list(var.items), mutable_local=True)


def _collect_ids(spec: tuple, out: set) -> None:
    kind = spec[0]
    if kind == "list":
        out.add(spec[2])
        for s in spec[1]:
            _collect_ids(s, out)
    elif kind == "dict":
        out.add(spec[3])
        for _, s in spec[2]:
            _collect_ids(s, out)
    elif kind == "tuple":
        if len(spec) > 2:
            out.add(spec[2])
        for s in spec[1]:
            _collect_ids(s, out)
    elif kind in ("model_output", "object"):
        out.add(spec[3])
        for _key, s in spec[2]:
            _collect_ids(s, out)
    elif kind == "set":
        out.add(spec[3])
        for s in spec[2]:
            _collect_ids(s, out)
    elif kind == "namedtuple":
        if len(spec) > 3:
            out.add(spec[3])
        for s in spec[2]:
            _collect_ids(
                s[1] if isinstance(s, tuple) and len(s) == 2 and isinstance(s[0], str) else s, out
            )
