"""The CPU interpreter's warp roles, barriers and hazards (gluon/interpret/tasks.py, sync.py, hazards.py;
docs/INTERPRETER.md): warp-specialized kernels that run right (an mbarrier hand-off through global memory,
a TMA + WGMMA ring, named-barrier turns, the shipped GEMM and attention against torch), and the seeded
faults of issue 20 (a missing wait, a wrong phase, an arrive count too low, a producer that overruns the
ring, a missing fence, ...) each caught as one GluonError with its message at the right line, whichever
role the interpreter happens to run first. CPU only."""
import inspect
import math
import threading
import time

import pytest
import torch

import gluon.language as gl
from gluon import SM90, GluonError, Layout, WarpRole, kernel
from gluon.interpret import tasks
from gluon.language import (fence_async_shared, mbarrier, smem, tma_load, tma_store, tma_store_wait, warp_role, wgmma,
                            wgmma_wait)

ACC = Layout.wgmma((4, 1), instr_n=64)


@pytest.fixture(autouse=True)
def _in_order_unless_named(monkeypatch):
    """The messages asserted here are the in-order schedule's; GLUON_INTERPRET_SCHEDULE set for a whole run (to
    shake other suites) would reword them. Tests of other schedules name theirs."""
    monkeypatch.delenv(tasks.SCHEDULE_ENV, raising=False)


def line_of(fn, text: str) -> int:
    fn = getattr(fn, "fn", fn)
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


def raises_at(call, fn, text: str, *parts: str) -> GluonError:
    """`call()` raises one GluonError at the line of `fn` holding `text`, its message holding each of `parts`;
    and leaves no role thread running."""
    before = threading.active_count()
    with pytest.raises(GluonError) as e:
        call()
    err = e.value
    assert err.loc is not None and err.loc.line == line_of(fn, text), (str(err), line_of(fn, text))
    for p in parts:
        assert p in str(err), str(err)
    assert threading.active_count() == before
    return err


# ------------------------------------------------------------------------------ an mbarrier hand-off


def handoff(count: int = 1):
    @kernel(arch=SM90, num_warps=5)
    def mbar_handoff(X, Y, N: gl.constexpr, ROUNDS: gl.constexpr):
        full = mbarrier(count=count, name="full")
        empty = mbarrier(count=1, name="empty")
        offs = gl.arange(0, N)
        with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
            for i in range(ROUNDS):
                full.wait(i & 1)                                            # the consumer's wait
                gl.store(Y + i * N + offs, gl.load(X + offs) * 2.0)
                empty.arrive()
        with warp_role(WarpRole.PRODUCER, warp_range=(4, 4)):
            for i in range(ROUNDS):
                empty.wait((i & 1) ^ 1)                                     # the producer's wait
                gl.store(X + offs, gl.full((N,), 1.0, gl.float32) * i)
                full.arrive()
    return mbar_handoff


def test_an_mbarrier_hand_off_through_global_memory():
    x, y = torch.zeros(32), torch.full((4 * 32,), float("nan"))
    handoff().interpret((1,), x, y, N=32, ROUNDS=4)
    assert torch.equal(y.view(4, 32), (torch.arange(4.0) * 2)[:, None].expand(4, 32))


def test_an_arrive_count_too_low_is_a_deadlock_listing_each_roles_line():
    k = handoff(count=2)                 # one arrive per phase on a barrier counting 2
    err = raises_at(lambda: k.interpret((1,), torch.zeros(32), torch.zeros(128), N=32, ROUNDS=4), k,
                    "# the consumer's wait", "deadlock in program (0,)",
                    "mbarrier 'full' for parity 0: its phase 0 (parity 0) has 1 of 2 arrivals pending",
                    "mbarrier 'empty' for parity 0: its phase 0 (parity 0) has 1 of 1 arrivals pending")
    msg = str(err)
    for role, text in (("consumer (warps 0..3)", "# the consumer's wait"),
                       ("producer (warps 4..4)", "# the producer's wait")):
        assert f"role {role} waits at {inspect.getsourcefile(test_an_mbarrier_hand_off_through_global_memory)}:" \
               f"{line_of(k, text)}" in msg, msg
        assert text in msg                          # the source line itself


# ------------------------------------------------------------------------------ a TMA + WGMMA ring


