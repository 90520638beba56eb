"""The registry of graph-break types: a fixed id, an explanation and a hint for each.

Every place capture gives up (``exc.unimplemented(gb_type, context)``) names one of the types
below; ``context`` is the specific detail (``"call to builtin print()"``). The id is stable
across releases (never reused or renumbered), so it can be searched for in the docs
(docs/troubleshooting.md, whose table a test checks against :data:`GRAPH_BREAK_TYPES`), in
``torch_plugin.explain()`` reports and in the ``graph_breaks`` log. PyTorch Dynamo's
``graph_break_registry.json`` (GB0000-style ids) is the model.

This module imports nothing of the project: every capture module may use it.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class GraphBreakType:
    """One kind of graph break.

    Attributes:
        id: fixed id, ``"GB001"``...; never reused.
        name: short name (``"data-dependent value"``).
        explanation: what happened, in the user's terms.
        hint: what the user can do about it.
    """

    id: str
    name: str
    explanation: str
    hint: str

    def summary(self) -> str:
        """One line for reports and logs: ``GB001 data-dependent value: hint``."""
        return f"{self.id} {self.name}: {self.hint}"


GRAPH_BREAK_TYPES: list[GraphBreakType] = []


def _type(id: str, name: str, explanation: str, hint: str) -> GraphBreakType:
    t = GraphBreakType(id, name, explanation, hint)
    assert all(o.id != id for o in GRAPH_BREAK_TYPES), id
    GRAPH_BREAK_TYPES.append(t)
    return t


DATA_DEPENDENT = _type(
    "GB001",
    "data-dependent value",
    "A Python value or branch depends on a tensor's data (bool(t), t.item(), t.tolist(), "
    "`if t.sum() > 0`, `x in t`, an operation whose output shape depends on the data). "
    "Capture only knows shapes, dtypes and devices, not values.",
    "Keep the decision in tensor code (torch.where, masking) or compute it outside the "
    "optimized function; the graph is split here and the rest is captured in a resume "
    "function.",
)
UNSUPPORTED_BUILTIN = _type(
    "GB002",
    "builtin call not modelled",
    "A call to a Python builtin (input, open, hasattr on an unknown object, next on an "
    "unknown iterator, ...) or a builtin or itertools function with arguments the capture "
    "does not model.",
    "Move the call out of the optimized function, or give it arguments known at capture "
    "time (constants, shapes).",
)
NON_PYTHON_CALL = _type(
    "GB003",
    "call into C or non-Python code",
    "A call to a function or method written in C (or another non-Python callable) that "
    "is neither a torch operation nor a modelled builtin: capture cannot look inside it "
    "and does not know its effects.",
    "Use the torch equivalent, or wrap the call in a function decorated with "
    "torch_plugin.disable so that it runs outside the graph on purpose.",
)
LOGGING = _type(
    "GB004",
    "print or logging",
    "A print() or a logging call that emits a record (or a logger used in a way that is "
    "not modelled). Output is an effect outside the graph; it must happen when the code "
    "runs, not when it is captured.",
    "Log outside the optimized function, lower the logger's level, or guard the call with "
    "`if not torch.compiler.is_compiling():`.",
)
UNSUPPORTED_BYTECODE = _type(
    "GB005",
    "bytecode not supported",
    "An instruction, or a form of an instruction, the symbolic interpreter does not "
    "handle yet (a set display, an intrinsic, a comprehension kind).",
    "Rewrite the statement in a simpler form (a list instead of a set, a plain loop), or "
    "report it with the explain() output.",
)
SIDE_EFFECT = _type(
    "GB006",
    "mutation that cannot be replayed",
    "The code changes state outside the frame (a list or dict of the inputs, an attribute, "
    "a nonlocal cell, grad mode, a tensor's requires_grad) in a way the compiled code "
    "could not replay after the graph runs with the same result as eager.",
    "Return new values instead of mutating the inputs in place, or do the mutation "
    "outside the optimized function.",
)
GENERATOR = _type(
    "GB007",
    "generator or async code",
    "A yield in the captured frame itself, a coroutine or async generator, or a "
    "generator method other than next(): capture models only generators consumed inside "
    "the captured code.",
    "Consume the generator inside the optimized function (for loop, list(...)), or "
    "optimize the code that the generator calls instead of the generator.",
)
NO_BREAK_HERE = _type(
    "GB008",
    "no graph break possible here",
    "Capture stopped at an instruction where a graph break cannot keep Python's semantics "
    "(inside a try block, at a loop header, with values on the stack that cannot be "
    "rebuilt); the whole frame runs without compiling.",
    "Move the unsupported statement out of the try/with block or loop, or into a "
    "separate function, so that the graph can be split before it.",
)
EXCEPTION = _type(
    "GB009",
    "the code raises an exception",
    "The code raises here in eager (a raise statement, a failed assert, an AttributeError, "
    "KeyError, IndexError, TypeError from a call, StopIteration): exceptions are not "
    "captured, the frame runs as Python and raises as usual.",
    "Nothing to do if the exception is intended; otherwise fix the error eager would raise.",
)
UNMODELLED_VALUE = _type(
    "GB010",
    "operation on a value kind not modelled",
    "An attribute, call, method, truth test or iteration on a kind of value the "
    "translator does not model for that operation.",
    "Use plain Python values, tensors and nn.Modules in the optimized code, or move the "
    "operation outside it; explain() shows the value.",
)
OBJECT_CONSTRUCTION = _type(
    "GB011",
    "object construction not modelled",
    "Building an object of a user class (its __init__ or __new__ not modelled), an "
    "nn.Module, or a class with type() inside the captured code.",
    "Build the object once outside the optimized function and pass it in, or use a "
    "dataclass or namedtuple.",
)
NN_MODULE = _type(
    "GB012",
    "nn.Module use not modelled",
    "A use of an nn.Module the capture does not model: hooks, indexing or slicing a "
    "container module in an unusual way, nn.Module methods with arguments, assignment to "
    "a parameter or buffer, an attribute implemented in C.",
    "Call the module (or its forward) directly; register hooks outside the optimized "
    "code, or remove them while compiling.",
)
RUNS_OUTSIDE_CAPTURE = _type(
    "GB013",
    "function marked to run outside capture",
    "A call to a function that must run as Python: marked by torch_plugin.disable or "
    "torch.compiler.disable, compiled by torch.compile, or torch.utils.checkpoint.",
    "Intended: the graph is split around the call. Remove the mark to capture through it.",
)
SKIPPED_CODE = _type(
    "GB014",
    "library code that is not inlined",
    "A call into code whose behaviour capture does not model (standard-library modules "
    "such as logging, threading, warnings; torch.nn.Module internals).",
    "Call that code outside the optimized function.",
)
AUTOGRAD_FUNCTION = _type(
    "GB015",
    "custom autograd.Function not modelled",
    "A torch.autograd.Function whose forward/backward or use of ctx is not modelled "
    "(setup_context, keyword arguments, forward returning an input or its ctx, side "
    "effects in forward).",
    "Keep forward and backward as Python staticmethods that take and return tensors, and "
    "use ctx only through save_for_backward and plain attributes.",
)
CONTEXT_MANAGER = _type(
    "GB016",
    "context manager not modelled",
    "A with block on a context manager that is not modelled (one written in C, a "
    "@contextmanager that yields twice, exits out of order, an exception through "
    "__exit__, torch.no_grad or autocast used as a decorator inside captured code).",
    "Use torch.no_grad/enable_grad/autocast as with blocks, or move the with block outside "
    "the optimized function.",
)
CAPTURE_LIMIT = _type(
    "GB017",
    "capture limit reached",
    "Capture interpreted too many instructions or inlined too deep (an unbounded loop or "
    "deep recursion).",
    "Bound the loop by a value known at capture time, or make the recursion a loop.",
)
FAKE_TENSOR = _type(
    "GB018",
    "torch operation not traceable",
    "A torch operation could not be run on FakeTensors (shape propagation) or takes or "
    "returns a value the graph cannot hold (a tensor subclass input, a non-tensor "
    "result, a NumPy scalar that changes the result).",
    "Check the operation runs in eager with these inputs; use plain tensors and Python "
    "numbers as arguments.",
)
VALUE_NOT_CONSTANT = _type(
    "GB019",
    "value not known at capture time",
    "A value capture needs as a constant (a slice bound, a dict key, an attribute name, a "
    "format argument, an index) depends on something it only knows symbolically.",
    "Use values fixed at capture time (constants, shapes) there, or compute them outside "
    "the optimized function.",
)
ENVIRONMENT = _type(
    "GB020",
    "os.environ use not modelled",
    "os.environ or os.getenv used other than by reading a key known at capture time (the "
    "value read is guarded).",
    "Read the environment variable once, outside the optimized function.",
)
IMPORT = _type(
    "GB021",
    "import not modelled",
    "An import of a module that is not imported yet (importing runs the module's code), "
    "or an import probe (importlib.util.find_spec) that would import a package.",
    "Import the module at the top of the file, before calling the optimized function.",
)
ESCAPING_VALUE = _type(
    "GB022",
    "value cannot leave the compiled code",
    "A value built or changed during capture would leave the frame (returned, or live "
    "across a graph break) in a form the compiled code cannot rebuild on every call.",
    "Return tensors, Python constants and containers of them; build other objects outside "
    "the optimized function.",
)
INTERNAL_ERROR = _type(
    "GB023",
    "internal error in capture",
    "The translator itself failed (a bug in torch_plugin); the frame runs without "
    "compiling, so results stay correct.",
    "Please report it with the explain() output; torch_plugin.config.verbose = True logs "
    "the traceback.",
)
NOTHING_TO_CAPTURE = _type(
    "GB024",
    "nothing to capture",
    "The frame has no tensor operation (or nothing left to compile before the break): it "
    "runs as plain Python. Harmless.",
    "None needed.",
)

OPTIMIZER_STEP = _type(
    "GB025",
    "optimizer step",
    "A call of optimizer.step(): the graph ends before it, and the step runs as the backend "
    "runs optimizer steps (the plugin compiler compiles SGD, Adam and AdamW; other backends and "
    "optimizers run the optimizer's own step).",
    "Intended: the update runs after the graph. Nothing to change.",
)

BY_ID: dict[str, GraphBreakType] = {t.id: t for t in GRAPH_BREAK_TYPES}


def lookup(id: str) -> GraphBreakType:
    """The type with ``id`` (``"GB001"``); KeyError for an unknown id."""
    return BY_ID[id]


def markdown_table() -> str:
    """The registry as a Markdown table (docs/troubleshooting.md holds this text; a test
    checks that the two agree)."""
    rows = ["| id | type | what happened | what to do |", "|---|---|---|---|"]
    for t in GRAPH_BREAK_TYPES:
        cells = [t.id, t.name, t.explanation, t.hint]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)
