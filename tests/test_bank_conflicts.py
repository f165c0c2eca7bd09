"""Bank-conflict analysis of register <-> shared copies (gluon/passes/bank_conflicts.py)."""
import inspect
import warnings

import pytest

import gluon.language as gl
from gluon import SM80, DType, Layout, TensorRef, kernel
from gluon import ir
from gluon.jit import run_passes
from gluon.kernels.gemm_tile_sm90 import gemm_tile_sm90
from gluon.kernels.tile_dots import mma_tile_sm80
from gluon.language import smem
from gluon.passes.bank_conflicts import (Access, GluonWarning, bank_conflict_degree, element_offset,
                                         suggest_swizzle, warp_access)
from gluon.passes.layout_check import check_layouts

F32, F16 = DType.f32, DType.f16
PLAIN = Layout.shared(1, 1, 1)
ROW = Layout.blocked([1, 1], [1, 32], [4, 1])      # 32 lanes along one row
COL = Layout.blocked([1, 1], [32, 1], [1, 4])      # each lane a different row, same column
COL_V4 = Layout.blocked([1, 4], [32, 1], [1, 4])   # each lane 4 floats (16 bytes) of a different row


# ------------------------------------------------------------------------------ the model


def test_swizzled_offsets_follow_ttg_swizzled_shared():
    sh = Layout.shared(vec=2, per_phase=2, max_phase=4)
    # row 5: phase (5 // 2) % 4 = 2; column 3 is in vec-group 1 -> group 1 ^ 2 = 3 -> 3 * 2 + 1
    assert element_offset((5, 3), (8, 16), sh) == 5 * 16 + 7
    # order (0, 1): dim 0 is contiguous, so (3, 5) is "row" 5, "column" 3 of a tile with 8-long rows
    assert element_offset((3, 5), (8, 16), Layout.shared(2, 2, 4, (0, 1))) == 5 * 8 + (((1 ^ 2) % 4) * 2 + 1)
    assert element_offset((7,), (64,), sh) == 7                         # 1-D: no swizzle


def test_row_access_is_conflict_free():
    assert bank_conflict_degree(ROW, (32, 32), F32, PLAIN) == 1.0


def test_column_access_without_swizzle_is_32_way():
    acc = warp_access(COL, (32, 32), F32, PLAIN)
    assert (acc.width, acc.groups, acc.wavefronts(), acc.degree) == (4, 1, 32, 32.0)


def test_column_access_with_full_xor_swizzle_is_conflict_free():
    assert bank_conflict_degree(COL, (32, 32), F32, Layout.shared(vec=1, per_phase=1, max_phase=32)) == 1.0
    assert bank_conflict_degree(COL, (32, 32), F32, Layout.shared(vec=1, per_phase=1, max_phase=8)) == 4.0


def test_16_byte_accesses_are_served_8_lanes_at_a_time():
    # 8 lanes x 16 bytes = 128 bytes along a row: 4 phases, each conflict-free
    acc = warp_access(Layout.blocked([1, 4], [4, 8], [4, 1]), (32, 32), F32, PLAIN)
    assert (acc.width, acc.groups, acc.wavefronts(), acc.degree) == (16, 4, 4, 1.0)
    # 8 lanes each in a different row, same 16 bytes: banks 0-3 hold 8 words each -> 8 per group
    acc = warp_access(COL_V4, (32, 32), F32, PLAIN)
    assert (acc.width, acc.groups, acc.wavefronts(), acc.degree) == (16, 4, 32, 8.0)
    # 8-byte accesses: 2 groups of 16 lanes
    acc = warp_access(Layout.blocked([1, 2], [32, 1], [1, 4]), (32, 32), F32, PLAIN)
    assert (acc.width, acc.groups, acc.wavefronts(), acc.degree) == (8, 2, 32, 16.0)
    # a swizzled layout caps the vector at its vec-group (2 halves = 4 bytes here)
    acc = warp_access(Layout.blocked([1, 8], [4, 8], [4, 1]), (32, 64), F16, Layout.shared(2, 1, 8))
    assert acc.width == 4
    # 1-D, 16 bytes per lane, consecutive lanes: conflict-free
    assert bank_conflict_degree(Layout.blocked([8], [32], [4]), (1024,), F16, PLAIN) == 1.0


