"""SM90 synchronization passes, on the CPU: shared-memory reuse by liveness, the mbarrier protocol
(pairing, expect bytes, deadlocks, phases), and the implicit stage ring / software pipeline."""
import contextlib
import inspect
import io
import os
import runpy
import sys

import pytest

import gluon.language as gl
from gluon import SM90, DType, Layout, SwizzleMode, TensorRef, WarpRole, kernel
from gluon.backend.machine_code import sass_instructions
from gluon.ir import BarrierType, GluonError, SmemType
from gluon.jit import PIPELINE, run_passes
from gluon.kernels import gemm_tile_sm90 as gemm_tile_module
from gluon.kernels.gemm_tile_sm90 import gemm_tile_sm90
from gluon.language import (
    fence_async_shared,
    for_range,
    mbarrier,
    smem,
    tma_load,
    tma_store,
    tma_store_wait,
    warp_role,
    wgmma,
    wgmma_wait,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
from quickstart_gemm import quickstart_gemm  # noqa: E402

HERE = os.path.abspath(__file__)


def _refs(out=DType.f16):
    return (TensorRef("A", DType.f16, shape=("M", "K")), TensorRef("B", DType.f16, shape=("K", "N")),
            TensorRef("C", out, shape=("M", "N")), DType.i32)


def _line_of(fn, text: str) -> int:
    """The line number of the first source line of `fn` containing `text`."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


def _allocs(module):
    return {op.attrs["name"]: op for op in module.kernel.walk() if op.kind in ("smem_alloc", "barrier_alloc")}


def _stage_users_unindexed(module):
    users = {"tma_load", "wgmma", "wgmma_wait", "smem_load", "barrier_wait", "barrier_arrive", "barrier_expect"}
    return [op for op in module.kernel.walk() if op.kind in users
            for v in op.operands if isinstance(v.type, (SmemType, BarrierType)) and v.type.stages > 1]


# ------------------------------------------------------------------------------ shared memory


def test_two_warpgroup_tile_fits_four_stages_by_reusing_the_ring():
    """128x256x64 on two warpgroups: a 4-stage ring (192 KiB) and the 64 KiB staging tile would not fit
    side by side (256 KiB > 227 KiB); the staging tile takes the ring's bytes after the loop."""
    cfg = dict(BLOCK_N=256, STAGES=4, WARPS=8)
    k = run_passes(gemm_tile_sm90.trace(*_refs(), num_warps=8, **cfg)).kernel
    assert k.attrs["smem_bytes"] <= 227 * 1024 and ("c_tile", "a_ring") in k.attrs["smem_reuse"]
    ck = gemm_tile_sm90.compile(*_refs(), num_warps=8, **cfg)
    ops = sass_instructions(ck.sass())
    assert ops["HGMMA.64x256x16.F32"] >= 4 and ck.spills == 0 and ck.shared_bytes <= 227 * 1024


def test_epilogue_tile_reuses_the_operand_ring():
    m = run_passes(gemm_tile_sm90.trace(*_refs()))
    k = m.kernel
    # before: a_ring 48 KiB + b_ring 48 KiB + ready 24 B + c_tile 32 KiB placed one after another = 132096
    assert k.attrs["smem_bytes"] == 3 * 16384 * 2 + 3 * 8 == 98328
    assert k.attrs["smem_reuse"] == [("c_tile", "a_ring")]
    al = _allocs(m)
    assert (al["a_ring"].attrs["offset"], al["b_ring"].attrs["offset"], al["ready"].attrs["offset"],
            al["c_tile"].attrs["offset"]) == (0, 49152, 98304, 0)


def test_regions_used_by_concurrent_warp_roles_do_not_share_bytes():
    m = run_passes(quickstart_gemm.trace(*_refs()))
    al = _allocs(m)
    # C_tile is written by the consumer after its loop, but the producer role runs concurrently:
    # it gets its own bytes after the rings and barriers (1024-aligned)
    assert al["C_tile"].attrs["offset"] == 99328
    assert m.kernel.attrs["smem_bytes"] == 99328 + 128 * 256 * 2
    assert "smem_reuse" not in m.kernel.attrs


def test_capacity_error_lists_every_region_with_bytes_offset_and_line():
    with pytest.raises(GluonError) as e:
        run_passes(gemm_tile_sm90.trace(*_refs(), STAGES=8))
    msg = str(e.value)
    assert "needs 256.1 KiB of shared memory, more than the 227.0 KiB a block may use on sm90" in msg
    src = gemm_tile_module.__file__
    a_line = _line_of(gemm_tile_sm90.fn, 'name="a_ring"')
    c_line = _line_of(gemm_tile_sm90.fn, 'name="c_tile"')
    assert "\n    a_ring            128.0 KiB (131072 bytes) at offset      0  smem<8x128x64xf16" in msg
    assert "\n    b_ring            128.0 KiB (131072 bytes) at offset 131072  smem<8x64x128xf16" in msg
    assert "\n    ready               0.1 KiB (64 bytes) at offset 262144  mbarrier<8, count=1>" in msg
    assert "\n    c_tile             32.0 KiB (32768 bytes) at offset      0  smem<128x128xf16" in msg
    assert f"({src}:{a_line})" in msg and f"({src}:{c_line})" in msg
    assert "c_tile reuses a_ring" in msg


# ------------------------------------------------------------------------------ barrier protocol


def _ws_ring(**kw):
    """A hand-synchronized, hopper-style producer/consumer ring (ready/empty arrays, phase (i // S) & 1,
    the producer waiting empty with phase ^ 1); `kw` breaks one rule at a time."""
    expect_bytes = kw.get("expect_bytes")
    const_phase = kw.get("const_phase", False)
    producer_expects = kw.get("producer_expects", True)

    @kernel(arch=SM90, num_warps=5)
    def ws_ring(A, B, C, K, STAGES: gl.constexpr = 3):
        off_m = gl.program_id(0) * 128
        off_n = gl.program_id(1) * 128
        a_s = smem(A.dtype, Layout.swizzled(128, 64), name="a_ring", stages=STAGES)
        b_s = smem(B.dtype, Layout.swizzled(64, 128), name="b_ring", stages=STAGES)
        ready = mbarrier(count=1, name="ready", stages=STAGES)
        empty = mbarrier(count=1, name="empty", stages=STAGES)
        num_k = gl.cdiv(K, 64)
        with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
            acc = gl.zeros((128, 128), gl.float32, layout=Layout.wgmma((4, 1), instr_n=128))
            for i in range(num_k):
                s = i % STAGES
                if const_phase:
                    ready[s].wait(0)
                else:
                    ready[s].wait((i // STAGES) & 1)
                acc = wgmma(a_s[s], b_s[s], acc)
                empty[s].arrive()
            c_s = smem(C.dtype, Layout.swizzled(128, 128), name="c_tile")
            c_s.store(acc.to(C.dtype))
            fence_async_shared()
            tma_store(C, (off_m, off_n), c_s)
            tma_store_wait(0)
        with warp_role(WarpRole.PRODUCER, warp_range=(4, 4), registers=40):
            for i in range(num_k):
                s = i % STAGES
                empty[s].wait(((i // STAGES) & 1) ^ 1)
                if producer_expects:
                    ready[s].expect(expect_bytes or (a_s.nbytes + b_s.nbytes))
                tma_load(a_s[s], A, (off_m, i * 64), ready[s])
                tma_load(b_s[s], B, (i * 64, off_n), ready[s])
    return ws_ring, ws_ring.trace(*_refs())


def test_hopper_style_ring_passes_and_is_left_alone():
    _, m = _ws_ring()
    k = m.kernel
    for name, p in PIPELINE:
        if name == "pipeline":
            before = m.pretty()
            p(k)
            after = m.pretty()
        else:
            p(k)
    assert after == before                    # the pipeline pass changed nothing
    assert [op.attrs["name"] for op in m.kernel.walk() if op.kind == "barrier_alloc"] == ["ready", "empty"]
    assert sum(op.kind == "barrier_wait" for op in m.kernel.walk()) == 2


def test_expect_bytes_must_match_the_loads():
    fn, m = _ws_ring(expect_bytes=16384)
    with pytest.raises(GluonError) as e:
        run_passes(m)
    msg = str(e.value)
    assert "barrier_expect on 'ready[i % 3]' announces 16384 bytes, but the TMA loads completing on it here " \
           "bring 32768 bytes: 16384 (a_ring[i % 3]) + 16384 (b_ring[i % 3])" in msg
    assert e.value.loc.line == _line_of(fn.fn, "ready[s].expect(")


def test_wait_with_nothing_arriving_is_a_deadlock():
    fn, m = _ws_ring(producer_expects=False)
    with pytest.raises(GluonError) as e:
        run_passes(m)
    wait_line = _line_of(fn.fn, "ready[s].wait((i // STAGES) & 1)")
    load_line = _line_of(fn.fn, "tma_load(a_s[s]")
    msg = str(e.value)
    assert msg.startswith(f"{HERE}:{wait_line} (in ws_ring): [GL110] possible deadlock: barrier_wait at "
                          f"{HERE}:{wait_line} "
                          f"waits on 'ready[i % 3]' but nothing arrives on it (tma_load at {HERE}:{load_line} delivers "
                          "bytes to it, but TMA bytes complete a phase only after an arrive")


@kernel(arch=SM90, num_warps=4)
def late_arrive(A):
    done = mbarrier(count=1, name="done")
    done.wait(0)
    done.arrive()


def test_arrive_after_the_wait_in_the_same_role_is_a_deadlock():
    with pytest.raises(GluonError) as e:
        run_passes(late_arrive.trace(TensorRef("A", DType.f16, shape=(1, 1))))
    w = _line_of(late_arrive.fn, "done.wait(0)")
    a = _line_of(late_arrive.fn, "done.arrive()")
    assert (f"possible deadlock: barrier_wait at {HERE}:{w} waits on 'done' but nothing arrives on it before: its "
            f"only arrive (barrier_arrive at {HERE}:{a}) comes after the wait in the same code path, with no loop "
            "around both") in str(e.value)


def test_constant_phase_in_a_loop_is_rejected():
    fn, m = _ws_ring(const_phase=True)
    with pytest.raises(GluonError) as e:
        run_passes(m)
    msg = str(e.value)
    assert "waits on 'ready[i % 3]' with the constant phase 0 inside the loop at" in msg
    assert "the phase does not alternate" in msg
    assert e.value.loc.line == _line_of(fn.fn, "ready[s].wait(0)")


@kernel(arch=SM90, num_warps=4)
def once_per_barrier(A, N):
    bars = mbarrier(count=1, name="once", stages=4)
    for i in range(4):
        bars[i].arrive()
        bars[i].wait(0)                  # each barrier completes once: phase 0 is right


@kernel(arch=SM90, num_warps=4)
def same_barrier_each_iteration(A, N):
    bar = mbarrier(count=1, name="step")
    for i in range(N):
        bar.arrive()
        bar.wait(0)                      # completes every iteration: wrong from the second one on


def test_constant_phase_allowed_only_on_barriers_used_once():
    a = TensorRef("A", DType.f16, shape=(1, 1))
    run_passes(once_per_barrier.trace(a, DType.i32))
    with pytest.raises(GluonError, match=r"waits on 'step' with the constant phase 0 inside the loop at .* "
                                         r"the phase does not alternate"):
        run_passes(same_barrier_each_iteration.trace(a, DType.i32))


def test_padded_worker_warpgroup_counts_against_the_register_file():
    def ws(producer_regs):
        @kernel(arch=SM90, num_warps=9)
        def regs(A):
            with warp_role(WarpRole.CONSUMER, warp_range=(0, 7), registers=232):
                gl.program_id(0)
            with warp_role(WarpRole.PRODUCER, warp_range=(8, 8), registers=producer_regs):
                gl.program_id(0)
        return regs.trace(TensorRef("A", DType.f16, shape=(1, 1)))
    run_passes(ws(24))              # 8*32*232 + 4*32*24 = 62464
    # 8*32*232 + 1*32*56 = 61184 would fit, but the producer warp is padded to a warpgroup: 66560
    with pytest.raises(GluonError, match=r"register budgets total 66560 registers \(worker warps padded to whole "
                                         r"warpgroups: \+3\), more than the 65536"):
        run_passes(ws(56))


# ------------------------------------------------------------------------------ implicit stage ring


def test_quickstart_gemm_gets_a_ready_empty_ring():
    m = run_passes(quickstart_gemm.trace(*_refs()))
    k = m.kernel
    bars = {op.attrs["name"]: op.results[0] for op in k.walk() if op.kind == "barrier_alloc"}
    assert set(bars) == {"ready", "empty"}                # the user's 'sync' barrier is gone
    assert all(b.type == BarrierType(2, 1) for b in bars.values())
    assert _stage_users_unindexed(m) == []
    loads = [op for op in k.walk() if op.kind == "tma_load"]
    assert len(loads) == 2
    for ld in loads:
        assert ld.operands[1].owner.kind == "smem_index"
        assert ld.operands[2].owner.kind == "barrier_index" and ld.operands[2].owner.operands[0] is bars["ready"]
    (mma,) = [op for op in k.walk() if op.kind == "wgmma"]
    assert [v.owner.kind for v in mma.operands[:2]] == ["smem_index", "smem_index"]
    ws = next(op for op in k.walk() if op.kind == "warp_specialize")
    consumer_loop = next(op for op in ws.regions[0].ops if op.kind == "for")
    producer_loop = next(op for op in ws.regions[1].ops if op.kind == "for")
    c_kinds = [op.kind for op in consumer_loop.regions[0].ops]
    assert c_kinds.index("barrier_wait") < c_kinds.index("wgmma") < c_kinds.index("wgmma_wait") \
        < c_kinds.index("barrier_arrive")
    p_ops = producer_loop.regions[0].ops
    p_kinds = [op.kind for op in p_ops]
    assert p_kinds.index("barrier_wait") < p_kinds.index("barrier_expect") < p_kinds.index("tma_load")
    wait = p_ops[p_kinds.index("barrier_wait")]
    assert wait.operands[0].owner.operands[0] is bars["empty"]
    assert wait.operands[1].owner.attrs["op"] == "xor"      # the producer waits with phase ^ 1
    assert p_ops[p_kinds.index("barrier_expect")].attrs["bytes"] == 128 * 64 * 2 + 64 * 256 * 2


def test_quickstart_gemm_compiles_with_hgmma_and_tma():
    ck = quickstart_gemm.compile(*_refs())
    ops = sass_instructions(ck.sass())
    assert ops["HGMMA.64x256x16.F32"] >= 4 and ops["UTMALDG.2D"] >= 2 and ops["UTMASTG.2D"] >= 1
    assert ops["SYNCS.PHASECHK"] >= 2                        # mbarrier waits on both sides
    assert ck.spills == 0


def test_quickstart_gemm_example_runs_without_a_gpu():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = runpy.run_path(os.path.join(ROOT, "examples", "quickstart_gemm.py"))["main"]()
    text = out.getvalue()
    if "PASS" in text or "FAIL" in text:               # a GPU is present: the example checked numerics
        assert rc == 0 and text.rstrip().endswith("PASS")
    else:
        assert rc == 0 and "spills=0" in text and "HGMMA.64x256x16" in text and "UTMALDG.2D" in text


def _implicit_ws(producer_start=0, consumer_wait=True, producer_loop=True):
    @kernel(arch=SM90, num_warps=5)
    def implicit_ws(A, B, C, K):
        a_smem = smem(DType.f16, Layout.swizzled(128, 64), name="A_tile", double_buffer=True)
        b_smem = smem(DType.f16, Layout.swizzled(64, 128), name="B_tile", double_buffer=True)
        mbar = mbarrier(count=1, name="sync")
        with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
            with for_range("k", 0, K, 64):
                wgmma(a_smem, b_smem, "acc", wait=consumer_wait)
            wgmma_wait("acc")
        with warp_role(WarpRole.PRODUCER, warp_range=(4, 4), registers=40):
            if producer_loop:
                with for_range("k", producer_start, K, 64) as k:
                    tma_load(a_smem, A, (0, k), barrier_name=mbar)
                    tma_load(b_smem, B, (k, 0), barrier_name=mbar)
            else:
                tma_load(a_smem, A, (0, 0), barrier_name=mbar)
                tma_load(b_smem, B, (0, 0), barrier_name=mbar)
    return implicit_ws, implicit_ws.trace(*_refs())


def test_implicit_ring_loops_need_the_same_bounds():
    run_passes(_implicit_ws()[1])
    fn, m = _implicit_ws(producer_start=64)
    with pytest.raises(GluonError) as e:
        run_passes(m)
    p = _line_of(fn.fn, 'for_range("k", producer_start')
    c = _line_of(fn.fn, 'for_range("k", 0, K, 64)')
    assert (f"the producer loop at {HERE}:{p} (range(64, K, 64)) and the consumer loop at {HERE}:{c} "
            "(range(0, K, 64)) share the ring(s) 'A_tile', 'B_tile' but do not have the same bounds") in str(e.value)


def test_implicit_ring_needs_the_wgmma_retired_in_the_iteration():
    fn, m = _implicit_ws(consumer_wait=False)
    with pytest.raises(GluonError, match=r"the wgmma reading the implicit ring is still in flight at the end of the "
                                         r"iteration \(no wgmma_wait with pendings <= 0 after it\)") as e:
        run_passes(m)
    assert e.value.loc.line == _line_of(fn.fn, "wgmma(a_smem, b_smem")


def test_unindexed_ring_that_cannot_be_transformed_names_op_line_and_reason():
    fn, m = _implicit_ws(producer_loop=False)
    with pytest.raises(GluonError) as e:
        run_passes(m)
    line = _line_of(fn.fn, "wgmma(a_smem, b_smem")
    msg = str(e.value)
    assert msg.startswith(f"{HERE}:{line} (in implicit_ws): wgmma uses the 2-stage region %A_tile without a stage "
                          "index, and no implicit stage ring could be built for it: every use of 'A_tile' must sit "
                          "directly in the body of a `for` loop")


@kernel(arch=SM90, num_warps=4)
def implicit_tile(A, B, C, K, BLOCK_M: gl.constexpr = 128, BLOCK_N: gl.constexpr = 128,
                  BLOCK_K: gl.constexpr = 64, STAGES: gl.constexpr = 3):
    off_m = gl.program_id(0) * BLOCK_M
    off_n = gl.program_id(1) * BLOCK_N
    a_s = smem(A.dtype, Layout.swizzled(BLOCK_M, BLOCK_K, SwizzleMode.B128), name="a_ring", stages=STAGES)
    b_s = smem(B.dtype, Layout.swizzled(BLOCK_K, BLOCK_N, SwizzleMode.B128), name="b_ring", stages=STAGES)
    bar = mbarrier(count=1, name="bar")
    with for_range("k", 0, K, BLOCK_K) as k:
        tma_load(a_s, A, (off_m, k), bar)
        tma_load(b_s, B, (k, off_n), bar)
        wgmma(a_s, b_s, "acc")
    acc = wgmma_wait("acc")
    c_s = smem(C.dtype, Layout.swizzled(BLOCK_M, BLOCK_N, SwizzleMode.B128), name="c_tile")
    c_s.store(acc.to(C.dtype))
    fence_async_shared()
    tma_store(C, (off_m, off_n), c_s)
    tma_store_wait(0)


def test_single_loop_becomes_a_software_pipeline():
    m = run_passes(implicit_tile.trace(*_refs()))
    k = m.kernel
    assert _stage_users_unindexed(m) == []
    assert [(op.attrs["name"], op.results[0].type) for op in k.walk() if op.kind == "barrier_alloc"] == \
        [("ready", BarrierType(3, 1))]
    top = [op.kind for op in k.body.ops]
    loop_at = top.index("for")
    assert top[:loop_at].count("if") == 2                  # prologue: stages 0 and 1, each under `if j < trips`
    loop = k.body.ops[loop_at]
    body = [op.kind for op in loop.regions[0].ops]
    assert "tma_load" not in body                           # the loads moved into the refill branch
    assert body.index("barrier_wait") < body.index("wgmma") < body.index("wgmma_wait") < body.index("if")
    refill = loop.regions[0].ops[body.index("if")].regions[0]
    assert [op.kind for op in refill.ops].count("tma_load") == 2
    assert k.attrs["smem_bytes"] == 98328 and k.attrs["smem_reuse"] == [("c_tile", "a_ring")]
    ck = implicit_tile.compile(*_refs())
    ops = sass_instructions(ck.sass())
    assert ops["HGMMA.64x128x16.F32"] >= 4 and ops["UTMALDG.2D"] >= 2 and ck.spills == 0


def test_explicitly_indexed_kernel_passes_through_unchanged():
    m = gemm_tile_sm90.trace(*_refs())
    k = m.kernel
    for name, p in PIPELINE:
        if name == "pipeline":
            before = m.pretty()
            p(k)
            after = m.pretty()
        else:
            p(k)
    assert after == before


def test_quickstart_still_traces_and_prints():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        mod = runpy.run_path(os.path.join(ROOT, "examples", "quickstart.py"))["module"]
    text = out.getvalue()
    assert "warp_specialize" in text and "tma_load %A, %A_tile, %sync" in text and "wgmma %A_tile, %B_tile" in text
    with pytest.raises(GluonError, match="registers per thread"):
        run_passes(mod)
