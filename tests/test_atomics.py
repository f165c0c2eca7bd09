"""Atomics (issue 19): `gl.atomic_add/max/min/and/or/xor/xchg/cas`, named and behaving as Triton's.

CPU: trace + verify, the TTGIR each op and dtype lowers to, a compile for sm90 with the SASS atomics it
gives, and the errors for bad arguments. GPU (marked): a histogram, a float sum, int max/min, a
compare-and-swap "first writer wins" and exchange's old values, each checked against torch.
"""
import inspect
import re

import pytest

import gluon
import gluon.language as gl
from gluon.backend.machine_code import sass_instructions
from gluon.ir import GluonError
from gluon.jit import lower, run_passes
from gluon.language import PointerArg, ScalarArg
from gluon.types import SliceLayout

HERE = __file__


@gluon.jit
def rmw_kernel(dst_ptr, val_ptr, old_ptr, n, OP: gl.constexpr, BLOCK: gl.constexpr, SEM: gl.constexpr = None,
               SCOPE: gl.constexpr = None, MASKED: gl.constexpr = True):
    """old[i] = OP(dst[i], val[i]) for i < n (dst updated in place)."""
    layout = gl.Layout.blocked([1], [32], [4])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    m = offs < n
    v = gl.load(val_ptr + offs, mask=m)
    fn = {"add": gl.atomic_add, "max": gl.atomic_max, "min": gl.atomic_min, "and": gl.atomic_and,
          "or": gl.atomic_or, "xor": gl.atomic_xor, "xchg": gl.atomic_xchg}[OP]
    if MASKED:
        old = fn(dst_ptr + offs, v, mask=m, sem=SEM, scope=SCOPE)
    else:
        old = fn(dst_ptr + offs, v, sem=SEM, scope=SCOPE)
    gl.store(old_ptr + offs, old, mask=m)


@gluon.jit
def cas_kernel(dst_ptr, cmp_ptr, val_ptr, old_ptr, n, BLOCK: gl.constexpr, SEM: gl.constexpr = None):
    layout = gl.Layout.blocked([1], [32], [4])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    m = offs < n
    c = gl.load(cmp_ptr + offs, mask=m)
    v = gl.load(val_ptr + offs, mask=m)
    old = gl.atomic_cas(dst_ptr + offs, c, v, sem=SEM)
    gl.store(old_ptr + offs, old, mask=m)


def _args(dt, n_ptrs: int = 3):
    return [PointerArg(dt)] * n_ptrs + [ScalarArg(gl.int32)]


def _ttgir(kernel, *args, **kw) -> str:
    return lower(run_passes(kernel.trace(*args, **kw))).ttgir


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


# ------------------------------------------------------------------ trace, verify, TTGIR


RMW_CASES = [  # (op, dtype, TTGIR rmw kind)
    ("add", gl.int32, "add"), ("add", gl.uint32, "add"), ("add", gl.int64, "add"), ("add", gl.uint64, "add"),
    ("add", gl.float32, "fadd"), ("add", gl.float16, "fadd"), ("add", gl.bfloat16, "fadd"),
    ("max", gl.int32, "max"), ("max", gl.uint32, "umax"), ("max", gl.int64, "max"), ("max", gl.uint64, "umax"),
    ("min", gl.int32, "min"), ("min", gl.uint32, "umin"), ("min", gl.int64, "min"),
    ("and", gl.int32, "and"), ("or", gl.int64, "or"), ("xor", gl.uint32, "xor"),
    ("xchg", gl.int32, "exch"), ("xchg", gl.float32, "exch"),
]


@pytest.mark.parametrize("op,dt,kind", RMW_CASES, ids=[f"{o}-{d.name}" for o, d, _ in RMW_CASES])
def test_rmw_traces_and_lowers_to_its_kind(op, dt, kind):
    m = rmw_kernel.trace(*_args(dt), OP=op, BLOCK=128)
    (a,) = [o for o in m.kernel.walk() if o.kind == "atomic_rmw"]
    assert a.attrs == {"op": kind if kind != "exch" else "xchg", "sem": "acq_rel", "scope": "gpu", "has_mask": True}
    assert a.result.type.dtype == dt and a.result.type.shape == (128,)
    text = _ttgir(rmw_kernel, *_args(dt), OP=op, BLOCK=128)
    e = dt.mlir
    assert (f"tt.atomic_rmw {kind}, acq_rel, gpu, %dst_ptrs, %{{}}, %{{}} : (tensor<128x!tt.ptr<{e}>, #blocked>, "
            f"tensor<128x{e}, #blocked>, tensor<128xi1, #blocked>) -> tensor<128x{e}, #blocked>") in _norm(text), text


