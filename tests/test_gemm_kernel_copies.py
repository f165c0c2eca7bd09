"""The GEMM kernel's own copies of operands TMA cannot read (COPY_A / COPY_B), without a GPU: when a launch takes
them (`kernel_copies`, `_copies_in_kernel`), the programs' meeting after them (`grid_meet_all`'s arithmetic),
and the machine code of a kernel that copies."""
import re

import pytest

import gluon
import gluon.language as gl
from gluon import DType
from gluon.ir import GluonError
from gluon.language.kernel import PointerArg, ScalarArg
from gluon.language.nvidia import ptx
from gluon.types import TensorRef

torch = pytest.importorskip("torch")

from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, num_warps, resolve_config  # noqa: E402
from gluon.kernels.gemm_sm90.kernel import gemm_sm90_copying  # noqa: E402
from gluon.kernels.gemm_sm90 import host, padding  # noqa: E402
from test_gemm_splitk_grid import meet_constants, one_launch  # noqa: E402


@pytest.mark.parametrize("programs", [1, 3, 4, 100, 132, 264, 1000])
@pytest.mark.parametrize("warps", [1, 4, 8, 32])
def test_grid_meet_all_adds_a_whole_unit_a_launch_and_lets_go_at_the_last_arrival(programs, warps):
    """Whatever the number of programs: every warp's addition (program 0's with the rest) sums to the unit, so the
    counter needs no reset; and as in grid_meet, no warp is let go before the last one has arrived (the goal each
    computes from the counter it found is the launch's end), also across the 32-bit wrap."""
    register, mask, unit = meet_constants(None)
    assert register is None                         # each warp's share is an operand, not an immediate
    share, rest = ptx.meet_shares(programs * warps, warps)
    adds = [share + (rest if p == 0 else 0) for p in range(programs) for _ in range(warps)]
    assert sum(adds) == unit and min(adds) >= 1
    for start in (0, 2**32 - 2 * unit):
        count = start
        for order in (adds, adds[::-1]):           # program 0's warps first, or last
            count = one_launch(count, order, mask, unit)


def test_grid_meet_all_checks_its_arguments():
    @gluon.jit
    def bad(cnt_ptr, x_ptr, WHICH: gl.constexpr):
        if WHICH == 0:
            ptx.grid_meet_all(cnt_ptr + 0, 12)
        else:
            ptx.grid_meet_all(x_ptr + 0, 4)

    with pytest.raises(GluonError, match=r"warps=12 must be a power of two"):
        bad.compile(PointerArg(DType.i32), PointerArg(DType.f32), WHICH=0, arch="sm90", num_warps=4)
    with pytest.raises(GluonError, match=r"counter must be one int32 .* got f32"):
        bad.compile(PointerArg(DType.i32), PointerArg(DType.f32), WHICH=1, arch="sm90", num_warps=4)


def _pad(a, b, c):
    return padding.pad_plan(a, b, c, None, None)


def test_kernel_copies_small_padded_operands_whose_rows_it_can_index():
    a, b = torch.randn(256, 250).half(), torch.randn(250, 256).half()
    c = torch.empty(256, 256).half()
    pad = _pad(a, b, c)
    got = padding.kernel_copies(pad, a, b)
    assert got[0] is a and got[1] is None                          # A padded, B as given
    av, bt = a[:, :249], torch.randn(1000, 999).half()             # B [N, K]: both
    got = padding.kernel_copies(_pad(av, bt, torch.empty(256, 1000).half()), av, bt)
    assert got[0] is av and got[1] is bt
    view = torch.randn(300, 500).half()[:, ::2]                    # rows not contiguous: the host copies
    assert padding.kernel_copies(_pad(view, b, c), view, b) is None
    big = torch.randn(2048, 1025).half()                           # 4.2 MB to copy: a copy of its own
    assert padding.kernel_copies(_pad(big, torch.randn(1025, 256).half(), torch.empty(2048, 256).half()), big,
                                 None) is None
    strided_c = torch.empty(256, 260).half()[:, :250]              # C padded too: the host copies
    bb = torch.randn(250, 250).half()
    assert padding.kernel_copies(_pad(a, bb, strided_c), a, bb) is None
    far = torch.empty(2, 2**31, device="meta", dtype=torch.float16)[:, :250]   # rows 2**31 elements apart
    assert padding.kernel_copies(padding.PadPlan(a=far), far, b) is None
    assert padding.kernel_copies(padding.PadPlan(a=far), far[:1], b)[0] is not None   # one row: no pitch
    assert padding.row_pitch(a) == 250 and padding.row_pitch(big[:1]) == 1025


