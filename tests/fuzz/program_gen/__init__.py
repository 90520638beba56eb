"""Random small Python programs for differential testing of capture (see differential.py).

:func:`generate` makes a :class:`Program` from a seed, deterministically (``random.Random``,
no global state). A program is Python source: a module with globals (a tensor, a list, a
dict, a user object, an int, a StringIO), helper classes (a ``Box``, a context manager
``Rec`` that appends to a list, a generator function with side effects, an inlined helper),
and ``make()``, which returns the function under test: a closure ``f`` over a few cells. The
body mixes tensor ops (pointwise, reductions, matmul, views, cat/stack), indexing and
setitem (also through views), in-place ops on locals, arguments and globals, int / float /
bool arguments (0 and 1 included), list/dict/object mutation through two paths (global and a
local alias, an object's attribute aliasing a global list, an argument that *is* a global),
``nonlocal`` and ``global`` writes, branches on shapes and Python values, for/while loops,
partially consumed generators, context managers (no_grad, enable_grad, a user one, autocast)
and graph breaks (print to a StringIO, ``.item()``, ``.tolist()``, data-dependent ``if``).

One program in four (an RNG of its own: the statements stay those of the seed) has a
function ``f()`` without parameters ("zero-args", FRAMES): it unpacks its inputs from a
global ``ARGS`` or from a closure cell holding the global list ``ARGS_BOX``, which
``inputs(call)`` fills; its resume functions start with a stack value, not an argument.

Newer families (NEW_FAMILIES, each excludable by name): the identity of in-place results
(``r = t.add_(1)``; ``r is t`` returned, branched on, stored), descriptors (set-only, get+set,
non-data, property with setter) on a global, an argument or a local object, attributes on
tensors (``x.tag`` set by the caller on some calls; ``hasattr`` / ``getattr`` with a default
inside, also of FakeTensor-only names), attributes on objects built inside (``o.extra`` on a
user class, namedtuple and typing.NamedTuple subclasses), and NumPy scalars (argument,
global, constants) with tensors of several dtypes. Their module code (PRELUDE_EXTRA), globals
and arguments appear only in programs that use them.

``inputs(call)`` in the same source builds each call's arguments: calls 0 and 1 have the
same shapes and Python values (1 must hit the cache), call 2 changes one thing (a size, an
int, a bool, a float, a list length) so it recompiles, and call 3 changes it once more
(automatic dynamic makes the second recompile symbolic: its own code path).

Shapes: 2-D tensors are (R, C), with R = 3..6 changing between calls and C = 2..4 fixed per
program; variables are tracked by "kind": RC (R, C), R (R,), C (C,), S (scalar), CC (C, C).
Index constants stay below 3 so they are valid for every R.

:func:`minimize` drops statements (and returned values) while a predicate still holds.

The package, in the order a program is made and used:

- ``preludes``: the module code every program starts with (PRELUDE) and the code each newer
  family adds when used (PRELUDE_EXTRA);
- ``program``: a program as data (:class:`Program`, :class:`Block`) and its source text;
- ``expressions``: random tensor expressions of a given shape kind, and Python values;
- ``statements``: the original statement families (assignments, in-place ops, setitem,
  containers, globals, closures, branches, loops, generators, context managers, graph breaks)
  and the table that picks one;
- ``newer_families``: the families of NEW_FAMILIES and the globals/arguments they add;
- ``generator``: :func:`generate` (one generator object per seed: globals, inputs, body);
- ``running``: :func:`check_program` (a program's source through differential.run_case);
- ``minimizer``: :func:`minimize`.

The generator's output for a seed must not depend on how this code is split: CI's seeds and
the seeds in bug reports name programs.
"""

from .generator import FEATURES, generate
from .minimizer import minimize
from .newer_families import NEW_FAMILIES
from .preludes import PRELUDE, PRELUDE_EXTRA
from .program import FRAMES, Block, Program
from .running import N_CALLS, build_world, check_program

__all__ = [
    "FEATURES",
    "FRAMES",
    "NEW_FAMILIES",
    "N_CALLS",
    "PRELUDE",
    "PRELUDE_EXTRA",
    "Block",
    "Program",
    "build_world",
    "check_program",
    "generate",
    "minimize",
]
