"""Running a generated program: exec its source into a fresh module and compare it against
eager PyTorch with differential.run_case."""

# Calls per program: 0 compiles, 1 hits the cache (fresh values, same shapes and Python
# values), 2 changes one thing (a size, an int, a bool, a float, a list length) and
# recompiles, 3 changes it again: the second recompile of a frame is the first with
# automatic dynamic sizes and ints, a path of its own.
N_CALLS = 4


def build_world(source: str, name: str = "fuzz_program"):
    """A factory for differential.run_case: exec ``source`` into a fresh module (so its
    globals are real module globals) and return f, the three calls and the observables."""
    import linecache
    import types

    import differential

    filename = f"<{name}>"
    # linecache lets tracebacks and capture's source locations show the program's lines
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    code = compile(source, filename, "exec")

    def build():
        mod = types.ModuleType(name)
        exec(code, mod.__dict__)  # noqa: S102 - the generated program
        ns = mod.__dict__
        fn = ns["make"]()
        calls = [lambda i=i: ns["inputs"](i) for i in range(N_CALLS)]
        return differential.World(fn, calls, {"globals": ns})

    return build


def check_program(source: str, backends, seed: int = 0, name: str = "fuzz_program"):
    """Run one program's source through the harness; the mismatches (empty if none)."""
    import differential

    return differential.run_case(build_world(source, name), backends, seed=seed)
