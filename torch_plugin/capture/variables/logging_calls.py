"""Calls of ``logging.Logger`` methods in captured code.

A ``logger.debug(...)`` (``info``, ``warning``, ...) whose logger would drop the record at
that level is a no-op: the call is left out of the capture, with guards that pin the answer
of ``logger.isEnabledFor(level)`` (CPython's Lib/logging/__init__.py): the logger's
``disabled`` flag, its manager's ``disable`` level, and the ``level`` of each logger from it
up to the first with a level set, all read through the logger's source on every call, so a
program that later turns that logging on recompiles and logs. A call that would emit a record
(handlers, formatting, I/O) is a graph break, as before. HF's ``_is_package_available``
logs at debug level inside forward passes.

Key parts: :func:`is_logger_call`, :func:`call_logger`.
"""

from __future__ import annotations

import logging

from .. import graph_break_types as gbt
from ..exc import unimplemented
from ..sources import AttrSource
from .base import VariableTracker
from .constant import ConstantVariable

_LEVELS = {
    logging.Logger.debug: logging.DEBUG,
    logging.Logger.info: logging.INFO,
    logging.Logger.warning: logging.WARNING,
    logging.Logger.error: logging.ERROR,
    logging.Logger.exception: logging.ERROR,
    logging.Logger.critical: logging.CRITICAL,
}


def is_logger_call(fn_var: VariableTracker) -> bool:
    """Whether ``fn_var`` is a ``logging.Logger`` method of :data:`_LEVELS`, bound."""
    from .functions import UserMethodVariable

    return isinstance(fn_var, UserMethodVariable) and fn_var.fn in _LEVELS


def call_logger(tx, fn_var, args, kwargs) -> VariableTracker:
    """``logger.<level>(...)``: None when the logger drops the record (guarded as the module
    docstring says); a graph break otherwise."""
    from .user_defined import UserDefinedObjectVariable

    obj = fn_var.obj
    name = fn_var.fn.__name__
    if (
        not isinstance(obj, UserDefinedObjectVariable)
        or obj.source is None
        or not isinstance(obj.value, logging.Logger)
    ):
        unimplemented(gbt.LOGGING, f"logging call {name}() on a logger not read from a source")
    logger: logging.Logger = obj.value
    level = _LEVELS[fn_var.fn]
    if logger.isEnabledFor(level):
        unimplemented(gbt.LOGGING, f"logging call {logger.name}.{name}() that emits a record")
    guards = tx.output.guards
    guards.equals_match(AttrSource(obj.source, "disabled"), logger.disabled)
    if logger.disabled:
        return ConstantVariable(None)
    manager = AttrSource(obj.source, "manager")
    guards.equals_match(AttrSource(manager, "disable"), logger.manager.disable)
    if logger.manager.disable >= level:
        return ConstantVariable(None)
    source, current = obj.source, logger
    while current is not None:
        guards.equals_match(AttrSource(source, "level"), current.level)
        if current.level:
            break
        guards.type_match(AttrSource(source, "parent"), current.parent)
        source, current = AttrSource(source, "parent"), current.parent
    return ConstantVariable(None)
