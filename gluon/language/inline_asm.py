"""`inline_asm_elementwise`: the target's assembly run over the elements of tiles, as Triton's.

Each instance of `asm` takes `pack` elements of every argument and produces `pack` elements of every
result; an argument or result narrower than 32 bits has its elements packed into 32-bit registers
(`pack` 2 of fp16 is one "r" operand), so `constraints` lists, in LLVM's syntax, one `=` output per
result register, then one input per argument register ($0.. are the outputs, then the inputs). The
arguments broadcast to one shape (Python numbers take int32 or float32); with no argument the result is
one scalar per thread (a clock read, a fence). `is_pure=False` keeps an instance that looks unused (a
fence) and its order among the other side effects. The assembly is the target's own: PTX on NVIDIA
(gl.nvidia.ptx has templates), AMDGCN on CDNA3. Counts that do not match, and a `pack` that does not
divide the tile's elements, are refused here: Triton's lowering would abort the process on the first, its
verifier refuse the TTGIR on the second.
"""
from __future__ import annotations

import re
from typing import Sequence

from .. import ir
from ..types import DType
from .core import Tensor, _broadcast_shape, _broadcast_to, _to_tensor
from .tracing import _tr, _user_loc


def _registers(dtype: DType, pack: int) -> int:
    """Asm operands one instance has for `pack` elements of `dtype`: narrow elements share 32-bit registers."""
    return pack if dtype.bits >= 32 else -(-pack // (32 // dtype.bits))


def _split_constraints(constraints: str) -> tuple[list[str], list[str]]:
    """(outputs, inputs) of an LLVM constraint string; clobbers (`~{memory}`) are neither."""
    parts = [c.strip() for c in constraints.split(",") if c.strip()]
    outs = [c for c in parts if c.startswith("=")]
    ins = [c for c in parts if not c.startswith(("=", "~"))]
    return outs, ins


def inline_asm_elementwise(asm: str, constraints: str, args: Sequence, dtype, is_pure: bool, pack: int):
    """Run `asm` over the elements of `args` (broadcast to one shape), `pack` elements per instance;
    returns a tile (a scalar without arguments) of `dtype`, or a tuple of them when `dtype` is a tuple."""
    t = _tr()
    t.require("inline_asm", "inline_asm_elementwise")
    loc = _user_loc()
    if not isinstance(asm, str) or not asm.strip():
        raise ir.GluonError(f"inline_asm_elementwise: asm must be a non-empty string, got {asm!r}", loc)
    if not isinstance(constraints, str):
        raise ir.GluonError(f"inline_asm_elementwise: constraints must be a string such as \"=r,r\", got "
                            f"{constraints!r}", loc)
    if not isinstance(pack, int) or isinstance(pack, bool) or pack < 1:
        raise ir.GluonError(f"inline_asm_elementwise: pack={pack!r} must be a positive int (elements per instance)",
                            loc)
    if not isinstance(is_pure, bool):
        raise ir.GluonError(f"inline_asm_elementwise: is_pure={is_pure!r} must be True or False", loc)
    multiple = isinstance(dtype, (tuple, list))
    dtypes = [DType(d) if not isinstance(d, DType) else d for d in (dtype if multiple else (dtype,))]
    if not dtypes:
        raise ir.GluonError("inline_asm_elementwise: dtype names no result; the asm must produce at least one (a "
                            "dummy int32 is free if it is not used)", loc)
    if isinstance(args, (Tensor, int, float)):
        args = [args]
    vals = [_to_tensor(a) for a in args]
    shape: tuple = ()
    for v in vals:
        shape = _broadcast_shape(shape, v.shape)
    if shape:
        vals = [_broadcast_to(v, shape) for v in vals]
        n = 1
        for d in shape:
            n *= d
        if n % pack:
            raise ir.GluonError(f"inline_asm_elementwise: pack={pack} does not divide the {n} elements of the "
                                f"{'x'.join(map(str, shape))} tile (Triton's instances take whole packs); use a pack "
                                "that divides it", loc)
    outs, ins = _split_constraints(constraints)
    want_out = sum(_registers(d, pack) for d in dtypes)
    want_in = sum(_registers(v.dtype, pack) for v in vals)
    if len(outs) != want_out or len(ins) != want_in:
        per = ", ".join(f"{d.name}: {_registers(d, pack)}" for d in dtypes)
        per_in = ", ".join(f"{v.dtype.name}: {_registers(v.dtype, pack)}" for v in vals) or "none"
        raise ir.GluonError(
            f"inline_asm_elementwise: constraints {constraints!r} list {len(outs)} outputs and {len(ins)} inputs; "
            f"with pack={pack} the results need {want_out} ({per}) and the arguments {want_in} ({per_in}) "
            "(elements narrower than 32 bits share 32-bit registers)", loc)
    refs = [int(n) for n in re.findall(r"\$(\d+)", asm)]
    if refs and max(refs) >= want_out + want_in:
        raise ir.GluonError(f"inline_asm_elementwise: asm uses ${max(refs)}, but it has operands $0..$"
                            f"{want_out + want_in - 1} ({want_out} outputs, then {want_in} inputs)", loc)
    rtypes = [ir.TileType(d, shape) if shape else ir.ScalarType(d) for d in dtypes]
    kind = "inline_asm_pure" if is_pure else "inline_asm"
    op = t.emit(kind, vals, rtypes, {"asm": asm, "constraints": constraints, "pack": pack})
    res = tuple(Tensor(r) for r in op.results)
    return res if multiple else res[0]
