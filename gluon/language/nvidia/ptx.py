"""PTX templates on `inline_asm_elementwise`: what Triton's language has no op for, spelled once.

Timers and clocks (`globaltimer`, `clock`), memory fences (`fence`: `fence.acq_rel` / `fence.sc` at a
scope, the one fence a whole batch of relaxed atomics needs; `fence_proxy_async_global` before TMA reads
of what ordinary stores wrote), lane election (`elect_one`), a meeting of the
programs that share a counter in global memory (`grid_meet`; every program of a launch: `grid_meet_all`), the
approximate math units (`ex2_approx`, `rcp_approx`, `rsqrt_approx`, `tanh_approx`), 2**x split between the
special function unit and a polynomial on the FMA pipe (`ex2_mixed`) and a packed conversion
(`cvt_rn_bf16x2`). Each needs an NVIDIA arch (`ArchError` on CDNA3 at the user's line).
"""
from __future__ import annotations

from ... import ir
from ...types import DType
from ..core import Tensor, _to_tensor, cast, num_programs, program_id, where
from ..inline_asm import inline_asm_elementwise
from ..memory import _address
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


GRID_MEET_MARK = "// gluon grid_meet"
GRID_MEET_UNIT = 1 << 16        # what one launch's arrivals add to a counter, whatever their number


