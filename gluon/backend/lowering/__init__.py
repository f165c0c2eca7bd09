"""Gluon IR -> Triton 3.6 TTGIR text.

`lower_kernel(kernel)` prints one `module { tt.func ... }` per kernel, in the exact dialect syntax
triton 3.6.0 parses (see ../shared/ttgir/*.ttgir for compiled references), and returns it with the
kernel's ABI (`gluon.abi.LoweredKernel`; `abi.kernel_abi` reads it off the same IR parameters the
signature is printed from, with the cluster size and the PTX passes the kernel asks for). The input must have
every register tile's layout assigned; the output is deterministic (golden tests compare it) and
readable: IR value names become SSA names (`%acc`, `%acc_1`, ...), layouts become aliases at the
top (`#blocked`, `#mma`, `#shared`, `#smem`, `#tmem`, ...) in first-use order.

The package: `context.KernelLowering` is one kernel's lowering (names, aliases, scopes, hoisted
constants, type and layout spelling, module header, dispatch); `registry.RULES` holds one rule per IR op
kind, `rule(lw, op) -> None`, registered with `@rule("kind")` in the rule modules, which are named
like the DSL's: `core` (arithmetic, tile shapes, reductions), `memory` (global and shared memory),
`atomics` (tt.atomic_rmw / tt.atomic_cas), `reductions` (tt.reduce / tt.scan with a traced combine region,
tt.histogram), `shapes` (reshape, trans, join, split, gather; gluon.types
spells layouts as Triton's linear layouts for them, to_linear),
`control` (for, if, warp_specialize), `nvidia.ampere` (mma, cp.async), `nvidia.hopper` (wgmma,
mbarriers, TMA, clusters), `nvidia.blackwell` (tensor memory, tcgen05), `amd.cdna3` (mfma); `dot`
is the tt.dot that mma and mfma share, `literals` the MLIR literals. Importing this package imports
every rule module, so RULES is complete.

How the IR maps onto TTGIR, where it is not one op for one op:

* `load`/`store`/`cp_async` take a scalar base pointer plus a tile of offsets: the lowering splats
  the pointer over the offsets' shape and layout and emits `tt.addptr` (scalar offsets: a scalar
  `tt.addptr` and a scalar load/store). A scalar mask/other/value next to tile offsets is splatted.
* Constants the lowering needs itself (`%true` predicates, the stage indices of a barrier ring,
  the zero of a negation, ...) are hoisted, deduplicated, to the top of the function body (or of
  the warp partition that needs them, since partitions are isolated from above).
* `warp_specialize`: the role with `default: True` becomes the `default` region (running on the
  module's `ttg.num-warps` warps); every other role becomes `partitionK(captures) num_warps(n)`.
  Partition regions are isolated: values they use from outside become operands of
  `ttg.warp_specialize` and block arguments of every partition, except IR `constant`s, which are
  re-materialized inside the partition. `requestedRegisters` lists one count per partition; a role
  without `registers` gets the even share of the register file (no `setmaxnreg` change for that
  warpgroup), and the default role's own `registers` is not expressible in TTGIR 3.6: Triton gives
  the default warpgroup what the partitions leave.
* `wgmma_wait` lists the accumulator and the shared buffers the dots read (the IR's deps) and
  yields one result per operand; the IR result is the first.
* `mfma` layouts given with a 2-D `instr_shape` (M, N) get their K from the operand element width
  of the dots that use them (CDNA3: 16-bit -> 32x32x8 / 16x16x16, 8-bit -> 32x32x16 / 16x16x32,
  32-bit -> 32x32x2 / 16x16x4): Triton 3.6 needs `instrShape = [M, N, K]`.
* `tmem_load` / `tmem_alloc(init)` move data between tensor memory and registers in TMEM's message
  layout (32x32b for blockM 128, 16x32bx2 for blockM 64, f32); when the IR's tile has another
  layout, the lowering loads/stores in the message layout and adds a `ttg.convert_layout`.
* A WGMMA accumulator layout (nvidia_mma v3) is printed with the instruction K its wgmma operands
  need, 256 / element bits (f16/bf16: 16, fp8: 32, tf32: 8), whatever K the IR layout carries
  (`Layout.wgmma` always says 16, which does not compile for fp8). fp8 x fp8 -> f32 wgmma gets
  `maxNumImpreciseAcc = 2**30` (Triton's sm90 default; its verifier rejects less than 32) unless
  the op's attrs give `max_num_imprecise_acc`.
"""
from __future__ import annotations

from ...abi import LoweredKernel
from ...ir import Kernel, Module
from . import atomics, control, core, inline_asm, memory, reductions, shapes  # noqa: F401  (rule modules: importing them fills RULES)
from .amd import cdna3  # noqa: F401
from .context import KernelLowering, LoweringError
from .literals import float_literal, int_literal, scalar_literal
from .nvidia import ampere, blackwell, hopper  # noqa: F401
from .registry import RULES

__all__ = ["LoweringError", "lower_module", "lower_kernel", "lower_module_kernels", "float_literal", "int_literal",
           "scalar_literal", "RULES"]


def lower_module(module: Module) -> LoweredKernel:
    """TTGIR text and ABI of a module holding exactly one kernel."""
    if len(module.kernels) != 1:
        raise LoweringError(f"lower_module needs a module with exactly one kernel, got {len(module.kernels)}; "
                            "use lower_module_kernels() to lower each kernel into its own TTGIR module")
    return lower_kernel(module.kernels[0])


def lower_module_kernels(module: Module) -> dict[str, LoweredKernel]:
    """One lowered kernel (TTGIR text and ABI) per kernel of `module`, keyed by kernel name (in module order)."""
    out: dict[str, LoweredKernel] = {}
    for k in module.kernels:
        if k.name in out:
            raise LoweringError(f"two kernels named {k.name!r} in one module", k.loc)
        out[k.name] = lower_kernel(k)
    return out


def lower_kernel(kernel: Kernel) -> LoweredKernel:
    """One kernel's TTGIR text (one `module { tt.func public @name ... }`) and its ABI (gluon.abi)."""
    return KernelLowering(kernel).run()
