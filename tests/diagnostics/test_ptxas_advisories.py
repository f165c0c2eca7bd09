"""GL801: what ptxas says about the machine code of a kernel the passes accepted. A kernel whose async
WGMMA product is moved to other registers while it may still run (here: renamed through a loop, each
iteration's product issued into fresh registers and carried on in flight) makes ptxas serialize every
WGMMA of the kernel (its C7514 advisory), which Triton's compile only logs; compile_module warns with it at
the kernel's def line. Compiles for sm_90 on the CPU (ptxas ships in the Triton wheel)."""
import inspect
import warnings

import gluon.language as gl
from gluon import SM90, Layout, kernel
from gluon.jit import compile as compile_kernel_of
from gluon.language import fence_async_shared, smem, wgmma, wgmma_wait
from gluon.passes.bank_conflicts import GluonWarning

from _diag import gemm_refs

ACC = Layout.wgmma((4, 1), instr_n=128)
CODE = "GL801"
STALE = "GL802"


def _rows_cols(R, C):
    return gl.arange(0, R)[:, None] * C + gl.arange(0, C)[None, :]


def lagged_kernel(carry_in_flight: bool):
    @kernel(arch=SM90, num_warps=4)
    def lagged(A, B, C, n):                                                 # the def line GL801 points at
        a_s = smem(A.dtype, Layout.swizzled(128, 64), name="a", value=gl.load(A + _rows_cols(128, 64)))
        b_s = smem(B.dtype, Layout.swizzled(64, 128), name="b", value=gl.load(B + _rows_cols(64, 128)))
        fence_async_shared()
        acc = gl.zeros((128, 128), gl.float32, layout=ACC)
        prev = wgmma_wait(wgmma(a_s, b_s, acc, wait=False, use_acc=False), a_s, b_s,
                          pendings=1 if carry_in_flight else 0)
        for _ in range(0, n):
            part = wgmma(a_s, b_s, acc, wait=False, use_acc=False)         # fresh registers every iteration
            prev = wgmma_wait(prev, a_s, b_s, pendings=1)
            acc = acc + prev
            if carry_in_flight:
                prev = wgmma_wait(part, pendings=1)                         # carried on while it runs
            else:
                prev = wgmma_wait(part, a_s, b_s, pendings=0)
        acc = acc + wgmma_wait(prev, a_s, b_s, pendings=0)
        C[_rows_cols(128, 128)] = acc.to(C.dtype)
    return lagged


def _compile(kern):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        ck = compile_kernel_of(kern, *gemm_refs()[:3], gemm_refs()[3])
    return ck, [w for w in got if issubclass(w.category, GluonWarning) and f"[{CODE}] " in str(w.message)]


def test_gl801_a_product_renamed_in_flight_serializes_every_wgmma():
    kern = lagged_kernel(True)
    ck, got = _compile(kern)
    assert ck.binary.advisories and "C7514" in ck.binary.advisories[0]
    assert len(got) == 1 and "wgmma.mma_async instructions are serialized" in str(got[0].message)
    fn = kern.fn
    lines, start = inspect.getsourcelines(fn)
    assert got[0].filename == inspect.getsourcefile(fn)
    assert start <= got[0].lineno < start + 3          # the def line (after the decorator)


def test_gl801_the_product_waited_for_compiles_without_advisories():
    ck, got = _compile(lagged_kernel(False))
    assert ck.binary.advisories == [] and got == []


def test_gl801_the_shipped_kernels_have_no_advisories():
    """The GEMM's and attention's default configs (and the pinned softmax) compile without a ptxas advisory."""
    from gluon import DType
    from gluon.kernels.attention_sm90 import compile_variant as attention_variant
    from gluon.kernels.gemm_sm90.host import compile_variant as gemm_variant
    for ck in (gemm_variant(DType.bf16), attention_variant(128, DType.bf16, True),
               attention_variant(64, DType.bf16, False), attention_variant(128, DType.bf16, False, PIN_SOFTMAX=True)):
        assert ck.binary.advisories == [], ck.binary.advisories


def test_gl802_a_descriptor_read_unwritten_on_some_path_warns_at_the_def_line(monkeypatch):
    """GL802: `Binary.descriptor_hazards` (the SASS check, tests/test_sass_flow.py, which has the miscompile's
    pattern) non-empty: compile_module warns at the kernel's def line with the first place. The check's finding
    is stood in for here: no small kernel makes ptxas 12.8 drop a descriptor's computation on demand."""
    from gluon.backend.binary import Binary
    where = "line 754: HGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], R24 reads UR20, UR21, written on some paths only"
    monkeypatch.setattr(Binary, "descriptor_hazards", lambda self: [where])
    kern = lagged_kernel(False)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        compile_kernel_of(kern, *gemm_refs()[:3], gemm_refs()[3])
    ours = [w for w in got if issubclass(w.category, GluonWarning) and f"[{STALE}] " in str(w.message)]
    assert len(ours) == 1 and f"(1 places; the first: {where})" in str(ours[0].message)
    lines, start = inspect.getsourcelines(kern.fn)
    assert start <= ours[0].lineno < start + 3


def test_gl802_the_shipped_kernels_read_every_descriptor_written():
    from gluon import DType
    from gluon.kernels.attention_sm90 import compile_variant as attention_variant
    from gluon.kernels.gemm_sm90.host import compile_variant as gemm_variant
    for ck in (gemm_variant(DType.bf16), attention_variant(64, DType.bf16, True, PERSISTENT=True, PREFETCH_Q=True)):
        assert ck.binary.descriptor_hazards() == []
