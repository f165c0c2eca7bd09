"""A CPU interpreter of the IR on numpy (issue 20, item 2; first slice).

`kernel.interpret(grid, *args, **constexprs)` on a JIT kernel, or `GLUON_INTERPRET=1` for ordinary
`kernel[grid](...)` launches, runs the traced IR program by program on CPU torch tensors or numpy arrays.
What runs and what does not yet: docs/INTERPRETER.md.

    values.py   the register / memory value model (dtypes, bf16 and fp8 rounding, buffers and pointers)
    ops.py      the rule registry (op kind -> numpy) and the elementwise, shape and id rules
    memory.py   loads, stores and atomics on global memory, bounds-checked
    regions.py  for / if, and the reductions and scans (with combine regions), histogram
    run.py      binding a launch's arguments, the driver over the grid, the JIT entry
"""
from .ops import NOT_YET, RULES, InterpretError
from .run import bind_params, check_supported, interpret, run_kernel, trace_for

ENV_VAR = "GLUON_INTERPRET"


def enabled() -> bool:
    """Whether GLUON_INTERPRET asks ordinary launches to run in the interpreter ("1", "true", "yes")."""
    import os
    return os.environ.get(ENV_VAR, "").strip().lower() in ("1", "true", "yes", "on")


__all__ = ["ENV_VAR", "InterpretError", "NOT_YET", "RULES", "bind_params", "check_supported", "enabled",
           "interpret", "run_kernel", "trace_for"]
