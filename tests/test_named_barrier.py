"""Named barriers (`gl.named_barrier_sync` / `gl.named_barrier_arrive`: PTX `bar.sync id, n` /
`bar.arrive id, n`), on the CPU: the trace-time checks, the op kinds' traits, the TTGIR, and the sm_90
PTX of FlashAttention-3's ping-pong between two consumer warpgroups (warp roles of 4 warps each), where
each barrier instruction must sit once, unpredicated, in its role's loop, around that role's WGMMAs.
Whether the ping-pong really alternates the warpgroups needs a GPU; nothing here runs a kernel."""
import re

import pytest

import gluon
import gluon.language as gl
from gluon import SM90, DType, Layout, TensorRef, WarpRole, ir, kernel
from gluon.arch import CDNA3, SM80, SM100
from gluon.backend.lowering import RULES
from gluon.ir import GluonError
from gluon.jit import run_passes
from gluon.language import (
    PointerArg,
    fence_async_shared,
    for_range,
    mbarrier,
    smem,
    tma_load,
    warp_role,
    wgmma,
    wgmma_wait,
)

REFS = (TensorRef("A", DType.f16, shape=("M", "K")), TensorRef("B", DType.f16, shape=("K", "N")),
        TensorRef("C", DType.f16, shape=("M", "N")), DType.i32)
ACC = Layout.wgmma((4, 1), instr_n=128)


# Each consumer warpgroup's FA3 turn, every k-step: wait for its turn on its own barrier, issue its WGMMAs,
# hand the tensor cores to the other warpgroup (arrive on the other's barrier), only then wait for its MMAs.
# Each barrier counts 256 threads: the 128 that sync on it and the 128 of the other warpgroup that arrive.


@kernel(arch=SM90, num_warps=9)
def pingpong(A, B, C, K):
    a_s = smem(A.dtype, Layout.swizzled(64, 64), name="a_tile")
    b_s = smem(B.dtype, Layout.swizzled(64, 128), name="b_tile")
    ready = mbarrier(count=1, name="ready")
    num_k = gl.cdiv(K, 64)
    with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):       # warpgroup 0: goes first
        ready.wait(0)
        acc = gl.zeros((64, 128), gl.float32, layout=ACC)
        for _ in range(num_k):
            gl.named_barrier_sync(8, 256)
            acc = wgmma(a_s, b_s, acc, wait=False)
            gl.named_barrier_arrive(9, 256)
            acc = wgmma_wait(acc, pendings=0)
        C[gl.arange(0, 64)[:, None] * 128 + gl.arange(0, 128)[None, :]] = acc.to(C.dtype)
    with warp_role(WarpRole.CONSUMER, warp_range=(4, 7)):       # warpgroup 1
        ready.wait(0)
        acc = gl.zeros((64, 128), gl.float32, layout=ACC)
        gl.named_barrier_arrive(8, 256)                          # let warpgroup 0 take the first turn
        for _ in range(num_k):
            gl.named_barrier_sync(9, 256)
            acc = wgmma(a_s, b_s, acc, wait=False)
            gl.named_barrier_arrive(8, 256)
            acc = wgmma_wait(acc, pendings=0)
        C[(64 + gl.arange(0, 64)[:, None]) * 128 + gl.arange(0, 128)[None, :]] = acc.to(C.dtype)
    with warp_role(WarpRole.PRODUCER, warp_range=(8, 8), registers=40):
        ready.expect(a_s.nbytes + b_s.nbytes)
        tma_load(a_s, A, (0, 0), ready)
        tma_load(b_s, B, (0, 0), ready)


@kernel(arch=SM90, num_warps=8)
def pingpong_runtime_ids(A, B, C, K, base):
    """The same turns with the ids computed on the GPU (from the i32 argument `base`, which must be 8)."""
    a_s = smem(A.dtype, Layout.swizzled(64, 64), name="a_tile")
    b_s = smem(B.dtype, Layout.swizzled(64, 128), name="b_tile")
    a_s.store(gl.zeros((64, 64), A.dtype))           # operands of some value (reading unwritten ones is GL401)
    b_s.store(gl.zeros((64, 128), B.dtype))
    fence_async_shared()
    num_k = gl.cdiv(K, 64)
    with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
        acc = gl.zeros((64, 128), gl.float32, layout=ACC)
        for _ in range(num_k):
            gl.named_barrier_sync(base, 256)
            acc = wgmma(a_s, b_s, acc, wait=False)
            gl.named_barrier_arrive(base + 1, 256)
            acc = wgmma_wait(acc, pendings=0)
        C[gl.arange(0, 64)[:, None] * 128 + gl.arange(0, 128)[None, :]] = acc.to(C.dtype)
    with warp_role(WarpRole.CONSUMER, warp_range=(4, 7)):
        acc = gl.zeros((64, 128), gl.float32, layout=ACC)
        gl.named_barrier_arrive(base, 256)
        for _ in range(num_k):
            gl.named_barrier_sync(base + 1, 256)
            acc = wgmma(a_s, b_s, acc, wait=False)
            gl.named_barrier_arrive(base, 256)
            acc = wgmma_wait(acc, pendings=0)
        C[(64 + gl.arange(0, 64)[:, None]) * 128 + gl.arange(0, 128)[None, :]] = acc.to(C.dtype)


