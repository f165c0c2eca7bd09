"""The kernel ABI the lowering returns beside the TTGIR (gluon/abi.py, backend/lowering/abi.py), on the CPU:
what each parameter is, where a launch takes its value from, and what the compile step is asked to do."""
import pytest

import gluon
import gluon.language as gl
from gluon import SM90, DType, Layout, SwizzleMode, TensorRef, kernel
from gluon.abi import KernelABI, ParamKind
from gluon.ir import GluonError
from gluon.jit import lower, run_passes
from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, gemm_sm90, num_warps, stand_ins
from gluon.language import DescArg, ScalarArg, mbarrier, smem, tma_load, warp_role
from gluon.types import ParamSource, SourceKind, WarpRole


@kernel(arch=SM90, num_warps=4)
def _mixed(A, X, D, n, BLOCK: gl.constexpr, NAME: gl.constexpr = "x"):
    buf = smem(A.dtype, Layout.swizzled(64, 64, SwizzleMode.B128), name="buf")
    bar = mbarrier(count=1, name="bar")
    with warp_role(WarpRole.PRODUCER, warp_range=(0, 3)):
        bar.expect(8192)
        tma_load(buf, A, (0, A.shape[1] - 64), bar)
        bar.wait(0)
    for k in gl.for_range("k", 0, "K", BLOCK):
        X[k] = n


def _abi(**kw):
    refs = (TensorRef("A", DType.f16, shape=("A_rows", "A_cols")), TensorRef("X", DType.f32, shape=(1024,)),
            DescArg(DType.bf16, (128, 64)), ScalarArg(DType.i32, 16))
    return lower(run_passes(_mixed.trace(*refs, BLOCK=64, **kw))).abi


def test_each_parameter_says_what_it_is_and_where_a_launch_takes_it_from():
    abi = _abi()
    by = {p.name: p for p in abi.params}
    assert [p.name for p in abi.runtime_params] == ["A", "X", "D", "n", "A_rows", "A_cols", "K"]   # sizes last
    a, x, d, n = by["A"], by["X"], by["D"], by["n"]
    assert (a.kind, a.dtype, a.block_shape, a.box, a.swizzle_bytes) == (ParamKind.TENSORDESC, DType.f16, (64, 64),
                                                                          (64, 64), 128)
    assert (x.kind, x.dtype, x.divisibility, x.needs_contiguous) == (ParamKind.POINTER, DType.f32, 16, True)
    assert (d.kind, d.box, d.swizzle_bytes) == (ParamKind.TENSORDESC, (128, 64), 128)
    assert (n.kind, n.divisibility) == (ParamKind.SCALAR, 16)
    assert [p.source for p in (a, x, d, n)] == [ParamSource.arg(i) for i in range(4)]
    assert (by["A_rows"].source, by["A_cols"].source) == (ParamSource.dim(0, 0), ParamSource.dim(0, 1))  # A.shape
    assert by["K"].source == ParamSource.keyword("K")            # a named size: the caller passes K=
    assert abi.constexprs == {"BLOCK": 64, "NAME": "x"}
    assert abi.loc.endswith(f"test_abi.py:{_mixed.loc.line}") and abi.target == ("cuda", 90, 32)
    assert KernelABI.from_json(abi.to_json()) == abi


def test_bind_takes_each_value_from_its_source():
    abi = _abi()

    class T:
        shape = (256, 512)

    a, x, d = T(), object(), object()
    assert abi.bind((a, x, d, 7), {"K": 4096}) == [a, x, d, 7, 256, 512, 4096]
    with pytest.raises(TypeError, match="needs the size 'K': pass K=... to the launch"):
        abi.bind((a, x, d, 7), {})


@kernel(arch=SM90, num_warps=4)
def _fill(X, v):
    for k in gl.for_range("k", 0, "K", 1):
        X[k] = v