def test_configs_whose_kernel_copies():
    one = DEFAULT_CONFIG.replace(CONSUMER_WGS=1)
    assert host._copies_in_kernel(DEFAULT_CONFIG, 1, 132, 1 << 20)
    assert host._copies_in_kernel(one, 1, 16, 4 * 16 * 4 * 1024)                   # four rounds of loads
    assert not host._copies_in_kernel(one, 1, 16, 4 * 16 * 4 * 1024 + 1)          # more: a copy of its own
    assert host._copies_in_kernel(DEFAULT_CONFIG.replace(BLOCK_M=192, CONSUMER_WGS=3, SPLIT_WGS=True), 1, 132, 1000)
    assert not host._copies_in_kernel(DEFAULT_CONFIG.replace(SPLITK_FIXUP=True), 4, 132, 1000)   # CNT is the fixup's
    assert not host._copies_in_kernel(DEFAULT_CONFIG.replace(SPLITK_GRID=4), 4, 132, 1000)


def test_the_kernel_copies_only_in_launches_planned_outside_a_graph_capture(monkeypatch):
    """A launch first planned while its stream is captured takes the driver's copy (a memcpy node costs less GPU
    time in replays, and no meeting counter is made inside the capture); nor does a caller's compiled kernel, the
    interpreter or a CPU tensor copy."""
    import gluon.runtime.cuda as rt_cuda

    class Backend:
        capture = False

        def capturing(self):
            return self.capture

    class OnGpu:
        def get_device(self):
            return 0
    be = Backend()
    monkeypatch.setattr(rt_cuda, "DEFAULT_BACKEND", be)
    assert host._kernel_may_copy(OnGpu(), None)
    be.capture = True
    assert not host._kernel_may_copy(OnGpu(), None)
    be.capture = False
    assert not host._kernel_may_copy(OnGpu(), object())                       # a caller's compiled kernel
    assert not host._kernel_may_copy(torch.empty(2), None)                    # a CPU tensor
    import gluon.interpret
    was = gluon.interpret.set_enabled(True)
    try:
        assert not host._kernel_may_copy(OnGpu(), None)
    finally:
        gluon.interpret.set_enabled(was)


@pytest.mark.parametrize("shape,b_kmajor", [((256, 256, 250), False), ((16, 4096, 1000), True),
                                            ((8192, 8192, 8191), False)])
def test_a_kernel_that_copies_compiles_without_spills(shape, b_kmajor):
    """The launch's pick at a few shapes, both operands copied (unaligned sources, pitches of no known
    divisibility): no spills; the PTX has the meeting's atomic add of a register share and the async-proxy
    fences (the copying warps' and the producer's)."""
    refs = list(host.stand_ins(DType.bf16))
    for n in ("A", "B"):
        refs += [TensorRef(f"{n}S", DType.bf16, shape=(f"{n}S_shape0", f"{n}S_shape1"), aligned=False),
                 ScalarArg(DType.i32, 1), TensorRef(f"{n}D", DType.bf16, shape=(f"{n}D_shape0", f"{n}D_shape1"))]
    cfg = resolve_config(*shape, 132, 2, b_kmajor=b_kmajor)
    ck = gemm_sm90_copying.compile(*refs, num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=b_kmajor, COPY_A=True,
                                   COPY_B=True, arch="sm90")
    assert ck.spills == 0
    text = ck.asm["ptx"]
    assert re.search(r"atom\.relaxed\.gpu\.global\.add\.u32 o, \[a\], %r\d+;", text)
    assert text.count("fence.proxy.async.global;") == 2


@gluon.kernel(arch=gluon.SM90, num_warps=4)
def _copy_rows_kernel(AS, A_PITCH, AD, WARPS: gl.constexpr):
    from gluon.kernels.gemm_sm90.kernel import _copy_rows
    _copy_rows(AS, A_PITCH, AD, AS.shape[0], AS.shape[1], WARPS)


@pytest.mark.parametrize("rows,cols,pitch,programs,warps", [(256, 250, 250, 16, 4), (7, 999, 1003, 3, 8),
                                                             (1, 777, 777, 47, 4), (130, 64, 65, 5, 4),
                                                             (300, 333, 340, 1, 4)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float8_e4m3fn])
def test_copy_rows_fills_the_padded_buffer_in_the_interpreter(rows, cols, pitch, programs, warps, dtype):
    """The kernel's copy (`_copy_rows`, each program its round-robin share of 16-row by 64-column blocks), run by
    the interpreter over a whole grid: the padded buffer holds the source's rows (a view `pitch` elements apart, at
    an odd base) and its padding stays as it was, whatever the programs and warps."""
    src_buf = torch.randn(rows * pitch + 3).to(dtype)
    src = src_buf[1:1 + rows * pitch].view(rows, pitch)[:, :cols]
    width = -(-cols // 16) * 16
    dst = torch.full((rows, width), 7.0).to(dtype)
    _copy_rows_kernel.interpret((programs,), src, pitch, dst, WARPS=warps, num_warps=warps)
    assert torch.equal(dst[:, :cols].view(torch.uint8), src.contiguous().view(torch.uint8))
    assert (dst[:, cols:].float() == 7.0).all()