def test_broadcast_is_not_counted():
    assert Access(starts=(0,) * 32, width=4).degree == 1.0
    assert Access(starts=tuple(4 * (l // 2) for l in range(32)), width=4).degree == 1.0
    # a 4x32 tile under a 32-row layout: lanes wrap onto 4 rows, so column 0 is 4 distinct words in bank 0
    assert bank_conflict_degree(COL, (4, 32), F32, PLAIN) == 4.0


def test_suggested_swizzle_prefers_largest_vec_then_smallest_max_phase():
    fix = suggest_swizzle(COL_V4, (32, 32), F32, PLAIN)
    assert (fix.vec, fix.per_phase, fix.max_phase, fix.order) == (4, 1, 8, (1, 0))
    assert bank_conflict_degree(COL_V4, (32, 32), F32, fix) == 1.0
    # one float per lane down a column needs 32 phases; the search stops at 16
    assert suggest_swizzle(COL, (32, 32), F32, PLAIN) is None


# ------------------------------------------------------------------------------ the pass on IR


def _ir_kernel(tile_layout, shared=PLAIN, kind="smem_load", via_trans=False):
    body = ir.Region()
    b = ir.Builder(body)
    b.loc = ir.Loc("user_kernel.py", 42, "k")
    st = ir.SmemType(F32, (32, 32), shared)
    s = b.create("smem_alloc", [], [st], {"name": "s"}, names=["s"]).result
    if via_trans:
        s = b.create("smem_trans", [s], [st], {"order": (1, 0)}).result
    tt = ir.TileType(F32, (32, 32), tile_layout)
    if kind == "smem_load":
        b.create("smem_load", [s], [tt])
    else:
        t = b.create("constant", [], [tt], {"value": 0.0}).result
        b.create("smem_store", [t, s])
    return ir.Kernel("k", [], SM80, 4, body)


def test_hand_built_ir_is_recorded_and_warned():
    k = _ir_kernel(COL_V4, kind="smem_store")
    with pytest.warns(GluonWarning, match=r"user_kernel\.py:42: smem_store .*8-way bank conflict: 32 wavefronts "
                                          r"where 4 would do") as rec:
        check_layouts(k)
    assert len(rec) == 1 and rec[0].filename == "user_kernel.py" and rec[0].lineno == 42
    (c,) = k.attrs["bank_conflicts"]
    assert c == {"op": "smem_store", "loc": ir.Loc("user_kernel.py", 42, "k"), "degree": 8.0,
                 "layout": COL_V4, "shared": PLAIN}


@pytest.mark.parametrize("layout,shared,via_trans", [
    (ROW, PLAIN, False),                                                  # conflict-free
    (COL, Layout.shared(1, 1, 32), False),                                # swizzled away
    (Layout.dot_operand(0, Layout.mma((4, 1)), 1), PLAIN, False),         # ldmatrix: outside the model
    (Layout.mma((4, 1)), PLAIN, False),                                   # stmatrix / shuffles: outside
    (COL, PLAIN, True),                                                   # a transposed view: outside
])
def test_nothing_reported(layout, shared, via_trans):
    k = _ir_kernel(layout, shared, via_trans=via_trans)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GluonWarning)
        check_layouts(k)
    assert "bank_conflicts" not in k.attrs


# ------------------------------------------------------------------------------ DSL kernels, whole pipeline


@kernel(arch=SM80, num_warps=4)
def transpose_through_smem(A):
    s = smem(gl.float32, Layout.shared(vec=1, per_phase=1, max_phase=1), shape=(32, 32), name="s")
    s.store(gl.zeros((32, 32), gl.float32, layout=Layout.blocked([1, 4], [32, 1], [1, 4])))  # column-wise
    s.load(Layout.blocked([1, 1], [1, 32], [4, 1]))                                          # row-wise: fine
    s.load(Layout.blocked([1, 1], [32, 1], [1, 4]))                                          # load column-wise


def _line_of(fn, text):
    lines, start = inspect.getsourcelines(fn.fn if hasattr(fn, "fn") else fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


def test_dsl_kernel_warnings_name_line_degree_layouts_and_fix():
    with pytest.warns(GluonWarning) as rec:
        m = run_passes(transpose_through_smem.trace(TensorRef("A", F32, shape=(32, 32))))
    msgs = [str(w.message) for w in rec if issubclass(w.category, GluonWarning)]
    assert len(msgs) == 2
    store_line = _line_of(transpose_through_smem, "s.store(")
    load_line = _line_of(transpose_through_smem, "# load column-wise")
    store, load = msgs
    assert f"test_bank_conflicts.py:{store_line}: smem_store" in store
    assert "8-way bank conflict: 32 wavefronts where 4 would do" in store
    assert "blocked(spt=[1, 4], tpw=[32, 1], wpc=[1, 4], order=[1, 0])" in store
    assert "shared(vec=1, per_phase=1, max_phase=1, order=[1, 0])" in store
    assert "use Layout.shared(vec=4, per_phase=1, max_phase=8, order=(1, 0)) to make it conflict-free" in store
    assert f"test_bank_conflicts.py:{load_line}: smem_load" in load
    assert "32-way bank conflict: 32 wavefronts where 1 would do" in load
    assert "no swizzle in the searched set removes it" in load
    recs = m.kernel.attrs["bank_conflicts"]
    assert [(r["op"], r["loc"].line, r["degree"]) for r in recs] == [("smem_store", store_line, 8.0),
                                                                       ("smem_load", load_line, 32.0)]
    assert all(r["shared"] == Layout.shared(1, 1, 1) for r in recs)


@pytest.mark.parametrize("build", [
    lambda: mma_tile_sm80.trace(TensorRef("A", F16, shape=(64, 32)), TensorRef("B", F16, shape=(32, 64)),
                                TensorRef("C", F32, shape=(64, 64))),
    lambda: gemm_tile_sm90.trace(TensorRef("A", F16, shape=("M", "K")), TensorRef("B", F16, shape=("K", "N")),
                                 TensorRef("C", F16, shape=("M", "N")), DType.i32),
], ids=["mma_tile_sm80", "gemm_tile_sm90"])
def test_builtin_kernels_have_nothing_to_report(build):
    with warnings.catch_warnings():
        warnings.simplefilter("error", GluonWarning)
        m = run_passes(build())
    assert "bank_conflicts" not in m.kernel.attrs


# ------------------------------------------------------------------------------ NVMMA layouts

from gluon import SwizzleMode  # noqa: E402
from gluon.passes.bank_conflicts import (BANK_BYTES, NUM_BANKS, WARP_SIZE, nvmma_byte_offset,  # noqa: E402
                                         run_length)

_DT = {1: DType.f8e4m3, 2: DType.f16, 4: DType.f32}


def _brute_nvmma(i, j, rows, cols, e, w, transposed):
    """TMA's swizzle in the PTX manual's words: W-byte lines, stored one column block of W bytes after
    another; in line L of a block, 16-byte chunk c lands at chunk c ^ ((L * W // 128) % (W // 16))."""
    if transposed:
        i, j, rows, cols = j, i, cols, rows
    if w == 0:
        return (i * cols + j) * e
    block, byte = divmod(j * e, w)
    chunk, within = divmod(byte, 16)
    chunk ^= (i * w // 128) % (w // 16)
    return block * rows * w + i * w + chunk * 16 + within


def _brute_degree(layout, shape, dtype, shared):
    """Every lane's every byte of its first access, through the offset of each element separately (not the
    model's contiguous-run shortcut); banks counted byte by byte, per 128-byte phase group."""
    e = dtype.bytes
    run = run_length(layout, shape, dtype, shared)
    width = run * e
    groups = 1 if width <= 4 else width * WARP_SIZE // 128
    per = WARP_SIZE // groups
    fast = layout.order[0]
    total = 0
    for g in range(groups):
        words: dict[int, set] = {}
        for lane in range(g * per, (g + 1) * per):
            c, rest = [0, 0], lane
            for d in layout.order:
                c[d], rest = rest % layout.threads_per_warp[d], rest // layout.threads_per_warp[d]
            base = [(c[d] * layout.size_per_thread[d]) % shape[d] for d in range(2)]
            for k in range(run):
                idx = list(base)
                idx[fast] += k
                addr = _brute_nvmma(idx[0], idx[1], *shape, e, shared.swizzle.bytes, shared.transposed)
                for b in range(e):
                    words.setdefault((addr + b) // BANK_BYTES % NUM_BANKS, set()).add((addr + b) // BANK_BYTES)
        total += max(len(v) for v in words.values())
    return total / groups


_REG_LAYOUTS = [Layout.blocked([1, v], [r, 32 // r], [4, 1], order) for v in (1, 2, 4, 8, 16)
                for r in (1, 2, 4, 8, 32) for order in ((1, 0), (0, 1))]


@pytest.mark.parametrize("e", [1, 2, 4])
@pytest.mark.parametrize("mode", list(SwizzleMode))
@pytest.mark.parametrize("transposed", [False, True])
def test_nvmma_model_matches_a_brute_force_address_simulation(e, mode, transposed):
    """For every swizzle mode x element size x common register layout: the offsets are a bijection onto the
    tile's bytes and agree with the PTX manual's chunk-XOR form, and the predicted degree equals the
    byte-by-byte simulation."""
    dt = _DT[e]
    cols = 2 * 128 // e                              # two swizzle blocks of the widest swizzle
    shape = (cols, 64) if transposed else (64, cols)
    shared = Layout.swizzled(*shape, mode, transposed=transposed)
    offs = {nvmma_byte_offset((i, j), shape, e, shared) for i in range(shape[0]) for j in range(shape[1])}
    assert len(offs) == shape[0] * shape[1] and max(offs) < shape[0] * shape[1] * e
    for i, j in ((0, 0), (5, 17), (63 if not transposed else cols - 1, 3), (7, cols // 2 + 9)):
        i, j = min(i, shape[0] - 1), min(j, shape[1] - 1)
        assert nvmma_byte_offset((i, j), shape, e, shared) == _brute_nvmma(i, j, *shape, e, mode.bytes, transposed)
    for layout in _REG_LAYOUTS:
        assert bank_conflict_degree(layout, shape, dt, shared) == _brute_degree(layout, shape, dt, shared), layout


def test_nvmma_row_reads_are_conflict_free_and_column_reads_are_not():
    """16-byte row reads of a 128-byte-swizzled f16 tile (the coalesced epilogue's pattern) take one wavefront
    per 8 lanes; one element per lane down a column conflicts without a swizzle and not with one."""
    sh = Layout.swizzled(64, 128, SwizzleMode.B128)
    assert bank_conflict_degree(Layout.blocked([1, 8], [2, 16], [4, 1]), (64, 128), F16, sh) == 1.0
    col = Layout.blocked([1, 1], [32, 1], [1, 4], (0, 1))
    plain = Layout.swizzled(64, 128, SwizzleMode.NONE)
    assert bank_conflict_degree(col, (64, 128), F32, plain) > 1.0
    assert bank_conflict_degree(col, (64, 128), F32, Layout.swizzled(64, 128, SwizzleMode.B128)) < \
        bank_conflict_degree(col, (64, 128), F32, plain)


def test_nvmma_conflict_is_warned_with_a_swizzle_that_removes_it():
    k = _ir_kernel(Layout.blocked([1, 4], [32, 1], [1, 4]), Layout.swizzled(32, 32, SwizzleMode.NONE))
    with pytest.warns(GluonWarning, match=r"bank conflict.*use Layout.swizzled\(32, 32, SwizzleMode.B128\)"):
        check_layouts(k)
