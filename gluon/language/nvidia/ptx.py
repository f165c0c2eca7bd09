"""PTX templates on `inline_asm_elementwise`: what Triton's language has no op for, spelled once.

Timers and clocks (`globaltimer`, `clock`), memory fences (`fence`: `fence.acq_rel` / `fence.sc` at a
scope, the one fence a whole batch of relaxed atomics needs), lane election (`elect_one`), the
approximate math units (`ex2_approx`, `rcp_approx`, `rsqrt_approx`, `tanh_approx`) and a packed
conversion (`cvt_rn_bf16x2`). Each needs an NVIDIA arch (`ArchError` on CDNA3 at the user's line).
"""
from __future__ import annotations

from ... import ir
from ...types import DType
from ..core import Tensor, _to_tensor, cast
from ..inline_asm import inline_asm_elementwise
from ..tracing import _tr, _user_loc

_SCOPES = ("cta", "cluster", "gpu", "sys")


def _ptx(name: str) -> None:
    _tr().require("ptx", name)


def globaltimer() -> Tensor:
    """The GPU's nanosecond global timer (`%globaltimer`, 64 bits), one per thread; not reordered
    with the other side effects around it."""
    _ptx("globaltimer")
    return inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], DType.u64, is_pure=False, pack=1)


def clock() -> Tensor:
    """This SM's cycle counter (`%clock64`), one per thread; not reordered with the side effects around it."""
    _ptx("clock")
    return inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], DType.u64, is_pure=False, pack=1)


def fence(sem: str = "acq_rel", scope: str = "gpu") -> None:
    """`fence.<sem>.<scope>`: orders this thread's memory operations before it against those after it,
    for observers at `scope` ("cta", "cluster", "gpu", "sys"); `sem` "acq_rel" (release + acquire: with
    relaxed atomics after it, a release pattern; before reads, an acquire) or "sc" (also sequentially
    consistent). One fence serves a whole tile of relaxed atomics, where acq_rel atomics fence each."""
    _ptx("fence")
    if sem not in ("acq_rel", "sc"):
        raise ir.GluonError(f"fence: sem={sem!r} is not 'acq_rel' or 'sc'", _user_loc())
    if scope not in _SCOPES:
        raise ir.GluonError(f"fence: scope={scope!r} is not one of {', '.join(map(repr, _SCOPES))}", _user_loc())
    inline_asm_elementwise(f"fence.{sem}.{scope};\n\tmov.u32 $0, 0;", "=r", [], DType.i32, is_pure=False, pack=1)


def elect_one() -> Tensor:
    """1 on one lane of each warp, 0 on the others (`elect.sync` over the full warp: the lowest active
    lane), as int32; call it where the whole warp runs."""
    _ptx("elect_one")
    return inline_asm_elementwise("{\n\t.reg .pred p;\n\telect.sync _|p, 0xffffffff;\n\tselp.u32 $0, 1, 0, p;\n\t}",
                                  "=r", [], DType.i32, is_pure=False, pack=1)


def _f32_unary(name: str, instr: str, x) -> Tensor:
    _ptx(name)
    x = cast(_to_tensor(x, DType.f32), DType.f32)
    return inline_asm_elementwise(f"{instr}.f32 $0, $1;", "=r,r", [x], DType.f32, is_pure=True, pack=1)


def ex2_approx(x) -> Tensor:
    """2**x by the special function unit (`ex2.approx.ftz.f32`: 2 ulp, subnormals flushed), in fp32."""
    return _f32_unary("ex2_approx", "ex2.approx.ftz", x)


def rcp_approx(x) -> Tensor:
    """1/x by the special function unit (`rcp.approx.ftz.f32`: 1 ulp, subnormals flushed), in fp32."""
    return _f32_unary("rcp_approx", "rcp.approx.ftz", x)


def rsqrt_approx(x) -> Tensor:
    """1/sqrt(x) by the special function unit (`rsqrt.approx.ftz.f32`), in fp32."""
    return _f32_unary("rsqrt_approx", "rsqrt.approx.ftz", x)


def tanh_approx(x) -> Tensor:
    """tanh(x) by the special function unit (`tanh.approx.f32`, sm_75+: about 2**-11 relative error), in fp32."""
    return _f32_unary("tanh_approx", "tanh.approx", x)


def cvt_rn_bf16x2(x) -> Tensor:
    """fp32 -> bf16, rounded to nearest even, two elements per instruction (`cvt.rn.bf16x2.f32`)."""
    _ptx("cvt_rn_bf16x2")
    x = cast(_to_tensor(x, DType.f32), DType.f32)
    return inline_asm_elementwise("cvt.rn.bf16x2.f32 $0, $2, $1;", "=r,r,r", [x], DType.bf16, is_pure=True, pack=2)