# ------------------------------------------------------------------------------ IR and trace-time checks


def test_the_op_kinds_are_side_effecting_and_have_one_rule_each():
    for kind in ("named_barrier_sync", "named_barrier_arrive"):
        d = ir.OPS[kind]
        assert d.family == "named_barrier" and not d.pure and not d.same_layout
        assert RULES[kind].__module__ == "gluon.backend.lowering.nvidia.ampere"
    assert not {"named_barrier_sync", "named_barrier_arrive"} & ir.kinds("pure")
    assert all(a.supports("named_barrier") for a in (SM80, SM90, SM100)) and not CDNA3.supports("named_barrier")
    assert gl.named_barrier_sync is gl.nvidia.ampere.named_barrier_sync


def test_the_ops_survive_the_passes_in_their_roles_and_loops():
    k = run_passes(pingpong.trace(*REFS)).kernel
    ws = next(op for op in k.walk() if op.kind == "warp_specialize")
    seq = [[(o.kind, o.attrs.get("barrier_id")) for o in r.walk() if o.kind.startswith(("named_barrier", "wgmma"))]
           for r in ws.regions]
    def turn(mine, other):
        return [("named_barrier_sync", mine), ("wgmma", None), ("named_barrier_arrive", other), ("wgmma_wait", None)]
    assert seq == [turn(8, 9), [("named_barrier_arrive", 8)] + turn(9, 8), []]
    assert all(o.attrs["num_threads"] == 256 for o in k.walk() if o.kind.startswith("named_barrier"))


def test_the_implicit_ring_rewrite_keeps_them_in_place():
    """The pipeline pass rebuilds a consumer loop around its ring reads (a wait before the first, the
    release after the last) and keeps every other op where it was, named barriers included."""
    @kernel(arch=SM90, num_warps=5)
    def ring(A, B, C, K):
        a_smem = smem(DType.f16, Layout.swizzled(64, 64), name="A_tile", double_buffer=True)
        b_smem = smem(DType.f16, Layout.swizzled(64, 128), name="B_tile", double_buffer=True)
        mbar = mbarrier(count=1, name="sync")
        with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
            with for_range("k", 0, K, 64):
                gl.named_barrier_sync(8, 128)
                wgmma(a_smem, b_smem, "acc")
                gl.named_barrier_arrive(9, 128)
            wgmma_wait("acc")
        with warp_role(WarpRole.PRODUCER, warp_range=(4, 4), registers=40), for_range("k", 0, K, 64) as k:
            tma_load(a_smem, A, (0, k), barrier_name=mbar)
            tma_load(b_smem, B, (k, 0), barrier_name=mbar)
    k = run_passes(ring.trace(*REFS)).kernel
    ws = next(op for op in k.walk() if op.kind == "warp_specialize")
    loop = next(op for op in ws.regions[0].ops if op.kind == "for")
    kinds = [o.kind for o in loop.regions[0].ops if o.kind in ("named_barrier_sync", "named_barrier_arrive",
                                                                "barrier_wait", "barrier_arrive", "wgmma")]
    assert kinds == ["named_barrier_sync", "barrier_wait", "wgmma", "barrier_arrive", "named_barrier_arrive"]


def _trace_one(barrier_id, num_threads=256, arch=SM90, arrive=False, num_warps=8):
    @kernel(arch=arch, num_warps=num_warps)
    def one(A):
        bid = barrier_id() if callable(barrier_id) else barrier_id
        (gl.named_barrier_arrive if arrive else gl.named_barrier_sync)(bid, num_threads)   # the call
    return one.trace(TensorRef("A", DType.f16, shape=(1, 1)))


@pytest.mark.parametrize("barrier_id", [0, 1, 2, 7, 16, -1])
def test_constant_ids_outside_8_to_15_are_refused_with_the_reason(barrier_id):
    with pytest.raises(GluonError) as e:
        _trace_one(barrier_id)
    msg = str(e.value)
    assert f"named_barrier_sync({barrier_id}, 256): barrier_id {barrier_id} is outside 8..15" in msg
    assert "Triton 3.6 itself uses named barrier 0 (__syncthreads), 1 (the whole CTA) and 2, 3, ..." in msg
    assert "test_named_barrier.py" in msg and "# the call" in msg