def test_a_launch_without_a_keyword_size_names_it():
    torch = pytest.importorskip("torch")
    from gluon.jit import compile_module
    ck = compile_module(_fill.trace(TensorRef("X", DType.f32, shape=(1024,)), DType.f32))
    assert [p.source for p in ck.abi.runtime_params] == [ParamSource.arg(0), ParamSource.arg(1),
                                                          ParamSource.keyword("K")]
    x = torch.empty(1024)
    assert ck.launch_args((x, 1.5), {"K": 10}) == [x, 1.5, 10]
    with pytest.raises(GluonError, match="needs the size 'K'"):
        ck.launch_args((x, 1.5), {})
    with pytest.raises(GluonError, match=r"unexpected keyword argument 'KK' \(its sizes by keyword: K\)"):
        ck.launch_args((x, 1.5), {"K": 10, "KK": 4})


def test_a_keyword_the_kernel_does_not_take_is_refused_not_dropped():
    """A misspelt constexpr or size (`XBLCOK=512`) was dropped without a word, the constexpr's default taken; a
    constexpr given by position and by keyword took the positional one. Both are one line now, through the
    JIT launch (its specialization's launcher) and in the CPU interpreter alike."""
    torch = pytest.importorskip("torch")
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from copy_kernel import copy_kernel_explicit as k

    from gluon.interpret import set_enabled
    src, dst = torch.randn(4096), torch.empty(4096)
    kw = dict(XBLOCK=1024, VEC=4, NUM_WARPS=4, num_warps=4)
    was = set_enabled(True)
    try:
        with pytest.raises(GluonError, match="got unexpected keyword argument 'XBLCOK'"):
            k[(4,)](dst, src, 4096, XBLCOK=512, **{n: v for n, v in kw.items() if n != "XBLOCK"}, XBLOCK=1024)
        with pytest.raises(GluonError, match="got multiple values for 'XBLOCK' \\(by position and by keyword\\)"):
            k[(4,)](dst, src, 4096, 512, **kw)
        k[(4,)](dst, src, 4096, 1024, 4, 4, num_warps=4)                  # constexprs by position alone
        assert torch.equal(dst, src)
    finally:
        set_enabled(was)


@pytest.mark.parametrize("cfg, ctas, passes, multicast", [
    (dict(), 1, ("lean_prologue",), ()),
    (dict(CLUSTER_M=2), 2, (), ("B",)),
    (dict(TMA_PREFETCH=True, EARLY_LOADS=False, LEAN_PROLOGUE=False), 1, ("tma_prefetch",), ()),
])
def test_the_gemm_asks_for_its_cluster_and_ptx_passes_in_its_abi(cfg, ctas, passes, multicast):
    """No comment cue in the TTGIR: the compile step reads the cluster size, the multicast descriptors and
    the PTX passes from the ABI (and keys its cache on them)."""
    c = DEFAULT_CONFIG.replace(**cfg).resolve(2)
    lowered = lower(run_passes(gemm_sm90.trace(*stand_ins(DType.f16), num_warps=num_warps(c), CFG=c)))
    abi = lowered.abi
    assert (abi.num_ctas, abi.ptx_passes) == (ctas, passes)
    assert tuple(p.name for p in abi.runtime_params if p.multicast) == multicast
    assert "// gluon" not in lowered.ttgir
    assert {p.source.kind for p in abi.runtime_params} == {SourceKind.ARG, SourceKind.DIM}


def test_the_decorators_are_the_jits():
    """`@gluon.kernel` / `@gluon.jit` make a JITKernel (a language KernelTemplate that launches); the
    language's own KernelTemplate only traces."""
    import sys
    from gluon.language.kernel import KernelTemplate
    jit = sys.modules["gluon.jit"]
    assert isinstance(_mixed, jit.JITKernel) and isinstance(_mixed, KernelTemplate)
    assert gluon.kernel is jit.kernel and gluon.jit is jit.jit
    assert not hasattr(KernelTemplate, "__getitem__") and not hasattr(KernelTemplate, "compile")