def _norm(text: str) -> str:
    """The TTGIR with anonymous SSA numbers (%7) spelled %{} so the expected lines need not count."""
    return re.sub(r"%\d+\b", "%{}", text)


@pytest.mark.parametrize("sem", ["relaxed", "acquire", "release", "acq_rel"])
@pytest.mark.parametrize("scope", ["gpu", "cta", "sys"])
def test_sem_and_scope_reach_the_ttgir(sem, scope):
    text = _ttgir(rmw_kernel, *_args(gl.int32), OP="add", BLOCK=128, SEM=sem, SCOPE=scope)
    assert f"tt.atomic_rmw add, {sem}, {scope}, " in text


def test_unmasked_rmw_has_no_mask_operand():
    text = _norm(_ttgir(rmw_kernel, *_args(gl.float32), OP="add", BLOCK=128, MASKED=False))
    assert ("tt.atomic_rmw fadd, acq_rel, gpu, %dst_ptrs, %{} : (tensor<128x!tt.ptr<f32>, #blocked>, "
            "tensor<128xf32, #blocked>) -> tensor<128xf32, #blocked>") in text


@pytest.mark.parametrize("op,signed,unsigned", [("max", "max", "umin"), ("min", "min", "umax")])
@pytest.mark.parametrize("dt,it", [(gl.float32, "i32"), (gl.float64, "i64")])
def test_float_max_min_are_built_as_tritons_frontend_does(op, signed, unsigned, dt, it):
    """No float max/min rmw kind in Triton 3.6: a signed op on the bits where the value is >= 0, an unsigned
    one where its sign bit is set, the old value picked by the sign and bitcast back."""
    text = _norm(_ttgir(rmw_kernel, *_args(dt), OP=op, BLOCK=128))
    e = dt.mlir
    assert f"tt.bitcast %dst_ptrs : tensor<128x!tt.ptr<{e}>, #blocked> -> tensor<128x!tt.ptr<{it}>, #blocked>" in text
    assert f"%old = tt.atomic_rmw {signed}, acq_rel, gpu, %iptrs, %ival, %mpos" in text
    assert f"%old_1 = tt.atomic_rmw {unsigned}, acq_rel, gpu, %iptrs, %ival, %mneg" in text
    assert f"arith.select %pos, %old, %old_1 : tensor<128xi1, #blocked>, tensor<128x{it}, #blocked>" in text
    assert f"tt.bitcast %old_bits : tensor<128x{it}, #blocked> -> tensor<128x{e}, #blocked>" in text


@pytest.mark.parametrize("dt", [gl.int32, gl.int64, gl.float32])
def test_cas_lowers_without_a_mask(dt):
    e = dt.mlir
    text = _norm(_ttgir(cas_kernel, *_args(dt, 4), BLOCK=128, SEM="relaxed"))
    assert (f"tt.atomic_cas relaxed, gpu, %dst_ptrs, %{{}}, %{{}} : (tensor<128x!tt.ptr<{e}>, #blocked>, "
            f"tensor<128x{e}, #blocked>, tensor<128x{e}, #blocked>) -> tensor<128x{e}, #blocked>") in text


@gluon.jit
def scalar_kernel(out_ptr, x_ptr, flag_ptr, n, BLOCK: gl.constexpr):
    """One atomic per program on a scalar address: the block's sum into out, a CAS on one flag."""
    layout = gl.Layout.blocked([1], [32], [4])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    x = gl.load(x_ptr + offs, mask=offs < n, other=0.0)
    gl.atomic_add(out_ptr, gl.sum(x, 0))
    gl.atomic_cas(flag_ptr, 0, gl.program_id(0) + 1)


def test_scalar_address_gives_scalar_forms():
    args = (PointerArg(gl.float32), PointerArg(gl.float32), PointerArg(gl.int32), ScalarArg(gl.int32))
    text = _norm(_ttgir(scalar_kernel, *args, BLOCK=128))
    assert "tt.atomic_rmw fadd, acq_rel, gpu, %out_ptrs, %red : (!tt.ptr<f32>, f32) -> f32" in text
    assert "tt.atomic_cas acq_rel, gpu, %flag_ptrs, %c0_i32, %{} : (!tt.ptr<i32>, i32, i32) -> i32" in text


