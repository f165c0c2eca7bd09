"""The launch paths besides `kernel[grid](...)` that GLUON_INTERPRET=1 routes to the interpreter.

Host code reaches a kernel in three more ways than the plain launch, and each must run on the CPU with no
CUDA when the interpreter is on:

* `kernel[grid].compiled(*args, **constexprs)`: the specialization a host function launches many times
  (the SM90 GEMM's and attention's `launch`, declared kernels, gluon.load's callables through them). With
  the interpreter on it returns an `InterpretedKernel`, which looks to the caller as a CompiledKernel
  does for launching (`launcher`, `launch_args`, `takes_args_as_given`, calling it) and interprets
  instead; nothing is compiled.
* a `CompiledKernel` called directly (`ck(grid, *args)`) or through its `launcher`: its traced IR (after
  the passes, which do not change values) is interpreted (`run_compiled`); one loaded from the kernel
  cache (`load_compiled`, a built kernel's artifacts) has no IR, so that is one clear error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..types import GluonError


@dataclass(frozen=True, eq=False)
class InterpretedKernel:
    """What `BoundLaunch.compiled(...)` gives with the interpreter on: a JIT kernel's specialization (its
    constexprs, block, warps, arch) that interprets where the CompiledKernel would launch."""

    template: Any
    constexprs: dict = field(default_factory=dict)
    block: tuple | None = None
    num_warps: int | None = None
    arch: Any = None

    abi = None                       # no binary, no ABI: host code that needs one checks for None

    def takes_args_as_given(self, nargs: int) -> bool:
        return True

    def launch_args(self, args: Sequence[Any], kwargs: dict) -> Sequence[Any]:
        if kwargs:
            raise GluonError(f"kernel {self.template.name} (interpreted): pass the keyword sizes "
                             f"{', '.join(kwargs)} to the call itself, ck(grid, *args, **sizes)", self.template.loc)
        return tuple(args)

    def launcher(self, grid, *args, stream=None, **meta) -> None:
        """Run the specialization on `args` (the caller's arguments: launch_args gives them as they are)."""
        self(grid, *args, stream=stream)

    def __call__(self, grid, *args, stream=None, meta: dict | None = None, **sizes) -> None:
        from .run import interpret
        interpret(self.template, grid, *args, block=self.block, num_warps=self.num_warps, arch=self.arch,
                  **self.constexprs, **sizes)


def run_compiled(ck, grid, args: Sequence[Any], sizes: dict | None = None, meta: dict | None = None,
                 bound: bool = False) -> None:
    """Interpret compiled kernel `ck` on a launch's arguments: the caller's (`bound` False, with keyword
    sizes) or the launcher's, one per parameter (`bound`)."""
    from .run import run_kernel
    if ck.module is None:
        raise GluonError(f"kernel {ck.abi.name} was loaded from the kernel cache (a built kernel's binary): it has "
                         "no IR for the interpreter to run; launch the JIT kernel itself (kernel[grid](...), or the "
                         "host function that wraps it) to interpret it")
    kernel = ck.module.kernel
    if callable(grid):
        names = [p.name for p in kernel.params]
        m = dict(zip(names, args)) if bound else {}
        m.update(kernel.constexprs)
        m.update(meta or {})
        grid = grid(m)
    run_kernel(kernel, grid, args, sizes or {}, None, bound)


class InterpretedLauncher:
    """`CompiledKernel.launcher` with the interpreter on: takes the launcher's arguments (launch_args)."""

    __slots__ = ("ck",)

    def __init__(self, ck):
        self.ck = ck

    def __call__(self, grid, *args, stream=None, **meta) -> None:
        run_compiled(self.ck, grid, args, None, meta, bound=True)


__all__ = ["InterpretedKernel", "InterpretedLauncher", "run_compiled"]