@gl.helper
def _consume(a_s, b_s, ready, empty, C, off_m, off_n, num_k, v: str, STAGES: int):
    with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
        acc = gl.zeros((64, 64), gl.float32, layout=ACC)
        for i in range(num_k):
            s = i % STAGES
            if v == "no_wait":
                pass
            elif v == "wrong_phase":
                ready[s].wait(((i // STAGES) & 1) ^ 1)                      # the wrong phase
            else:
                ready[s].wait((i // STAGES) & 1)                            # the ready wait
            if v == "release_early":
                acc = wgmma(a_s[s], b_s[s], acc, wait=False)                # the async read
                empty[s].arrive()
                acc = wgmma_wait(acc, pendings=0)
            elif v == "arrive_twice":
                acc = wgmma(a_s[s], b_s[s], acc)
                empty[s].arrive(count=2)                                    # two arrivals on a count of 1
            else:
                acc = wgmma(a_s[s], b_s[s], acc)                            # the wgmma read
                empty[s].arrive()
        c_s = smem(C.dtype, Layout.swizzled(64, 64), name="c_tile")
        c_s.store(acc.to(C.dtype))
        if v != "no_fence":
            fence_async_shared()
        tma_store(C, (off_m, off_n), c_s)                                   # the TMA store
        tma_store_wait(0)


@gl.helper
def _produce(a_s, b_s, ready, empty, A, B, off_m, off_n, num_k, v: str, STAGES: int):
    with warp_role(WarpRole.PRODUCER, warp_range=(4, 4)):
        for i in range(num_k):
            s = i % STAGES
            if v != "overrun":
                empty[s].wait(((i // STAGES) & 1) ^ 1)                      # the empty wait
            if v == "expect_more":
                ready[s].expect(a_s.nbytes + b_s.nbytes + 128)              # more bytes than the loads bring
            else:
                ready[s].expect(a_s.nbytes + b_s.nbytes)
            tma_load(a_s[s], A, (off_m, i * 64), ready[s])                  # the A load
            tma_load(b_s[s], B, (i * 64, off_n), ready[s])


def ring(v: str = "", producer_first: bool = False):
    """A producer/consumer ring (ready / empty, phase (i // STAGES) & 1, the producer waiting on empty with
    ^ 1), broken as `v` says; the roles in the section in either order (the interpreter runs them in it)."""

    @kernel(arch=SM90, num_warps=5)
    def ws_ring(A, B, C, K, STAGES: gl.constexpr = 2):
        off_m = gl.program_id(0) * 64
        off_n = gl.program_id(1) * 64
        a_s = smem(A.dtype, Layout.swizzled(64, 64), name="a_ring", stages=STAGES)
        b_s = smem(B.dtype, Layout.swizzled(64, 64), name="b_ring", stages=STAGES)
        ready = mbarrier(count=1, name="ready", stages=STAGES)
        empty = mbarrier(count=2 if v == "empty_count_2" else 1, name="empty", stages=STAGES)
        num_k = gl.cdiv(K, 64)
        if producer_first:
            _produce(a_s, b_s, ready, empty, A, B, off_m, off_n, num_k, v, STAGES)
            _consume(a_s, b_s, ready, empty, C, off_m, off_n, num_k, v, STAGES)
        else:
            _consume(a_s, b_s, ready, empty, C, off_m, off_n, num_k, v, STAGES)
            _produce(a_s, b_s, ready, empty, A, B, off_m, off_n, num_k, v, STAGES)

    return ws_ring


def _operands(m=128, n=128, k=256):
    torch.manual_seed(0)
    return torch.randn(m, k).half(), torch.randn(k, n).half(), torch.full((m, n), float("nan")).half()


def _run_ring(v="", producer_first=False, stages=2):
    a, b, c = _operands()
    ring(v, producer_first).interpret((2, 2), a, b, c, a.shape[1], STAGES=stages)
    return a, b, c


@pytest.mark.parametrize("producer_first", [False, True])
@pytest.mark.parametrize("stages", [2, 3])
def test_the_ring_runs_right_in_either_role_order(producer_first, stages):
    a, b, c = _run_ring("", producer_first, stages)
    torch.testing.assert_close(c.float(), (a.float() @ b.float()).half().float(), rtol=1e-2, atol=1e-2)


def _fn(f):
    return f.fn if hasattr(f, "fn") else f


def test_a_missing_wait_reads_a_stage_whose_load_has_not_completed():
    # the producer runs first: its loads have landed, but the consumer never waited for them
    raises_at(lambda: _run_ring("no_wait", producer_first=True), _fn(_consume), "# the wgmma read",
              "role consumer (warps 0..3) reads stage 0 of shared region 'a_ring' before the TMA load into it",
              "has completed for it: the load completes phase 0 (parity 0) of mbarrier 'ready'[0], and it has not "
              "waited on that barrier", f"test_interpret_sync.py:{line_of(_fn(_produce), '# the A load')}")


def test_a_missing_wait_before_the_producer_ran_reads_nothing_written():
    raises_at(lambda: _run_ring("no_wait"), _fn(_consume), "# the wgmma read",
              "reads stage 0 of shared region 'a_ring' before anything was written to it")


def test_a_wrong_phase_that_returns_at_once_is_caught_at_the_read():
    # ((i // STAGES) & 1) ^ 1 on the ready ring: parity 1 on a fresh barrier returns at once
    raises_at(lambda: _run_ring("wrong_phase"), _fn(_consume), "# the wgmma read",
              "before anything was written to it",
              "its last wait, on mbarrier 'ready'[0] (",
              f"test_interpret_sync.py:{line_of(_fn(_consume), '# the wrong phase')}) "
              "with parity 1, returned at once", "(a wait with the wrong phase)")


def test_a_wrong_phase_after_the_loads_landed_is_a_deadlock():
    # the producer filled the ring and waits for a release; the consumer waits for parity 1, which the
    # first loads already completed: each role's line is listed (the error's own line: the section's first role)
    err = raises_at(lambda: _run_ring("wrong_phase", producer_first=True), _fn(_produce), "# the empty wait",
                    "deadlock", "on mbarrier 'ready'[0] for parity 1: its phase 1 (parity 1)",
                    "on mbarrier 'empty'[0] for parity 0: its phase 0")
    assert f":{line_of(_fn(_consume), '# the wrong phase')}" in str(err)


@pytest.mark.parametrize("producer_first", [False, True])
def test_an_empty_count_too_high_for_the_arrives_is_a_deadlock(producer_first):
    err = raises_at(lambda: _run_ring("empty_count_2", producer_first), _fn(_produce) if producer_first
                    else _fn(_consume), "# the empty wait" if producer_first else "# the ready wait", "deadlock",
                    "mbarrier 'empty'[0] for parity 0: its phase 0 (parity 0) has 1 of 2 arrivals pending")
    for fn, text in ((_consume, "# the ready wait"), (_produce, "# the empty wait")):
        assert f"test_interpret_sync.py:{line_of(_fn(fn), text)}" in str(err)


@pytest.mark.parametrize("producer_first", [False, True])
def test_a_producer_that_overruns_the_ring(producer_first):
    raises_at(lambda: _run_ring("overrun", producer_first), _fn(_produce), "# the A load",
              "role producer (warps 4..4) overwrites stage 0 of shared region 'a_ring' while it is still in use: "
              "the TMA load into it at",
              "completing phase 0 of mbarrier 'ready'[0], has not been consumed and released",
              "a producer running ahead of its ring")


def test_a_stage_released_before_its_async_wgmma_is_waited_for():
    raises_at(lambda: _run_ring("release_early"), _fn(_produce), "# the A load",
              "role producer (warps 4..4) overwrites stage 0 of shared region 'a_ring' while it is still in use: role "
              "consumer (warps 0..3) read it", f"test_interpret_sync.py:{line_of(_fn(_consume), '# the async read')}",
              "and that read is not ordered before this write", "(an async read ends at the reader's wgmma_wait")


def test_a_missing_fence_before_the_tma_store():
    raises_at(lambda: _run_ring("no_fence"), _fn(_consume), "# the TMA store",
              "an async-proxy read (TMA store or WGMMA) of shared region 'c_tile' by role consumer (warps 0..3), last "
              "written from registers (", f"test_interpret_sync.py:{line_of(_fn(_consume), 'c_s.store(')}) with no "
              "fence_async_shared() by the writer", "call fence_async_shared() after the store")


def test_expecting_more_bytes_than_the_loads_bring_is_a_deadlock_with_the_bytes_outstanding():
    err = raises_at(lambda: _run_ring("expect_more"), _fn(_consume), "# the ready wait", "deadlock",
                    "on mbarrier 'ready'[0] for parity 0: its phase 0 (parity 0) has 0 of 1 arrivals pending and 128 "
                    "tx bytes outstanding")
    assert f":{line_of(_fn(_produce), '# the empty wait')}" in str(err)


def test_more_arrivals_than_a_phase_has_pending():
    raises_at(lambda: _run_ring("arrive_twice"), _fn(_consume), "# two arrivals on a count of 1",
              "2 arrivals on mbarrier 'empty'[0], whose phase 0 has only 1 of 1 pending",
              "more arrivals than the barrier's count per phase")


@kernel(arch=SM90, num_warps=4)
def _predicated(X, Y, FLAG):
    bar = mbarrier(count=1, name="bar")
    offs = gl.arange(0, 64)
    bar.arrive()                                            # phase 0 completes
    bar.expect(1024, pred=FLAG > 0)                         # skipped when FLAG is 0
    bar.wait(0)
    gl.store(Y + offs, gl.load(X + offs))
    bar.wait(1)                                             # phase 1 waits for the expect's bytes


def test_a_predicated_expect_is_skipped_and_a_single_task_deadlock_is_reported_at_once():
    x, y = torch.randn(64), torch.zeros(64)
    raises_at(lambda: _predicated.interpret((1,), x, y, 0), _predicated, "# phase 1 waits",
              "deadlock in program (0,): the program waits at", "and no warp role is running that could complete it",
              "mbarrier 'bar' for parity 1: its phase 1 (parity 1) has 1 of 1 arrivals pending")
    assert torch.equal(y, x)
    with pytest.raises(GluonError, match="0 of 1 arrivals pending and 1024 tx bytes outstanding"):
        _predicated.interpret((1,), x, y, 1)


# ------------------------------------------------------------------------------ shared memory across roles


def st_shared(v: str):
    @kernel(arch=SM90, num_warps=8)
    def shared_handoff(X, Y):
        t = smem(gl.float32, Layout.swizzled(32, 32), name="tile")
        done = mbarrier(count=1, name="done")
        offs = gl.arange(0, 32)[:, None] * 32 + gl.arange(0, 32)[None, :]
        with warp_role(WarpRole.PRODUCER, warp_range=(4, 7)):
            t.store(gl.load(X + offs))
            if v != "no_arrive":
                done.arrive()
            if v == "fence_elsewhere":
                fence_async_shared()
        with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
            if v != "no_arrive":
                done.wait(0)
            if v == "fence_elsewhere":
                tma_store(Y, (0, 0), t)                                     # fenced in the other role
                tma_store_wait(0)
            else:
                gl.store(Y + offs, t.load() + 1.0)                          # the consumer's read
    return shared_handoff


def test_a_register_hand_off_through_shared_memory():
    x, y = torch.randn(32 * 32), torch.zeros(32 * 32)
    st_shared("").interpret((1,), x, y)
    assert torch.equal(y, x + 1.0)


def test_a_shared_read_with_nothing_ordering_it_after_the_other_roles_store():
    k = st_shared("no_arrive")
    raises_at(lambda: k.interpret((1,), torch.randn(1024), torch.zeros(1024)), k, "# the consumer's read",
              "role consumer (warps 0..3) reads shared region 'tile', which role producer (warps 4..7) wrote",
              "with nothing ordering that write before this read")


def test_a_fence_in_another_role_does_not_count():
    k = st_shared("fence_elsewhere")
    raises_at(lambda: k.interpret((1,), torch.randn(32, 32), torch.zeros(32, 32)), k, "# fenced in the other role",
              "last written from registers by role producer (warps 4..7)", "no fence_async_shared() by the writer")


@kernel(arch=SM90, num_warps=4)
def _uninit(Y):
    t = smem(gl.float32, Layout.swizzled(32, 32), name="scratch", stages=2)
    offs = gl.arange(0, 32)[:, None] * 32 + gl.arange(0, 32)[None, :]
    t[0].store(gl.full((32, 32), 1.0, gl.float32))
    gl.store(Y + offs, t[1].load())                                         # stage 1 was never written


def test_reading_uninitialized_shared_memory_without_roles():
    raises_at(lambda: _uninit.interpret((1,), torch.zeros(1024)), _uninit, "# stage 1 was never written",
              "the program reads stage 1 of shared region 'scratch' before anything was written to it")


# ------------------------------------------------------------------------------ named barriers


def turns(v: str = ""):
    @kernel(arch=SM90, num_warps=8)
    def named_turns(X, LOG, N: gl.constexpr):
        with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
            for i in range(N):
                gl.named_barrier_sync(8, 256)                               # warpgroup 0's turn
                x = gl.load(X)
                gl.store(LOG + 2 * i, x)
                gl.store(X, x + 1)
                gl.named_barrier_arrive(9, 256)
            gl.named_barrier_sync(8, 256)                                   # warpgroup 1's last arrive
        with warp_role(WarpRole.CONSUMER, warp_range=(4, 7)):
            if v != "no_first_turn":
                gl.named_barrier_arrive(8, 256)                             # warpgroup 0 goes first
            if v == "open_twice":
                gl.named_barrier_arrive(8, 256)                             # opened again
            for i in range(N):
                gl.named_barrier_sync(9, 256)                               # warpgroup 1's turn
                x = gl.load(X)
                gl.store(LOG + 2 * i + 1, x)
                gl.store(X, x + 1)
                gl.named_barrier_arrive(8, 256)
    return named_turns


def test_named_barrier_turns_alternate_the_roles():
    x, log = torch.zeros(1, dtype=torch.int32), torch.full((8,), -1, dtype=torch.int32)
    turns().interpret((1,), x, log, N=4)
    assert log.tolist() == list(range(8)) and int(x) == 8


def test_a_named_barrier_nobody_arrives_at_is_a_deadlock():
    k = turns("no_first_turn")
    raises_at(lambda: k.interpret((1,), torch.zeros(1, dtype=torch.int32), torch.zeros(8, dtype=torch.int32), N=4),
              k, "# warpgroup 0's turn", "deadlock",
              "named barrier 8 (bar.sync, 256 threads): 128 of 256 threads have arrived",
              "named barrier 9 (bar.sync, 256 threads): 128 of 256 threads have arrived")


def test_a_role_counted_twice_into_one_generation_is_an_error():
    """Warpgroup 1 opens the turns twice. Run first ("reverse"), its second arrive counts into the generation its
    first began: the hardware would complete it without warpgroup 0, which then waits on the next one (the
    attention kernel's turns, closed and reopened per tile, did that on the GPU)."""
    k = turns("open_twice")
    raises_at(lambda: k.interpret((1,), torch.zeros(1, dtype=torch.int32), torch.zeros(8, dtype=torch.int32), N=4,
                                  schedule="reverse"),
              k, "# opened again", "named barrier 8 (bar.arrive, 256 threads): role consumer (warps 4..7) counts into "
              "generation 0 a second time before it completed")


# ------------------------------------------------------------------------------ errors, budget, clusters


@kernel(arch=SM90, num_warps=5)
def _oob_in_a_role(X, Y):
    bar = mbarrier(count=1, name="bar")
    offs = gl.arange(0, 64)
    with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
        bar.wait(0)
        gl.store(Y + offs, gl.load(X + offs))
    with warp_role(WarpRole.PRODUCER, warp_range=(4, 4)):
        gl.store(Y + offs, gl.load(X + offs + 64))                          # past the end
        bar.arrive()


def test_an_error_in_a_role_stops_every_role_and_propagates_at_its_line():
    raises_at(lambda: _oob_in_a_role.interpret((1,), torch.zeros(64), torch.zeros(64)), _oob_in_a_role,
              "# past the end", "out-of-bounds load in program (0,)")


@kernel(arch=SM90, num_warps=5)
def _long_role(X, N):
    bar = mbarrier(count=1, name="bar")
    with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
        bar.wait(0)
    with warp_role(WarpRole.PRODUCER, warp_range=(4, 4)):
        acc = gl.zeros((16,), gl.float32)
        for i in range(N):
            acc = acc + 1.0                                                 # a long loop
        bar.arrive()
        gl.store(X + gl.arange(0, 16), acc)


def test_a_role_running_past_the_time_budget_is_stopped(monkeypatch):
    monkeypatch.setattr(tasks, "TIME_BUDGET_S", 0.3)
    t0 = time.monotonic()
    raises_at(lambda: _long_role.interpret((1,), torch.zeros(16), 10 ** 9), _long_role,
              "with warp_role(WarpRole.CONSUMER",
              "ran past the interpreter's time budget (0.3 s", "role producer (warps 4..4) was running at",
              f"test_interpret_sync.py:{line_of(_long_role, '# a long loop')}")
    assert time.monotonic() - t0 < 30


@kernel(arch=SM90, num_warps=4)
def _clustered(X):
    gl.set_cluster(2)
    gl.cluster_sync()                                                       # the cluster's barrier
    gl.store(X + gl.arange(0, 16), gl.zeros((16,), gl.float32))


def test_a_kernel_with_a_cluster_is_refused():
    raises_at(lambda: _clustered.interpret((2,), torch.zeros(16)), _clustered, "# the cluster's barrier",
              "the interpreter runs one CTA at a time", "clusters of 2")


@kernel(arch=SM90, num_warps=4)
def _too_much_shared(X):                                                    # the kernel's line
    ring = smem(gl.float16, Layout.swizzled(128, 128), name="ring", stages=8)     # 256 KiB
    ring[0].store(gl.zeros((128, 128), gl.float16))
    gl.store(X + gl.arange(0, 16), gl.zeros((16,), gl.float32))


def test_a_kernel_past_the_shared_memory_is_refused_as_compiling_refuses_it():
    """The interpreter checks the compile's shared-memory budget, so a kernel the GPU's compile refuses for it is
    refused on the CPU too, before any program runs (it ran, and wrote, before)."""
    raises_at(lambda: _too_much_shared.interpret((1,), torch.zeros(16)), _too_much_shared, "# the kernel's line",
              "needs 256.0 KiB of shared memory, more than the 227.0 KiB", "ring")


# ------------------------------------------------------------------------------ the shipped kernels


@pytest.mark.parametrize("over", [None, dict(BLOCK_M=128, BLOCK_N=128, STAGES=4),
                                  dict(BLOCK_M=128, BLOCK_N=128, CONSUMER_WGS=2, SPLIT_WGS=True, STAGES=3),
                                  dict(BLOCK_M=128, BLOCK_N=128, EPILOGUE="ring", STAGES=4),
                                  dict(EPILOGUE="coalesced", K_ZIGZAG=True, BLOCK_K=32)])
def test_the_shipped_gemm_256_cubed_interprets_right_and_fast(over):
    from gluon.kernels.gemm_sm90.geometry import grid, num_warps
    from gluon.kernels.gemm_sm90.picks import resolve_config
    from gluon.kernels.gemm_sm90.kernel import gemm_sm90
    M = N = K = 256
    cfg = resolve_config(M, N, K, 132, 2, True, over, 2)
    a, b, c = _operands(M, N, K)
    w, cnt = torch.zeros(16), torch.zeros(16, dtype=torch.int32)
    g = grid(M, N, cfg, 132, 1)
    gemm_sm90.interpret(g, a, b, c, w, cnt, w, w, 1, CFG=cfg, num_warps=num_warps(cfg))     # traces
    c.fill_(float("nan"))
    t0 = time.process_time()
    gemm_sm90.interpret(g, a, b, c, w, cnt, w, w, 1, CFG=cfg, num_warps=num_warps(cfg))
    assert time.process_time() - t0 < 2.0
    torch.testing.assert_close(c.float(), (a.float() @ b.float()).half().float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("over", [dict(BLOCK_M=128, BLOCK_N=64, STAGES=4, EPILOGUE="tma2"),
                                  dict(BLOCK_M=128, BLOCK_N=64, CONSUMER_WGS=2, SPLIT_WGS=True, EPILOGUE="tma2")])
def test_the_gemm_with_two_staging_tiles_a_role_walks_tiles_right(over):
    """EPILOGUE="tma2": one program walks all 8 tiles, staging each in the role's other tile while the previous
    tile's TMA store may still read its own (`tma_store_wait(1)`): right values, and no shared write under a store
    in flight (the interpreter's hazard check)."""
    from gluon.kernels.gemm_sm90.geometry import num_warps
    from gluon.kernels.gemm_sm90.picks import resolve_config
    from gluon.kernels.gemm_sm90.kernel import gemm_sm90
    M, N, K = 256, 256, 128
    cfg = resolve_config(M, N, K, 132, 2, True, over, 2)
    assert cfg.EPILOGUE == "tma2"
    a, b, c = _operands(M, N, K)
    w, cnt = torch.zeros(16), torch.zeros(16, dtype=torch.int32)
    gemm_sm90.interpret((1,), a, b, c, w, cnt, w, w, 1, CFG=cfg, num_warps=num_warps(cfg))
    torch.testing.assert_close(c.float(), (a.float() @ b.float()).half().float(), rtol=1e-2, atol=1e-2)


def test_two_staging_tiles_with_both_stores_left_in_flight_are_caught(monkeypatch):
    """The same walk with the wait before staging letting two stores stay in flight (`tma_store_wait(2)`): the
    staging tile is written while the store of two tiles before still reads it, which the interpreter reports."""
    import gluon.kernels.gemm_sm90.kernel as gemm_kernel
    from gluon.kernels.gemm_sm90.geometry import num_warps
    from gluon.kernels.gemm_sm90.picks import resolve_config
    real = gemm_kernel.tma_store_wait
    monkeypatch.setattr(gemm_kernel, "tma_store_wait", lambda pendings=0: real(2 if pendings == 1 else pendings))
    cfg = resolve_config(256, 256, 128, 132, 2, True, dict(BLOCK_M=128, BLOCK_N=64, STAGES=3, EPILOGUE="tma2",
                                                         GROUP_M=2), 2)
    a, b, c = _operands(256, 256, 128)
    w, cnt = torch.zeros(16), torch.zeros(16, dtype=torch.int32)
    with pytest.raises(GluonError, match="overwrites stage 0 of shared region 'c_tile' while its own async read"):
        gemm_kernel.gemm_sm90.interpret((1,), a, b, c, w, cnt, w, w, 1, CFG=cfg, num_warps=num_warps(cfg))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("over", [None, dict(PINGPONG=True, PERSISTENT=True, OVERLAP=True, BLOCK_M=128,
                                              CONSUMER_WGS=2), dict(P_SMEM=True, OVERLAP=True), dict(P_SMEM=True),
                                  dict(PINGPONG=True, OVERLAP=True, BLOCK_M=128, CONSUMER_WGS=2, PIN_SOFTMAX=True),
                                  dict(OVERLAP=True, BLOCK_N=64, PIN_SOFTMAX=True),
                                  # serial turns: the S GEMMs round robin over three warpgroups, or two
                                  dict(PINGPONG=True), dict(PINGPONG=True, PERSISTENT=True),
                                  dict(PINGPONG=True, BLOCK_M=128, CONSUMER_WGS=2, CONSUMER_REGS=240),
                                  # the overlapped turns held until S is done (its row maxima through shared memory)
                                  dict(PINGPONG=True, OVERLAP=True, BLOCK_M=128, CONSUMER_WGS=2, HOLD_TURNS=True),
                                  dict(PINGPONG=True, OVERLAP=True, BLOCK_M=128, CONSUMER_WGS=2, HOLD_TURNS=True,
                                       PERSISTENT=True),
                                  # ... over three warpgroups (P through shared memory, or 64-key blocks)
                                  dict(PINGPONG=True, OVERLAP=True, HOLD_TURNS=True, P_SMEM=True),
                                  dict(PINGPONG=True, OVERLAP=True, HOLD_TURNS=True, BLOCK_N=64),
                                  # the row sums on the tensor cores (P times a tile of ones), serial and overlapped
                                  dict(ROWSUM_MMA=True), dict(ROWSUM_MMA=True, PINGPONG=True),
                                  dict(ROWSUM_MMA=True, P_SMEM=True), dict(ROWSUM_MMA=True, BLOCK_N=64),
                                  dict(ROWSUM_MMA=True, OVERLAP=True, P_SMEM=True),
                                  dict(ROWSUM_MMA=True, PINGPONG=True, OVERLAP=True, BLOCK_M=128, CONSUMER_WGS=2,
                                       PERSISTENT=True),
                                  dict(ROWSUM_MMA=True, PINGPONG=True, OVERLAP=True, BLOCK_M=128, CONSUMER_WGS=2,
                                       HOLD_TURNS=True),
                                  # each row's max over four column quarters' chains
                                  dict(TREE_MAX=True), dict(TREE_MAX=True, BLOCK_N=64, ROWSUM_MMA=True),
                                  dict(TREE_MAX=True, OVERLAP=True, P_SMEM=True),
                                  # the overlapped loop's two GEMMs waited for together
                                  dict(OVERLAP=True, JOINT_WAIT=True),
                                  dict(OVERLAP=True, JOINT_WAIT=True, TREE_MAX=True, ROWSUM_MMA=True, PERSISTENT=True),
                                  dict(PINGPONG=True, OVERLAP=True, BLOCK_M=128, CONSUMER_WGS=2, HOLD_TURNS=True,
                                       JOINT_WAIT=True),
                                  # the serial persistent kernel with the next tile's Q in a second buffer (one CTA
                                  # walks every tile: the buffers alternate; S 100: the unmasked loop runs no step)
                                  dict(PERSISTENT=True, PREFETCH_Q=True),
                                  dict(PERSISTENT=True, PREFETCH_Q=True, PINGPONG=True, ROWSUM_MMA=True),
                                  dict(PERSISTENT=True, PREFETCH_Q=True, BLOCK_N=64, STAGES=3, P_SMEM=True),
                                  # ... or with one Q buffer handed back before the epilogue (O in its own tile)
                                  dict(PERSISTENT=True, EARLY_Q_RELEASE=True),
                                  dict(PERSISTENT=True, EARLY_Q_RELEASE=True, PINGPONG=True, ROWSUM_MMA=True),
                                  # Q read into registers once a tile (the S GEMMs' A from there)
                                  dict(Q_REGS=True), dict(Q_REGS=True, OVERLAP=True, JOINT_WAIT=True),
                                  dict(Q_REGS=True, PERSISTENT=True, EARLY_Q_RELEASE=True, PINGPONG=True)])
@pytest.mark.parametrize("S", [256, 100])
def test_the_shipped_attention_interprets_right(causal, over, S):
    """The D64 kernel's variants against torch; at S 256 and 100 the last 192-row query block's last warpgroups
    hold rows past S only (serially they compute nothing, and release every key block; with turns they still
    take one a block, as a causal warpgroup does for the blocks right of its rows)."""
    from gluon.kernels.attention_sm90.config import default_config, grid, num_warps, to_config
    from gluon.kernels.attention_sm90.host import _as_view, _empty_like_rows, _view2d
    from gluon.kernels.attention_sm90.kernel import attention_sm90
    B, H, D = 1, 2, 64
    cfg = to_config(over, default_config(D))
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D).half() for _ in range(3))
    q2, qb, _ = _as_view(q)
    k2, kb, _ = _as_view(k)
    v2, vb, _ = _as_view(v)
    o = _empty_like_rows(q, qb)
    o2 = _view2d(o)[0]
    o2.fill_(float("nan"))
    lse = torch.zeros(B * H * S)
    attention_sm90.interpret(grid(S, B * H, cfg, causal, 1 if cfg.PERSISTENT else 0), q2, k2, v2, o2, lse, S, S, H, 1,
                             1.4426950408889634 / math.sqrt(D), CFG=cfg, HEAD_DIM=D, CAUSAL=causal, Q_BSHD=qb,
                             K_BSHD=kb, V_BSHD=vb, WRITE_LSE=True, num_warps=num_warps(cfg))
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    torch.testing.assert_close(o.float(), ref, rtol=2e-3, atol=2e-3)
    # the log-sum-exp too: where Q enters without moving O (a wrong Q at one key still gives O = V)
    from gluon.kernels.attention_sm90.reference import reference
    _, ref_lse = reference(q, k, v, causal, None, with_lse=True)
    torch.testing.assert_close(lse.view(B, H, S), ref_lse, rtol=0, atol=2e-3)


@pytest.mark.parametrize("over", [dict(), dict(PINGPONG=True, PERSISTENT=True, OVERLAP=False, CONSUMER_WGS=3,
                                                BLOCK_M=192, CONSUMER_REGS=160),
                                  dict(PINGPONG=True, PERSISTENT=True, OVERLAP=False, CONSUMER_WGS=3, BLOCK_M=192,
                                       CONSUMER_REGS=160, EARLY_Q_RELEASE=True)])
@pytest.mark.parametrize("schedule", [3, 4, 5])
def test_persistent_turns_hold_under_other_schedules(over, schedule):
    """The persistent kernels whose warpgroups take turns (the D128 default; D64's serial form with and without
    EARLY_Q_RELEASE), one CTA walking 16 tiles, the roles switched at every arrive too (seeded schedules): with
    the turns closed and reopened per tile, the last warpgroup's reopening arrive reached warpgroup 0's barrier
    before warpgroup 0 took the closing one under these seeds (and hung the GPU: thirty-seventh session)."""
    from gluon.kernels.attention_sm90.config import default_config, grid, num_warps, to_config
    from gluon.kernels.attention_sm90.host import _as_view, _empty_like_rows, _view2d
    from gluon.kernels.attention_sm90.kernel import attention_sm90
    B, H, S, D = 1, 8, 200, 128 if not over else 64
    cfg = to_config(over, default_config(D))
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D).half() for _ in range(3))
    (q2, qb, _), (k2, kb, _), (v2, vb, _) = _as_view(q), _as_view(k), _as_view(v)
    o = _empty_like_rows(q, qb)
    o2 = _view2d(o)[0]
    o2.fill_(float("nan"))
    attention_sm90.interpret(grid(S, B * H, cfg, False, 1), q2, k2, v2, o2, torch.zeros(B * H * S), S, S, H, 1,
                             1.4426950408889634 / math.sqrt(D), CFG=cfg, HEAD_DIM=D, CAUSAL=False, Q_BSHD=qb,
                             K_BSHD=kb, V_BSHD=vb, WRITE_LSE=True, num_warps=num_warps(cfg), schedule=schedule)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
    torch.testing.assert_close(o.float(), ref, rtol=2e-3, atol=2e-3)


# ------------------------------------------------------------------------------ schedules


def _ring_with(schedule, v=""):
    a, b, c = _operands()
    ring(v, False).interpret((2, 2), a, b, c, a.shape[1], STAGES=2, schedule=schedule)
    return a, b, c


@pytest.mark.parametrize("schedule", ["reverse", 0, 1, 7])
def test_a_correct_ring_gives_the_same_result_under_every_schedule(schedule):
    """The roles' turns change the interleaving, not the values: the ring is bit for bit the in-order run."""
    *_, want = _ring_with("in_order")
    *_, got = _ring_with(schedule)
    assert torch.equal(got, want)


@pytest.mark.parametrize("schedule", ["reverse", 3])
@pytest.mark.parametrize("v", ["no_wait", "overrun", "release_early", "wrong_phase", "empty_count_2"])
def test_seeded_faults_are_caught_under_other_schedules(schedule, v):
    """A fault is reported whatever order the roles run in (its message may differ: a read before the load
    completed, or before anything was written, depending on who ran first)."""
    with pytest.raises(GluonError):
        _ring_with(schedule, v)


def test_the_schedule_comes_from_the_environment(monkeypatch):
    from gluon.interpret.tasks import check_schedule
    monkeypatch.setenv("GLUON_INTERPRET_SCHEDULE", "reverse")
    assert check_schedule(None) == "reverse"
    monkeypatch.setenv("GLUON_INTERPRET_SCHEDULE", "12")
    assert check_schedule(None) == 12
    monkeypatch.setenv("GLUON_INTERPRET_SCHEDULE", "sideways")
    with pytest.raises(GluonError, match="use 'in_order', 'reverse' or a seed"):
        check_schedule(None)
    monkeypatch.delenv("GLUON_INTERPRET_SCHEDULE")
    assert check_schedule(None) == "in_order"