@gluon.jit
def broadcast_kernel(dst_ptr, n, BLOCK: gl.constexpr):
    """A scalar value at a tile of addresses, and a tile of values at one address (every lane adds)."""
    layout = gl.Layout.blocked([1], [32], [4])
    offs = gl.arange(0, BLOCK, layout=layout)
    gl.atomic_add(dst_ptr + offs, 1, mask=offs < n)
    gl.atomic_max(dst_ptr, offs)


def test_values_and_addresses_broadcast():
    m = broadcast_kernel.trace(PointerArg(gl.int32), ScalarArg(gl.int32), BLOCK=64)
    a, b = [o for o in m.kernel.walk() if o.kind == "atomic_rmw"]
    assert a.operands[2].type.shape == (64,) and a.result.type.shape == (64,)
    assert b.operands[1].type.shape == (64,) and b.attrs["op"] == "max" and not b.attrs["has_mask"]
    text = _ttgir(broadcast_kernel, PointerArg(gl.int32), ScalarArg(gl.int32), BLOCK=64)
    assert text.count("tt.atomic_rmw") == 2


@gluon.jit
def simt_kernel(dst_ptr, n, XBLOCK: gl.constexpr):
    idx = gl.program_id(0) * XBLOCK + gl.thread_id(0)
    if idx < n:
        gl.atomic_add(dst_ptr + idx % 7, 1)


def test_per_thread_if_masks_the_atomic():
    m = simt_kernel.trace(PointerArg(gl.int32), ScalarArg(gl.int32), XBLOCK=128, block=(128,))
    (a,) = [o for o in m.kernel.walk() if o.kind == "atomic_rmw"]
    assert a.attrs["has_mask"] and len(a.operands) == 4
    text = lower(run_passes(m)).ttgir
    assert "tt.atomic_rmw add, acq_rel, gpu, " in text


@gluon.jit
def rowsum_kernel(out_ptr, x_ptr, R: gl.constexpr, C: gl.constexpr):
    """Row sums (in the reduction's slice layout) added at addresses in another layout."""
    l2 = gl.Layout.blocked([1, 4], [4, 8], [4, 1])
    l1 = gl.Layout.blocked([1], [32], [4])
    r = gl.arange(0, R, layout=SliceLayout(1, l2))
    c = gl.arange(0, C, layout=SliceLayout(0, l2))
    x = gl.load(x_ptr + gl.expand_dims(r, 1) * C + gl.expand_dims(c, 0))
    old = gl.atomic_add(out_ptr + gl.arange(0, R, layout=l1), gl.sum(x, 1))
    gl.store(out_ptr + R + gl.arange(0, R, layout=l1), old)


def test_values_in_another_layout_are_converted_to_the_address_layout():
    text = _norm(_ttgir(rowsum_kernel, PointerArg(gl.float32), PointerArg(gl.float32), R=64, C=32))
    assert ("ttg.convert_layout %red : tensor<64xf32, #ttg.slice<{dim = 1, parent = #blocked}>> -> "
            "tensor<64xf32, #blocked1>") in text
    assert ("tt.atomic_rmw fadd, acq_rel, gpu, %out_ptrs, %{} : (tensor<64x!tt.ptr<f32>, #blocked1>, "
            "tensor<64xf32, #blocked1>) -> tensor<64xf32, #blocked1>") in text


# ------------------------------------------------------------------ compile for sm90: the SASS atomics


def _sass_atomics(ck) -> set[str]:
    ops = sass_instructions(ck.sass())
    return {o for o in ops if o.split(".")[0] in ("ATOM", "ATOMG", "RED", "REDG", "ATOMS")}


@pytest.mark.parametrize("op,dt,want", [
    ("add", gl.float32, "ATOMG.E.ADD.F32.FTZ.RN.STRONG.GPU"),
    ("add", gl.int32, "ATOMG.E.ADD.STRONG.GPU"),
    ("max", gl.int32, "ATOMG.E.MAX.S32.STRONG.GPU"),
    ("min", gl.uint32, "ATOMG.E.MIN.STRONG.GPU"),
    ("xchg", gl.int32, "ATOMG.E.EXCH.STRONG.GPU"),
    ("or", gl.int64, "ATOMG.E.OR.64.STRONG.GPU"),
])
def test_compiles_for_sm90_to_global_atomics(op, dt, want):
    ck = rmw_kernel.compile(*_args(dt), arch="sm90", num_warps=4, OP=op, BLOCK=128)
    got = _sass_atomics(ck)
    assert want in got, sorted(got)