def grid_meet_asm(arrivals: int | None) -> str:
    """The PTX of `grid_meet` for `arrivals` warps a launch: $0 a dummy result, $1 the counters' base address,
    $2 the counter's index (int64); arrivals None (`grid_meet_all`): each warp adds $3, its share of the unit."""
    add = "$3" if arrivals is None else str(GRID_MEET_UNIT // arrivals)
    return "\n\t".join([
        f"{GRID_MEET_MARK} {arrivals or 'all'}", "{", ".reg .pred p;", ".reg .b32 o, g, v, d;", ".reg .b64 a;",
        "bar.warp.sync -1;",                        # every lane's earlier stores ordered before lane 0's fence
        "mov.u32 v, %laneid;", "setp.ne.u32 p, v, 0;", "@p bra DONE;",
        "shl.b64 a, $2, 2;", "add.s64 a, $1, a;",   # the counter's address: base + 4 * index
        "fence.acq_rel.gpu;",                       # release: this warp's stores, then its arrival
        f"atom.relaxed.gpu.global.add.u32 o, [a], {add};",
        f"and.b32 g, o, {-GRID_MEET_UNIT & 0xFFFFFFFF};",   # this launch's base: a multiple of the unit ...
        f"add.u32 g, g, {GRID_MEET_UNIT};",         # ... and where the counter stands once all have arrived
        "WAIT:", "ld.acquire.gpu.global.u32 v, [a];",
        "sub.u32 d, v, g;", "setp.lt.s32 p, d, 0;", "@p bra WAIT;",   # (wraps around: signed difference)
        "DONE:", "bar.warp.sync -1;",               # the other lanes' loads after lane 0's acquire
        "mov.u32 $0, 0;", "}"])


def grid_meet(counter, arrivals: int) -> None:
    """Wait until `arrivals` warps (this one included; each calls it once a launch) have arrived at the int32
    counter `counter` (a pointer into global memory, zero when first used, shared by no other meeting): what
    each wrote before is then visible to all of them (lane 0 of each warp: a release fence and a relaxed atomic
    add, then acquire loads until the count is reached; the warp's other lanes ordered by `bar.warp.sync`).
    Call it where the whole warp runs. `arrivals` a power of two up to 65536: each launch adds 65536 to the
    counter in all, so it needs no reset between launches and CUDA-graph replays (it wraps around after 65536
    launches, harmlessly). Every arriving program must be resident at once (a persistent grid of at most one
    program per SM): a program waiting here for one that cannot start would wait forever."""
    _ptx("grid_meet")
    base, index = _meet_counter(counter, "grid_meet")
    if type(arrivals) is not int or arrivals < 1 or arrivals > GRID_MEET_UNIT or arrivals & (arrivals - 1):
        raise ir.GluonError(f"grid_meet: arrivals={arrivals!r} must be a power of two from 1 to {GRID_MEET_UNIT} (the "
                            "warps that meet, each calling it once a launch)", _user_loc())
    inline_asm_elementwise(grid_meet_asm(arrivals), "=r,l,l", [base, index], DType.i32, is_pure=False, pack=1)


def _meet_counter(counter, name: str) -> tuple:
    """(base pointer, int64 index) of a meeting's counter: one int32 in global memory, or a GluonError."""
    base, index = _address(counter)
    if index.shape or base.type.dtype not in (DType.i32, DType.u32):
        raise ir.GluonError(f"{name}: counter must be one int32 in global memory (a pointer parameter plus a "
                            f"scalar offset), got {base.type.dtype.name} elements at offsets of shape "
                            f"{list(index.shape)}", _user_loc())
    return base, cast(index, DType.i64)


def meet_shares(arrivals, warps):
    """(what each of `arrivals` warps adds to a `grid_meet_all` counter, what each of program 0's `warps` adds
    besides) so that a launch adds exactly the unit: ints, or the kernel's runtime values alike."""
    share = GRID_MEET_UNIT // arrivals
    return share, (GRID_MEET_UNIT - share * arrivals) // warps   # exact: the unit and arrivals are multiples of warps


def grid_meet_all(counter, warps: int) -> None:
    """`grid_meet` of every program of the launch, `warps` warps each (a power of two: those that run this call,
    once a launch), however many programs there are: each warp adds 65536 // (programs * warps) to the counter
    and program 0's warps the rest of the unit between them, so a launch still adds exactly 65536. Every
    program must be resident at once (a persistent grid), as for `grid_meet`."""
    _ptx("grid_meet")
    base, index = _meet_counter(counter, "grid_meet_all")
    if type(warps) is not int or warps < 1 or warps > 32 or warps & (warps - 1):
        raise ir.GluonError(f"grid_meet_all: warps={warps!r} must be a power of two from 1 to 32 (the warps of a "
                            "program that meet, each calling it once a launch)", _user_loc())
    share, rest = meet_shares(num_programs(0) * warps, warps)
    add = share + where(program_id(0) == 0, rest, 0)
    inline_asm_elementwise(grid_meet_asm(None), "=r,l,l,r", [base, index, cast(add, DType.i32)], DType.i32,
                           is_pure=False, pack=1)


def fence_proxy_async_global() -> None:
    """`fence.proxy.async.global`: this thread's view of global memory through the generic proxy (ordinary loads
    and stores, its own and those it has acquired) ordered before its async-proxy accesses after it (TMA loads):
    what a TMA load of data that ordinary stores wrote in this launch needs."""
    _ptx("fence")
    inline_asm_elementwise("fence.proxy.async.global;\n\tmov.u32 $0, 0;", "=r", [], DType.i32, is_pure=False,
                           pack=1)


def _f32_unary(name: str, instr: str, x) -> Tensor:
    _ptx(name)
    x = cast(_to_tensor(x, DType.f32), DType.f32)
    return inline_asm_elementwise(f"{instr}.f32 $0, $1;", "=r,r", [x], DType.f32, is_pure=True, pack=1)


def ex2_approx(x) -> Tensor:
    """2**x by the special function unit (`ex2.approx.ftz.f32`: 2 ulp, subnormals flushed), in fp32."""
    return _f32_unary("ex2_approx", "ex2.approx.ftz", x)


# ex2_mixed's polynomial: 2**f on [-0.5, 0.5], degree 3, fitted for relative error (at most 7.6e-5 through the
# fp32 chain below where the result is normal, checked in tests/test_inline_asm.py), highest power first, as
# fp32 bit patterns
_EX2_POLY = ("0f3D61F9AE", "0f3E786E60", "0f3F31798F", "0f3F7FFB4C")
_EX2_FLOOR = "0fC2FC0000"       # -126.0: below it the polynomial lanes give about 2**-126, not a wrapped exponent
_EX2_ROUND = "0f4B400000"       # 1.5 * 2**23: adding it rounds to an integer, kept in the low mantissa bits
EX2_MIXED_MARK = "// gluon ex2_mixed"


def ex2_mixed_asm(pack: int, poly: int) -> str:
    """The PTX of `ex2_mixed`: `pack` results $0.., then `pack` inputs; the last `poly` by the polynomial."""
    lines = [f"{EX2_MIXED_MARK} {pack - poly}+{poly}", "{", ".reg .b32 t, j, f, p, e;"]
    for i in range(pack - poly):
        lines.append(f"ex2.approx.ftz.f32 ${i}, ${pack + i};")
    c3, c2, c1, c0 = _EX2_POLY
    for i in range(pack - poly, pack):
        lines += [f"max.f32 f, ${pack + i}, {_EX2_FLOOR};",       # x >= -126: the exponent add cannot wrap
                  f"add.rn.f32 t, f, {_EX2_ROUND};",               # t = 1.5 * 2**23 + round(x)
                  f"sub.rn.f32 j, t, {_EX2_ROUND};",               # j = round(x)
                  "sub.rn.f32 f, f, j;",                            # f = x - j in [-0.5, 0.5]
                  f"fma.rn.f32 p, f, {c3}, {c2};",
                  f"fma.rn.f32 p, p, f, {c1};",
                  f"fma.rn.f32 p, p, f, {c0};",                     # p = 2**f in [0.70, 1.42]
                  "shl.b32 e, t, 23;",                              # round(x) << 23 (mod 2**32)
                  f"add.s32 ${i}, p, e;"]                           # 2**j * p: j added to p's exponent
    return "\n\t".join(lines + ["}"])


def ex2_mixed(x, pack: int = 4, poly: int = 1) -> Tensor:
    """2**x in fp32 for x <= 0 with `pack - poly` of every `pack` elements on the special function unit
    (`ex2.approx.ftz.f32`) and `poly` of them by a degree-3 polynomial on the FMA pipe (a rounding add,
    three FMAs and an integer add to the exponent; FlashAttention-4's trick). The unit does 16 a clock per
    SM, the FMA pipe 128: where the unit is what a kernel waits on, this frees it; each polynomial lane
    costs nine issue slots where ex2 costs one, so where issue slots or latency are the limit it is slower.
    The polynomial lanes are within 7.6e-5 relative where 2**x is a normal fp32 (enough for P cast to fp16
    or bf16); below -125 they give at most 2**-125 (never a wrapped exponent), not 0 for -inf: feed them
    finite scores (an unmasked block's).
    Which elements take the polynomial is the packing's choice (Triton groups a thread's registers)."""
    _ptx("ex2_mixed")
    if not (isinstance(pack, int) and isinstance(poly, int)) or pack < 1 or not 0 <= poly <= pack:
        raise ir.GluonError(f"ex2_mixed: pack={pack!r}, poly={poly!r}: takes ints with 0 <= poly <= pack, pack >= 1",
                            _user_loc())
    x = cast(_to_tensor(x, DType.f32), DType.f32)
    cons = ",".join(["=r"] * pack + ["r"] * pack)
    return inline_asm_elementwise(ex2_mixed_asm(pack, poly), cons, [x], DType.f32, is_pure=True, pack=pack)


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
