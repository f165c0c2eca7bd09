"""A CPU interpreter of the IR on numpy (issue 20, item 2).

`kernel.interpret(grid, *args, **constexprs)` on a JIT kernel, or `GLUON_INTERPRET=1` for ordinary
`kernel[grid](...)` launches (and `.compiled(...)`, CompiledKernel calls, the shipped host functions),
runs the traced IR program by program on CPU torch tensors or numpy arrays. What runs and what does not:
docs/INTERPRETER.md.

    values.py   the register / memory value model (dtypes, bf16 and fp8 rounding, buffers and pointers)
    ops.py      the rule registry (op kind -> numpy) and the elementwise, shape and id rules
    memory.py   loads, stores and atomics on global memory, bounds-checked
    regions.py  for / if, and the reductions and scans (with combine regions), histogram
    run.py      binding a launch's arguments, the driver over the grid, the JIT entry
    shared.py   shared memory as bytes (allocations, regions and their views) and mbarriers
    smem.py     the shared-memory rules, the async-proxy fence, cp.async and its groups
    tma.py      TMA-descriptor parameters, TMA loads (edges filled) and stores (clipped)
    dots.py     wgmma, mma, mfma, tensor memory and tcgen05 (float64 products, rounded once)
    entry.py    the launch paths besides kernel[grid](...) that GLUON_INTERPRET=1 routes here
    tasks.py    warp roles as cooperative tasks (one thread each, a baton), deadlock reports, the time budget
    sync.py     mbarrier, named-barrier and cluster-of-one rules
    hazards.py  the hazard tracker: vector clocks over roles and mbarriers, checked at every shared access

`import gluon` imports this package, which installs the entry in gluon.jit; the modules above (and numpy)
load on the first interpreted launch, so `import gluon` stays as fast as it was.
"""
from ..jit import _INTERPRET_ENV, _interpret_enabled, _set_interpret, install_interpreter

ENV_VAR = _INTERPRET_ENV
_LAZY = {"NOT_YET": "ops", "RULES": "ops", "InterpretError": "ops", "bind_params": "run",
         "check_supported": "run", "run_kernel": "run", "trace_for": "run"}


def interpret(template, grid, *args, **kwargs) -> None:
    """Run JIT kernel `template` on the CPU (run.interpret; the signature is `kernel.interpret`'s)."""
    from .run import interpret as run
    return run(template, grid, *args, **kwargs)


def enabled() -> bool:
    """Whether ordinary launches run in the interpreter: GLUON_INTERPRET=1 (also true, yes, on) when gluon was
    imported, or `set_enabled(True)` since."""
    return _interpret_enabled()


def set_enabled(flag: bool = True) -> bool:
    """Make ordinary `kernel[grid](...)` launches run in the interpreter (True) or on the GPU (False), as
    GLUON_INTERPRET=1 at import does; returns the previous setting."""
    was = _interpret_enabled()
    _set_interpret(flag)
    return was


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'gluon.interpret' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)


def _compiled(template, constexprs: dict, block, num_warps, arch):
    from .entry import InterpretedKernel
    return InterpretedKernel(template, constexprs, block, num_warps, arch)


def _run_compiled(ck, grid, args, sizes, meta):
    from .entry import run_compiled
    return run_compiled(ck, grid, args, sizes, meta)


def _launcher(ck):
    from .entry import InterpretedLauncher
    return InterpretedLauncher(ck)


# kernel.interpret(...) and GLUON_INTERPRET=1 launches come here, and the other launch paths (entry.py)
install_interpreter(interpret, compiled=_compiled, run_compiled=_run_compiled, launcher=_launcher)

__all__ = ["ENV_VAR", "enabled", "interpret", "set_enabled", *_LAZY]