def test_float_max_compiles_to_a_signed_max_and_an_unsigned_min():
    ck = rmw_kernel.compile(*_args(gl.float32), arch="sm90", num_warps=4, OP="max", BLOCK=128)
    got = _sass_atomics(ck)
    assert "ATOMG.E.MAX.S32" in got and "ATOMG.E.MIN" in got, sorted(got)


def test_cas_and_cta_scope_compile():
    ck = cas_kernel.compile(*_args(gl.int64, 4), arch="sm90", num_warps=4, BLOCK=128)
    assert "ATOMG.E.CAS.64.STRONG.GPU" in _sass_atomics(ck)
    ck = rmw_kernel.compile(*_args(gl.int32), arch="sm90", num_warps=4, OP="add", BLOCK=128, SCOPE="cta")
    assert "ATOMG.E.ADD.STRONG.SM" in _sass_atomics(ck)


def test_scalar_atomics_compile():
    args = (PointerArg(gl.float32), PointerArg(gl.float32), PointerArg(gl.int32), ScalarArg(gl.int32))
    ck = scalar_kernel.compile(*args, arch="sm90", num_warps=4, BLOCK=128)
    got = _sass_atomics(ck)
    assert "ATOMG.E.ADD.F32.FTZ.RN.STRONG.GPU" in got and "ATOMG.E.CAS.STRONG.GPU" in got, sorted(got)


def test_relaxed_atomic_with_its_result_unused_is_a_reduction():
    """ptxas turns an atomic whose old value nobody reads into RED when no ordering is asked (relaxed)."""
    ck = sum_kernel.compile(PointerArg(gl.float32), PointerArg(gl.float32), ScalarArg(gl.int32), arch="sm90",
                            num_warps=4, BLOCK=512, PER_ELEMENT=True)
    assert "REDG.E.ADD.F32.FTZ.RN.STRONG.GPU" in _sass_atomics(ck)


def test_the_gpu_tests_kernels_specialize_and_compile_from_torch_tensors():
    """The launch path of the GPU tests below, without launching: CPU tensors stand in for CUDA ones."""
    torch = pytest.importorskip("torch")
    n = 1000
    i32, f32 = torch.zeros(n, dtype=torch.int32), torch.zeros(n, dtype=torch.float32)
    cases = [
        (histogram_kernel, (i32, i32, n), {"BLOCK": BLOCK}, "ATOMG.E.ADD.STRONG.GPU"),
        (sum_kernel, (f32, f32, n), {"BLOCK": BLOCK, "PER_ELEMENT": False}, "ATOMG.E.ADD.F32.FTZ.RN.STRONG.GPU"),
        (first_writer_kernel, (i32, i32), {}, "ATOMG.E.CAS.STRONG.GPU"),
        (gathered_kernel, (i32, i32, i32, i32, n), {"OP": "min", "BLOCK": BLOCK}, "ATOMG.E.MIN.S32.STRONG.GPU"),
        (rmw_kernel, (i32, i32, i32, n), {"OP": "xchg", "BLOCK": BLOCK}, "ATOMG.E.EXCH.STRONG.GPU"),
    ]
    for kern, args, kw, want in cases:
        ck = kern[(2,)].compiled(*args, arch="sm90", **kw)
        assert want in _sass_atomics(ck), (kern.name, sorted(_sass_atomics(ck)))


# ------------------------------------------------------------------ errors at the user's line


@gluon.jit
def bad_kernel(dst_ptr, n, WHAT: gl.constexpr):
    layout = gl.Layout.blocked([1], [32], [4])
    offs = gl.arange(0, 128, layout=layout)
    if WHAT == "sem":
        gl.atomic_add(dst_ptr + offs, 1, sem="seq_cst")
    elif WHAT == "scope":
        gl.atomic_max(dst_ptr + offs, 1, scope="device")
    elif WHAT == "xor":
        gl.atomic_xor(dst_ptr + offs, 1)
    elif WHAT == "cas_mask":
        gl.atomic_cas(dst_ptr + offs, 0, 1, mask=offs < n)
    elif WHAT == "i8":
        gl.atomic_add(dst_ptr + offs, 1)
    elif WHAT == "f16_max":
        gl.atomic_max(dst_ptr + offs, 1.0)


@gluon.jit
def cas_under_if_kernel(dst_ptr, n, XBLOCK: gl.constexpr):
    idx = gl.thread_id(0)
    if idx < n:
        gl.atomic_cas(dst_ptr + idx, 0, 1)


