"""Wrong mbarrier protocols that used to compile silently (issue 20, item 1): each is one GluonError
with its code (docs/DIAGNOSTICS.md) at the user's line. The ring kernel is the hand-synchronized
producer/consumer ring of the README (ready/empty, phase (i // STAGES) & 1, the producer waiting on
empty with ^ 1), with one rule broken per test."""
import gluon.language as gl
from gluon import SM90, DType, Layout, TensorRef, WarpRole, kernel
from gluon.language import fence_async_shared, mbarrier, smem, tma_load, tma_store, tma_store_wait, warp_role, wgmma

from _diag import expect_error, gemm_refs, passes


def ring(v: str = ""):
    """The ring kernel, broken as `v` says."""

    @kernel(arch=SM90, num_warps=5)
    def ws_ring(A, B, C, K, STAGES: gl.constexpr = 3):
        off_m = gl.program_id(0) * 128
        off_n = gl.program_id(1) * 128
        a_s = smem(A.dtype, Layout.swizzled(128, 64), name="a_ring", stages=STAGES)
        b_s = smem(B.dtype, Layout.swizzled(64, 128), name="b_ring", stages=STAGES)
        ready = mbarrier(count=1, name="ready", stages=STAGES)
        if v == "empty_count_2":
            empty = mbarrier(count=2, name="empty", stages=STAGES)          # GL101 here
        elif v == "empty_count_2_arrive_3":
            empty = mbarrier(count=2, name="empty", stages=STAGES)          # GL102 here
        else:
            empty = mbarrier(count=1, name="empty", stages=STAGES)
        num_k = gl.cdiv(K, 64)
        with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
            acc = gl.zeros((128, 128), gl.float32, layout=Layout.wgmma((4, 1), instr_n=128))
            for i in range(num_k):
                s = i % STAGES
                if v == "no_ready_wait":
                    pass
                elif v == "phase_i_and_1":
                    ready[s].wait(i & 1)                                    # GL105 i & 1
                elif v == "phase_div_2":
                    ready[s].wait((i // 2) & 1)                             # GL105 div 2
                elif v == "phase_of_stage":
                    ready[s].wait(s & 1)                                    # GL105 stage
                elif v == "phase_shift":
                    ready[s].wait((i >> 1) & 1)                             # GL105 shift
                elif v == "const_phase":
                    ready[s].wait(0)                                        # GL113 here
                elif v == "read_before_wait":
                    acc = wgmma(a_s[s], b_s[s], acc)                        # GL103 early read
                    ready[s].wait((i // STAGES) & 1)
                else:
                    ready[s].wait((i // STAGES) & 1)                        # default ready wait
                if v != "read_before_wait":
                    acc = wgmma(a_s[s], b_s[s], acc)                        # the read
                if v == "empty_count_2_arrive_3":
                    empty[s].arrive(count=3)
                else:
                    empty[s].arrive()
            c_s = smem(C.dtype, Layout.swizzled(128, 128), name="c_tile")
            c_s.store(acc.to(C.dtype))
            fence_async_shared()
            tma_store(C, (off_m, off_n), c_s)
            tma_store_wait(0)
        with warp_role(WarpRole.PRODUCER, warp_range=(4, 4), registers=40):
            for i in range(num_k):
                s = i % STAGES
                if v == "producer_first_wait_0":
                    empty[s].wait((i // STAGES) & 1)                        # GL106 here
                elif v == "producer_phase_i_xor":
                    empty[s].wait((i & 1) ^ 1)                              # GL105 producer
                else:
                    empty[s].wait(((i // STAGES) & 1) ^ 1)
                if v == "arrive_not_expect":
                    ready[s].arrive()                                       # GL107 here
                elif v == "expect_then_if":
                    ready[s].expect(a_s.nbytes)                             # GL104 here
                elif v == "expect_wrong":
                    ready[s].expect(a_s.nbytes + 128)                       # GL112 here
                elif v == "no_expect":
                    pass
                else:
                    ready[s].expect(a_s.nbytes + b_s.nbytes)
                if v == "expect_then_if":
                    if i < num_k:
                        tma_load(a_s[s], A, (off_m, i * 64), ready[s])
                        tma_load(b_s[s], B, (i * 64, off_n), ready[s])
                else:
                    tma_load(a_s[s], A, (off_m, i * 64), ready[s])
                    tma_load(b_s[s], B, (i * 64, off_n), ready[s])
    return ws_ring


def test_the_correct_ring_passes():
    passes(ring(), gemm_refs())


# ------------------------------------------------------------------ GL101 / GL102: arrive counts


def test_gl101_ring_empty_count_2_with_one_arrive_per_iteration():
    k = ring("empty_count_2")
    e = expect_error(k, gemm_refs(), "GL101", "GL101 here")
    assert "made with count=2, but its arrives bring 1 arrival per iteration" in e.message
    assert "mbarrier(count=1)" in e.message


def test_gl102_ring_arrive_overshoots_the_count():
    e = expect_error(ring("empty_count_2_arrive_3"), gemm_refs(), "GL102", "GL102 here")
    assert "count=2, but its arrives bring 3 arrivals per iteration" in e.message


@kernel(arch=SM90, num_warps=4)
def one_shot_count_2(A, C):
    a_s = smem(A.dtype, Layout.swizzled(128, 64), name="a")
    bar = mbarrier(count=2, name="bar")                                     # the count
    bar.expect(a_s.nbytes)
    tma_load(a_s, A, (0, 0), bar)
    bar.wait(0)
    c = a_s.load()
    C[gl.arange(0, 128)[:, None] * 64 + gl.arange(0, 64)[None, :]] = c


def test_gl101_one_shot_barrier_whose_count_is_never_reached():
    e = expect_error(one_shot_count_2, (TensorRef("A", DType.f16, shape=("M", "K")),
                                        TensorRef("C", DType.f16, shape=("M", "K"))), "GL101", "# the count")
    assert "so the phase never completes" in e.message


@kernel(arch=SM90, num_warps=8)
def two_roles_one_count(A, K):
    bar = mbarrier(count=1, name="step", stages=2)                          # count 1, two roles
    with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
        for i in range(K):
            bar[i % 2].wait((i // 2) & 1)
    with warp_role(WarpRole.PRODUCER, warp_range=(4, 7)):
        for i in range(K):
            bar[i % 2].arrive(count=3)
    gl.store(A + gl.arange(0, 128), gl.arange(0, 128))


def test_gl102_three_arrivals_on_a_count_1_ring_waited_once_per_iteration():
    e = expect_error(two_roles_one_count, (TensorRef("A", DType.i32, shape=("N",)), DType.i32), "GL102",
                     "# count 1, two roles")
    assert "3 arrivals per iteration" in e.message


# ------------------------------------------------------------------ GL103: reads without the wait


def test_gl103_consumer_reads_a_stage_nobody_waits_for():
    e = expect_error(ring("no_ready_wait"), gemm_refs(), "GL103", "# the read")
    assert "nothing waits on the barrier they complete on ('ready')" in e.message


def test_gl103_consumer_reads_the_stage_before_waiting():
    e = expect_error(ring("read_before_wait"), gemm_refs(), "GL103", "# GL103 early read")
    assert "before its role waits on their barrier ('ready'" in e.message


@kernel(arch=SM90, num_warps=4)
def read_then_wait(A, C):
    a_s = smem(A.dtype, Layout.swizzled(128, 64), name="a")
    bar = mbarrier(count=1, name="bar")
    bar.expect(a_s.nbytes)
    tma_load(a_s, A, (0, 0), bar)
    c = a_s.load()                                                          # too early
    bar.wait(0)
    C[gl.arange(0, 128)[:, None] * 64 + gl.arange(0, 64)[None, :]] = c


def test_gl103_smem_load_before_the_wait_in_straight_line_code():
    e = expect_error(read_then_wait, (TensorRef("A", DType.f16, shape=("M", "K")),
                                      TensorRef("C", DType.f16, shape=("M", "K"))), "GL103", "# too early")
    assert "move the wait before the read" in e.message


@kernel(arch=SM90, num_warps=8)
def waits_in_the_wrong_role(A, C):
    a_s = smem(A.dtype, Layout.swizzled(128, 64), name="a")
    bar = mbarrier(count=1, name="bar")
    with warp_role(WarpRole.PRODUCER, warp_range=(4, 7)):
        bar.expect(a_s.nbytes)
        tma_load(a_s, A, (0, 0), bar)
        bar.wait(0)
    with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
        c = a_s.load()                                                      # no wait in this role
        C[gl.arange(0, 128)[:, None] * 64 + gl.arange(0, 64)[None, :]] = c


def test_gl103_the_reading_role_waits_on_nothing():
    e = expect_error(waits_in_the_wrong_role, (TensorRef("A", DType.f16, shape=("M", "K")),
                                               TensorRef("C", DType.f16, shape=("M", "K"))), "GL103",
                     "# no wait in this role")
    assert "its role waits on no barrier" in e.message


# ------------------------------------------------------------------ GL104: expect bytes in branches


def test_gl104_expect_bytes_against_loads_inside_an_if():
    e = expect_error(ring("expect_then_if"), gemm_refs(), "GL104", "# GL104 here")
    assert "announces 16384 bytes" in e.message and "0, 32768" in e.message


@kernel(arch=SM90, num_warps=4)
def expect_if_else(A, B, C, FLAG):
    a_s = smem(A.dtype, Layout.swizzled(128, 64), name="a")
    b_s = smem(B.dtype, Layout.swizzled(64, 128), name="b")
    bar = mbarrier(count=1, name="bar")
    bar.expect(a_s.nbytes + b_s.nbytes + 1024)                              # wrong bytes
    if FLAG > 0:
        tma_load(a_s, A, (0, 0), bar)
        tma_load(b_s, B, (0, 0), bar)
    else:
        tma_load(a_s, A, (0, 64), bar)
    bar.wait(0)
    acc = wgmma(a_s, b_s, gl.zeros((128, 128), gl.float32, layout=Layout.wgmma((4, 1), instr_n=128)))
    C[gl.arange(0, 128)[:, None] * 128 + gl.arange(0, 128)[None, :]] = acc.to(C.dtype)


def test_gl104_expect_bytes_against_an_if_else():
    e = expect_error(expect_if_else, gemm_refs(), "GL104", "# wrong bytes")
    assert "bring 16384, 32768 bytes depending on the branch taken" in e.message


# ------------------------------------------------------------------ GL105: ring phases


def test_gl105_phase_i_and_1_on_a_3_stage_ring():
    e = expect_error(ring("phase_i_and_1"), gemm_refs(), "GL105", "# GL105 i & 1")
    assert "of a 3-stage ring with phase i & 1" in e.message and "(i // 3) & 1" in e.message


def test_gl105_phase_divides_by_the_wrong_stage_count():
    expect_error(ring("phase_div_2"), gemm_refs(), "GL105", "# GL105 div 2")


def test_gl105_phase_of_the_stage_index():
    expect_error(ring("phase_of_stage"), gemm_refs(), "GL105", "# GL105 stage")


def test_gl105_phase_shift_by_one():
    expect_error(ring("phase_shift"), gemm_refs(), "GL105", "# GL105 shift")


def test_gl105_producer_phase_i_xor_1():
    expect_error(ring("producer_phase_i_xor"), gemm_refs(), "GL105", "# GL105 producer")


def test_gl105_power_of_two_ring_accepts_shift_and_mask():
    @kernel(arch=SM90, num_warps=8)
    def pow2(A, K):
        bar = mbarrier(count=1, name="step", stages=4)
        with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
            for i in range(K):
                bar[i & 3].wait((i >> 2) & 1)
        with warp_role(WarpRole.PRODUCER, warp_range=(4, 7)):
            for i in range(K):
                bar[i % 4].arrive()
        gl.store(A + gl.arange(0, 128), gl.arange(0, 128))
    passes(pow2, (TensorRef("A", DType.i32, shape=("N",)), DType.i32))


# ------------------------------------------------------------------ GL106: the producer's first wait


def test_gl106_producer_first_wait_on_empty_with_phase_0_deadlocks():
    e = expect_error(ring("producer_first_wait_0"), gemm_refs(), "GL106", "# GL106 here")
    assert "deadlock on the first iteration" in e.message and "((i // 3) & 1) ^ 1" in e.message


def test_gl106_not_reported_when_the_consumer_frees_every_stage_first():
    @kernel(arch=SM90, num_warps=8)
    def prearrive(A, K):
        ready = mbarrier(count=1, name="ready", stages=2)
        empty = mbarrier(count=1, name="empty", stages=2)
        with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
            empty[0].arrive()
            empty[1].arrive()
            for i in range(K):
                ready[i % 2].wait((i // 2) & 1)
                empty[i % 2].arrive()
        with warp_role(WarpRole.PRODUCER, warp_range=(4, 7)):
            for i in range(K):
                empty[i % 2].wait((i // 2) & 1)
                ready[i % 2].arrive()
        gl.store(A + gl.arange(0, 128), gl.arange(0, 128))
    passes(prearrive, (TensorRef("A", DType.i32, shape=("N",)), DType.i32))


# ------------------------------------------------------------------ GL107: arrive where expect was due


def test_gl107_plain_arrive_on_the_tma_barrier():
    e = expect_error(ring("arrive_not_expect"), gemm_refs(), "GL107", "# GL107 here")
    assert "use ready.expect(nbytes)" in e.message


@kernel(arch=SM90, num_warps=4)
def arrive_one_shot(A, C):
    a_s = smem(A.dtype, Layout.swizzled(128, 64), name="a")
    bar = mbarrier(count=1, name="bar")
    tma_load(a_s, A, (0, 0), bar)
    bar.arrive()                                                            # should be expect
    bar.wait(0)
    c = a_s.load()
    C[gl.arange(0, 128)[:, None] * 64 + gl.arange(0, 64)[None, :]] = c


def test_gl107_one_shot_arrive_after_the_load():
    expect_error(arrive_one_shot, (TensorRef("A", DType.f16, shape=("M", "K")),
                                   TensorRef("C", DType.f16, shape=("M", "K"))), "GL107", "# should be expect")


# ------------------------------------------------------------------ what the checks leave alone


def test_a_counter_barrier_waited_after_the_loop_passes():
    @kernel(arch=SM90, num_warps=8)
    def counter(A):
        done = mbarrier(count=4, name="done")
        with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
            done.wait(0)
            gl.store(A + gl.arange(0, 128), gl.arange(0, 128))
        with warp_role(WarpRole.PRODUCER, warp_range=(4, 7)):
            for i in range(4):
                done.arrive()
    passes(counter, (TensorRef("A", DType.i32, shape=("N",)),))


def test_a_read_after_the_roles_that_waited_passes():
    @kernel(arch=SM90, num_warps=8)
    def after_roles(A, C):
        a_s = smem(A.dtype, Layout.swizzled(128, 64), name="a")
        bar = mbarrier(count=1, name="bar")
        with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
            bar.wait(0)
        with warp_role(WarpRole.PRODUCER, warp_range=(4, 7)):
            bar.expect(a_s.nbytes)
            tma_load(a_s, A, (0, 0), bar)
        c = a_s.load()
        C[gl.arange(0, 128)[:, None] * 64 + gl.arange(0, 64)[None, :]] = c
    passes(after_roles, (TensorRef("A", DType.f16, shape=("M", "K")), TensorRef("C", DType.f16, shape=("M", "K"))))


def carried(v: str):
    """A persistent-style ring whose counter is carried across the tiles loop (as gemm_sm90's `cnt`)."""

    @kernel(arch=SM90, num_warps=8)
    def carried_ring(A, T, K):
        bar = mbarrier(count=1, name="step", stages=3)
        free = mbarrier(count=1, name="free", stages=3)
        with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
            cnt = gl.full((), 0, gl.int32)
            for t in range(T):
                for k in range(K):
                    if v == "wrong":
                        bar[cnt % 3].wait((cnt // 2) & 1)                       # carried, wrong
                    else:
                        bar[cnt % 3].wait((cnt // 3) & 1)
                    free[cnt % 3].arrive()
                    cnt += 1
        with warp_role(WarpRole.PRODUCER, warp_range=(4, 7)):
            cnt = gl.full((), 0, gl.int32)
            for t in range(T):
                for k in range(K):
                    free[cnt % 3].wait(((cnt // 3) & 1) ^ 1)
                    bar[cnt % 3].arrive()
                    cnt += 1
        gl.store(A + gl.arange(0, 128), gl.arange(0, 128))
    return carried_ring


def test_gl105_a_carried_ring_counter_with_the_wrong_divisor():
    e = expect_error(carried("wrong"), (TensorRef("A", DType.i32, shape=("N",)), DType.i32, DType.i32), "GL105",
                     "# carried, wrong")
    assert "(cnt // 3) & 1" in e.message


def test_a_carried_ring_counter_with_the_right_phases_passes():
    passes(carried("ok"), (TensorRef("A", DType.i32, shape=("N",)), DType.i32, DType.i32))


# ------------------------------------------------------------------ warp_spec's own checks, with their codes


def test_gl110_the_producer_never_expects():
    e = expect_error(ring("no_expect"), gemm_refs(), "GL110", "# default ready wait")
    assert "nothing arrives on it" in e.message


def test_gl112_expect_bytes_of_one_region():
    e = expect_error(ring("expect_wrong"), gemm_refs(), "GL112", "# GL112 here")
    assert "announces 16512 bytes" in e.message


def test_gl113_constant_phase_on_a_ring_in_a_loop():
    e = expect_error(ring("const_phase"), gemm_refs(), "GL113", "# GL113 here")
    assert "the phase does not alternate" in e.message


@kernel(arch=SM90, num_warps=4)
def arrive_after_wait(A):
    done = mbarrier(count=1, name="done")
    done.wait(0)                                                            # waits forever
    done.arrive()
    gl.store(A + gl.arange(0, 128), gl.arange(0, 128))


def test_gl111_the_only_arrive_comes_after_the_wait():
    expect_error(arrive_after_wait, (TensorRef("A", DType.i32, shape=("N",)),), "GL111", "# waits forever")