def test_a_traced_literal_id_is_checked_like_a_python_int():
    with pytest.raises(GluonError, match=r"barrier_id 3 is outside 8\.\.15"):
        _trace_one(lambda: gl.cast(3, gl.int32))
    op = next(o for o in _trace_one(lambda: gl.cast(12, gl.int32)).kernel.walk() if o.kind == "named_barrier_sync")
    assert op.attrs == {"barrier_id": 12, "num_threads": 256} and op.operands == []


@pytest.mark.parametrize("barrier_id, why", [
    (True, "got a bool"), ("8", "got str"), (8.0, "got float"),
])
def test_ids_that_are_not_integers_are_refused(barrier_id, why):
    with pytest.raises(GluonError, match=rf"barrier_id must be an int in 8\.\.15 or an integer GPU scalar, {why}"):
        _trace_one(barrier_id, arrive=True)


def test_gpu_ids_must_be_integer_scalars():
    @kernel(arch=SM90, num_warps=4)
    def tile_id(A):
        gl.named_barrier_sync(gl.arange(0, 128), 128)
    with pytest.raises(GluonError, match=r"an integer GPU scalar \(one id for the whole warp\), got a \(128,\) tile"):
        tile_id.trace(TensorRef("A", DType.f16, shape=(1, 1)))

    @kernel(arch=SM90, num_warps=4)
    def float_id(A, x):
        gl.named_barrier_sync(x, 128)
    with pytest.raises(GluonError, match=r"got a f32 scalar"):
        float_id.trace(TensorRef("A", DType.f16, shape=(1, 1)), DType.f32)

    @kernel(arch=SM90, num_warps=4)
    def bool_id(A, x):
        gl.named_barrier_sync(x > 8, 128)
    with pytest.raises(GluonError, match=r"got a i1 scalar"):
        bool_id.trace(TensorRef("A", DType.f16, shape=(1, 1)), DType.i32)

    @kernel(arch=SM90, num_warps=4)
    def wide_id(A, x):
        gl.named_barrier_sync(x, 128)
    (op,) = [o for o in wide_id.trace(TensorRef("A", DType.f16, shape=(1, 1)), DType.i64).kernel.walk()
             if o.kind == "named_barrier_sync"]
    assert op.operands[0].type == ir.I32 and op.operands[0].owner.kind == "cast"      # i64 -> i32


@pytest.mark.parametrize("num_threads, why", [
    (0, "must be a positive multiple of 32 (the warp size: bar.sync and bar.arrive count whole warps), got 0"),
    (-32, "must be a positive multiple of 32"),
    (100, "must be a positive multiple of 32 (the warp size"),
    (288, ("num_threads 288 is more than the kernel's 8 warps x 32 = 256 threads, so the barrier could never "
           "complete")),
    (256.0, "num_threads must be a Python int (a compile-time thread count), got float"),
    (True, "num_threads must be a Python int"),
])
def test_bad_thread_counts_are_refused(num_threads, why):
    with pytest.raises(GluonError, match=re.escape(why)) as e:
        _trace_one(9, num_threads)
    assert "# the call" in str(e.value)


def test_an_arch_without_named_barriers_refuses_them_at_the_users_line():
    for arrive in (False, True):
        name = "named_barrier_arrive" if arrive else "named_barrier_sync"
        with pytest.raises(gl.tracing.ArchError, match=rf"{name}\(\) is not available on cdna3 .* it needs an arch "
                                                       r"with 'named_barrier'") as e:
            _trace_one(8, 256, arch=CDNA3, arrive=arrive)
        assert "# the call" in str(e.value)
    for arch in (SM80, SM100):
        _trace_one(8, 256, arch=arch)


# ------------------------------------------------------------------------------ TTGIR and PTX

_NBAR = re.compile(r"^\s*(?P<pred>@!?%\w+\s+)?bar\.(?P<op>sync|arrive) (?P<id>\d+|%r\d+), (?P<n>\d+);")


def _ptx_events(ptx: str) -> list[tuple]:
    """The named barriers, WGMMA issues and waits, labels and branches of the PTX, in order."""
    out = []
    for i, ln in enumerate(ptx.split("\n")):
        code = ln.split("//", 1)[0].strip()
        m = _NBAR.match(code)
        if m and (m.group("id").startswith("%") or int(m.group("id")) >= 8):
            assert m.group("pred") is None, f"predicated named barrier at PTX line {i + 1}: {ln}"
            out.append((f"bar.{m.group('op')}", m.group("id") if m.group("id").startswith("%") else int(m.group("id")),
                        int(m.group("n"))))
        elif code.startswith("wgmma.mma_async"):
            out.append(("mma",))
        elif code.startswith("wgmma.wait_group"):
            out.append(("wait",))
        elif re.match(r"^\$L__BB\w+:", code):
            out.append(("label", code[:-1]))
        elif re.match(r"^(@!?%\w+\s+)?bra(\.uni)?\s", code):
            out.append(("bra", code.split()[-1].rstrip(";")))
    return out