@pytest.mark.parametrize("what,dt,line,msg", [
    ("sem", gl.int32, 'sem="seq_cst"',
     "atomic_add: sem='seq_cst' is not one of 'relaxed', 'acquire', 'release', 'acq_rel'"),
    ("scope", gl.int32, 'scope="device"', "atomic_max: scope='device' is not one of 'gpu', 'cta', 'sys'"),
    ("xor", gl.float32, "gl.atomic_xor(", "atomic_xor on a pointer to f32: it takes i32, u32, i64, u64"),
    ("cas_mask", gl.int32, "mask=offs < n)", "atomic_cas takes no mask (neither does Triton's tt.atomic_cas)"),
    ("i8", gl.int8, "gl.atomic_add(dst_ptr + offs, 1)\n", "atomic_add on a pointer to i8: it takes "),
    ("f16_max", gl.float16, "gl.atomic_max(dst_ptr + offs, 1.0)", "atomic_max on a pointer to f16: it takes "),
])
def test_bad_arguments_are_gluon_errors_at_the_users_line(what, dt, line, msg):
    with pytest.raises(GluonError) as e:
        bad_kernel.trace(PointerArg(dt), ScalarArg(gl.int32), WHAT=what)
    text = str(e.value)
    assert text.startswith(f"{HERE}:{_line_of(bad_kernel, line)} (in bad_kernel): "), text
    assert msg in text, text


def test_cas_under_a_per_thread_if_is_refused():
    with pytest.raises(GluonError, match=r"atomic_cas cannot be masked .* per-thread `if`"):
        cas_under_if_kernel.trace(PointerArg(gl.int32), ScalarArg(gl.int32), XBLOCK=128, block=(128,))


def test_ir_verifier_checks_the_attrs():
    m = rmw_kernel.trace(*_args(gl.int32), OP="add", BLOCK=128)
    (a,) = [o for o in m.kernel.walk() if o.kind == "atomic_rmw"]
    a.attrs["sem"] = "seq_cst"
    with pytest.raises(GluonError, match=r"atomic_rmw: attrs\['sem'\] must be one of relaxed, acquire"):
        m.verify()
    a.attrs["sem"], a.attrs["op"] = "relaxed", "fmul"
    with pytest.raises(GluonError, match=r"attrs\['op'\] must be one of add, fadd"):
        m.verify()


# ------------------------------------------------------------------ on the GPU


BLOCK = 512


@gluon.jit
def histogram_kernel(hist_ptr, x_ptr, n, BLOCK: gl.constexpr):
    layout = gl.Layout.blocked([1], [32], [4])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    m = offs < n
    b = gl.load(x_ptr + offs, mask=m, other=0)
    gl.atomic_add(hist_ptr + b, 1, mask=m)


@gluon.jit
def sum_kernel(out_ptr, x_ptr, n, BLOCK: gl.constexpr, PER_ELEMENT: gl.constexpr):
    layout = gl.Layout.blocked([1], [32], [4])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    x = gl.load(x_ptr + offs, mask=offs < n, other=0.0)
    if PER_ELEMENT:
        gl.atomic_add(out_ptr + offs * 0, x, mask=offs < n, sem="relaxed")
    else:
        gl.atomic_add(out_ptr, gl.sum(x, 0))


@gluon.jit
def first_writer_kernel(flag_ptr, old_ptr):
    pid = gl.program_id(0)
    old = gl.atomic_cas(flag_ptr, 0, pid + 1)
    gl.store(old_ptr + pid, old)


def _cuda():
    import torch
    return torch, "cuda"


@pytest.mark.gpu
def test_gpu_histogram_matches_bincount():
    torch, dev = _cuda()
    n = 1_000_003
    x = torch.randint(0, 256, (n,), device=dev, dtype=torch.int32)
    hist = torch.zeros(256, device=dev, dtype=torch.int32)
    histogram_kernel[(_cdiv(n, BLOCK),)](hist, x, n, BLOCK=BLOCK)
    torch.cuda.synchronize()
    want = torch.bincount(x.long(), minlength=256).to(torch.int32)
    assert torch.equal(hist, want)
    assert int(hist.sum()) == n


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


