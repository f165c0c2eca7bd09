"""Inline assembly in the interpreter: the PTX templates of `gl.nvidia.ptx` whose meaning is plain enough to
give (read off gluon/language/nvidia/ptx.py, matched on their exact text); any other assembly is refused at
its line, since its meaning is the target's, not the IR's.

    fence.<sem>.<scope>            a no-op: the interpreter runs one op at a time, every access in program order
    fence.proxy.async.global       a no-op too (one memory, whatever proxy reads it)
    %globaltimer                   nanoseconds of the host's monotonic clock
    %clock64                       a counter that grows by one per read (cycles cannot be modelled)
    ex2 / rcp / rsqrt .approx.ftz  2**x, 1/x, 1/sqrt(x) in fp32 (exact where the GPU's are within 1-2 ulp;
                                   subnormal inputs and results flushed to zero as .ftz does)
    ex2_mixed                      2**x in fp32 as ex2.approx.ftz (on the GPU its polynomial lanes are within
                                   7.6e-5 relative, and at most 2**-125 below x = -125)
    tanh.approx.f32                tanh(x) in fp32 (exact where the GPU's is within about 2**-11)
    cvt.rn.bf16x2.f32              fp32 -> bf16, round to nearest even

`elect_one` (one lane of each warp) has no meaning in the interpreter's model, where a program's elements
are whole tiles with no lanes: refused like other assembly. `grid_meet` waits for other programs, which the
interpreter runs one after another: refused with that reason (`grid_meet_all` too).
"""
from __future__ import annotations

import itertools
import re
import time
from typing import Callable

import numpy as np

from ..language.nvidia.ptx import EX2_MIXED_MARK, GRID_MEET_MARK
from ..types import DType
from .ops import InterpretError, rule, shape_of
from .values import full, reg_dtype, round_to

_CLOCK = itertools.count()
_TINY = np.float32(np.finfo(np.float32).tiny)


def _ftz(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32)
    return np.where(np.abs(x) < _TINY, np.float32(0) * x, x)     # keeps the sign of a flushed zero


def _f32(fn: Callable) -> Callable:
    return lambda args: _ftz(fn(_ftz(np.asarray(args[0], np.float32))))


_UNARY = {
    "ex2.approx.ftz": _f32(np.exp2),
    "rcp.approx.ftz": _f32(lambda x: np.float32(1) / x),
    "rsqrt.approx.ftz": _f32(lambda x: np.float32(1) / np.sqrt(x)),
    "tanh.approx": lambda args: np.tanh(np.asarray(args[0], np.float32)),
}


def _template(asm: str) -> Callable | None:
    """The numpy meaning of one of ptx.py's templates (a function of the operand values), or None."""
    if re.fullmatch(r"fence\.((acq_rel|sc)\.(cta|cluster|gpu|sys)|proxy\.async\.global);\s*mov\.u32 \$0, 0;", asm):
        return lambda args: 0
    if asm == "mov.u64 $0, %globaltimer;":
        return lambda args: time.monotonic_ns()
    if asm == "mov.u64 $0, %clock64;":
        return lambda args: next(_CLOCK)
    if asm.startswith(EX2_MIXED_MARK + " "):
        return _UNARY["ex2.approx.ftz"]
    m = re.fullmatch(r"([a-z0-9.]+)\.f32 \$0, \$1;", asm)
    if m and m.group(1) in _UNARY:
        return _UNARY[m.group(1)]
    if asm == "cvt.rn.bf16x2.f32 $0, $2, $1;":
        return lambda args: round_to(DType.bf16, np.asarray(args[0], np.float32))
    return None


@rule("inline_asm", "inline_asm_pure")
def _inline_asm(it, op, args):
    asm = " ".join(str(op.attrs.get("asm", "")).split())
    if asm.startswith(GRID_MEET_MARK + " "):
        raise InterpretError("the interpreter runs a launch's programs one after another, so a grid_meet (which "
                             "waits for the other programs of the launch) would wait forever; give the kernel a "
                             "path without it to interpret it (the GEMM: SPLITK_GRID=1)", op.loc)
    fn = _template(asm)
    if fn is None or len(op.results) != 1:
        raise InterpretError(f"the interpreter cannot run inline assembly ({op.kind} {asm[:60]!r}): its meaning is "
                             "the target's, not the IR's; give the kernel a plain-op path to interpret it (the "
                             "gl.nvidia.ptx templates it runs: docs/INTERPRETER.md)", op.loc)
    t = op.result.type
    value = np.asarray(fn(args))
    if value.ndim == 0:
        return [full(shape_of(t), value.item(), t.dtype)]
    return [np.broadcast_to(value.astype(reg_dtype(t.dtype)), shape_of(t))]