def _loop_bodies(events: list[tuple]) -> list[list[tuple]]:
    """The straight-line loop bodies: from a label to the branch back to it, with no label or branch inside."""
    bodies = []
    for i, e in enumerate(events):
        if e[0] != "label":
            continue
        for j in range(i + 1, len(events)):
            if events[j][0] == "bra" and events[j][1] == e[1]:
                bodies.append(events[i + 1:j])
            if events[j][0] in ("label", "bra"):
                break
    return bodies


def _squeeze(body: list[tuple]) -> list[tuple]:
    """A loop body with each run of WGMMA issues (one per k-slice of the tile) as one ("mma",)."""
    return [e for k, e in enumerate(body) if not (e == ("mma",) and k and body[k - 1] == ("mma",))]


def test_constant_ids_are_immediates_once_per_call_in_each_roles_loop():
    ck = pingpong.compile(*REFS)
    asm = re.findall(r'tt\.elementwise_inline_asm "(bar\.\w+ \d+, \d+); mov\.u32 \$0, 0;" \{constraints = "=r", '
                     r'packed_element = 1 : i32, pure = false\} -> i32', ck.ttgir)
    assert asm == ["bar.sync 8, 256", "bar.arrive 9, 256", "bar.arrive 8, 256", "bar.sync 9, 256", "bar.arrive 8, 256"]

    ev = _ptx_events(ck.asm["ptx"])
    bars = [e for e in ev if e[0].startswith("bar.")]
    # each call is one instruction: none hoisted out of its loop, duplicated or dropped
    assert sorted(bars) == sorted([("bar.sync", 8, 256), ("bar.arrive", 9, 256), ("bar.arrive", 8, 256),
                                   ("bar.sync", 9, 256), ("bar.arrive", 8, 256)])
    turns = [_squeeze(b) for b in _loop_bodies(ev) if any(e[0].startswith("bar.") for e in b)]
    # warpgroup 0's loop and warpgroup 1's loop: sync on its own barrier, its WGMMAs, arrive on the other's
    # barrier before waiting for its MMAs; one straight-line block each, so nothing branches around a barrier
    assert sorted(turns) == sorted([[("bar.sync", 8, 256), ("mma",), ("bar.arrive", 9, 256), ("wait",)],
                                    [("bar.sync", 9, 256), ("mma",), ("bar.arrive", 8, 256), ("wait",)]])
    # warpgroup 1's first arrive, outside its loop, before it
    first = bars.index(("bar.arrive", 8, 256))
    assert bars[first + 1] == ("bar.sync", 9, 256)
    assert ck.binary.resources["barriers"] == 10               # ptxas counts ids 0..9: Triton's and 8, 9


def test_runtime_ids_compile_to_register_operands_in_the_loops():
    ck = pingpong_runtime_ids.compile(*REFS, DType.i32)
    assert len(re.findall(r'tt\.elementwise_inline_asm "bar\.sync \$1, 256; mov\.u32 \$0, 0;" \{constraints = '
                          r'"=r,r", packed_element = 1 : i32, pure = false\} %\w+ : i32 -> i32', ck.ttgir)) == 2
    ev = _ptx_events(ck.asm["ptx"])
    bars = [e for e in ev if e[0].startswith("bar.")]
    assert [b[0] for b in bars].count("bar.sync") == 2 and [b[0] for b in bars].count("bar.arrive") == 3
    assert all(isinstance(b[1], str) and b[2] == 256 for b in bars)     # `bar.sync %rN, 256`
    loops = [b for b in _loop_bodies(ev) if any(e[0].startswith("bar.") for e in b)]
    assert len(loops) == 2
    for b in loops:
        kinds = [e[0] for e in b]
        assert kinds[0] == "bar.sync" and kinds.count("bar.sync") == kinds.count("bar.arrive") == 1
        assert kinds.index("bar.arrive") > max(i for i, k in enumerate(kinds) if k == "mma")
        assert kinds.index("bar.arrive") < kinds.index("wait")


def test_sm80_has_them_without_warp_roles():
    @gluon.jit
    def split_halves(y_ptr, XBLOCK: gl.constexpr):
        gl.named_barrier_sync(8, 128)
        y_ptr[gl.thread_id(0)] = gl.thread_id(0)
        gl.named_barrier_arrive(9, 128)
    ck = split_halves.compile(PointerArg(gl.int32), arch="sm80", block=(128,), XBLOCK=128)
    bars = [e for e in _ptx_events(ck.asm["ptx"]) if e[0].startswith("bar.")]
    assert bars == [("bar.sync", 8, 128), ("bar.arrive", 9, 128)] and ".target sm_80" in ck.asm["ptx"]