@pytest.mark.gpu
@pytest.mark.parametrize("per_element", [False, True])
def test_gpu_float_sum_into_one_scalar(per_element):
    torch, dev = _cuda()
    if per_element:       # one atomic per element, on quarter-integers: every partial sum is exact in fp32
        n = 300_001
        x = torch.randint(-8, 9, (n,), device=dev).to(torch.float32) / 4
    else:                 # one atomic per program of its block's sum, on random floats
        n = 4_000_037
        x = torch.rand(n, device=dev, dtype=torch.float32) - 0.25
    out = torch.full((1,), 0.0, device=dev, dtype=torch.float32)
    sum_kernel[(_cdiv(n, BLOCK),)](out, x, n, BLOCK=BLOCK, PER_ELEMENT=per_element)
    torch.cuda.synchronize()
    want = x.double().sum().item()
    adds = n if per_element else _cdiv(n, BLOCK)
    # fp32 rounding in an arbitrary order: ~sqrt(adds) roundings of at most 2**-24 * |running sum| each
    tol = 8 * adds ** 0.5 * 2.0 ** -24 * x.double().abs().sum().item() + 1e-3
    assert abs(out.item() - want) <= tol, (out.item(), want, tol)
    if per_element:
        assert out.item() == want


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["max", "min"])
def test_gpu_int32_max_min_exact(op):
    torch, dev = _cuda()
    n, slots = 200_003, 97
    vals = torch.randint(-2**31, 2**31 - 1, (n,), device=dev, dtype=torch.int32)
    idx = torch.randint(0, slots, (n,), device=dev, dtype=torch.int32)
    init = torch.randint(-2**31, 2**31 - 1, (slots,), device=dev, dtype=torch.int32)
    dst = init.clone()                  # element i updates slot idx[i]: many lanes race on each slot
    old = torch.full((n,), 0x5A5A5A5A, device=dev, dtype=torch.int32)      # poison
    gathered_kernel[(_cdiv(n, BLOCK),)](dst, idx, vals, old, n, OP=op, BLOCK=BLOCK)
    torch.cuda.synchronize()
    reduce = "amax" if op == "max" else "amin"
    want = init.long().scatter_reduce(0, idx.long(), vals.long(), reduce=reduce, include_self=True).to(torch.int32)
    assert torch.equal(dst, want)
    # each old value is the slot's value at some point: between init and the final value
    lo, hi = (init[idx.long()], want[idx.long()]) if op == "max" else (want[idx.long()], init[idx.long()])
    assert bool(((old >= lo) & (old <= hi)).all())


@gluon.jit
def gathered_kernel(dst_ptr, idx_ptr, val_ptr, old_ptr, n, OP: gl.constexpr, BLOCK: gl.constexpr):
    layout = gl.Layout.blocked([1], [32], [4])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    m = offs < n
    i = gl.load(idx_ptr + offs, mask=m, other=0)
    v = gl.load(val_ptr + offs, mask=m)
    if OP == "max":
        old = gl.atomic_max(dst_ptr + i, v, mask=m)
    else:
        old = gl.atomic_min(dst_ptr + i, v, mask=m)
    gl.store(old_ptr + offs, old, mask=m)


@pytest.mark.gpu
def test_gpu_cas_first_writer_wins():
    torch, dev = _cuda()
    programs = 1000
    flag = torch.zeros(1, device=dev, dtype=torch.int32)
    old = torch.full((programs,), -7, device=dev, dtype=torch.int32)      # poison
    first_writer_kernel[(programs,)](flag, old)
    torch.cuda.synchronize()
    winner = int(flag.item())
    assert 1 <= winner <= programs
    # exactly one program saw 0 (it swapped); every other one saw the winner's value
    assert int((old == 0).sum()) == 1
    assert int(old[winner - 1]) == 0
    assert bool(((old == 0) | (old == winner)).all())


@pytest.mark.gpu
def test_gpu_xchg_returns_the_old_values():
    torch, dev = _cuda()
    n = 100_003
    dst = torch.randperm(n, device=dev, dtype=torch.int64).to(torch.int32)
    before = dst.clone()
    vals = torch.randperm(n, device=dev, dtype=torch.int64).to(torch.int32) + n
    old = torch.full((n,), -1, device=dev, dtype=torch.int32)             # poison
    rmw_kernel[(_cdiv(n, BLOCK),)](dst, vals, old, n, OP="xchg", BLOCK=BLOCK)
    torch.cuda.synchronize()
    assert torch.equal(dst, vals)
    assert torch.equal(old, before)
    assert torch.equal(torch.sort(old).values, torch.arange(n, device=dev, dtype=torch.int32))
