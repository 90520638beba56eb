"""Probes of the issue #31 audit shared by more than one of its test files
(tests/python/capture/test_issue31_audit.py, test_issue31_audit_gaps.py,
test_issue31_regressions.py; tests are imported with ``--import-mode=importlib``, so one test
file cannot import another): the user classes and argument factories both suites' probes
take, the probes a dedicated test also runs, and :func:`probe_params`, which turns a probe
table into ``test_probe``'s parameters."""

from __future__ import annotations

import collections
import functools

import pytest
import torch


def _usr(a, b=2):
    return a * b


NT = collections.namedtuple("NT", ["a", "b"])
P = functools.partial(_usr, b=3)


class Vec:
    def __init__(self, v, scale=1):
        self.v = v
        self.scale = scale

    def __add__(self, other):
        return Vec(self.v + other.v, self.scale + other.scale)

    def __eq__(self, other):
        return isinstance(other, Vec) and self.scale == other.scale

    def __iter__(self):
        return iter([self.v, self.v * self.scale])

    def __str__(self):
        return f"Vec({self.scale})"

    __hash__ = None


class Box:
    def __init__(self, v):
        self.v = v


def _box3():
    return lambda: (torch.randn(3), Box(torch.randn(3)))


def _box4():
    return lambda: (torch.randn(4), Box(torch.randn(4)))


def _vec(n, s):
    return lambda: (torch.randn(n), Vec(torch.randn(n), s))


_BOX_CALLS = (_box3(), _box3(), _box4())
_VEC_CALLS = (_vec(3, 2), _vec(3, 3), _vec(4, 5))


def _getset_descriptor(x):
    return x * torch.Tensor.ndim.__get__(x) + type(P).func.__get__(P)(x)


def _is_set_to(x):
    y = x.view(-1)
    return x * y.is_set_to(x) + x.is_set_to(x)


def _inference_mode(x):
    with torch.inference_mode():
        y = x * 2
    return y + 1


def probe_params(probes: dict[str, tuple]) -> list:
    """``test_probe``'s parameters from a table of name -> (issue class, fn, calls, observe,
    reason when it still breaks or None): id ``class-name``, ``xfail(strict=True)`` with the
    reason where there is one."""
    out = []
    for name, (cls, *_, reason) in probes.items():
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(name, id=f"{cls}-{name}", marks=marks))
    return out
