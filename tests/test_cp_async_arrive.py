"""`cp_async_arrive` / `Barrier.arrive_after_copies`: a producer's cp.async copies counted by the mbarrier its
consumer waits on (cp.async.mbarrier.arrive). In the CPU interpreter a ring filled that way runs right in either
role order, and its faults are caught at the consumer's read: copies never handed to the barrier, or handed after
the arrive that completed the phase. Lowered to `ttng.async_copy_mbarrier_arrive` (ARRIVES.LDGSTSBAR in the
SASS); an SM80 kernel gets an ArchError at the call."""
import pytest
import torch

import gluon.language as gl
from gluon import SM80, SM90, GluonError, Layout, WarpRole, kernel
from gluon.dsl import ArchError
from gluon.interpret import tasks
from gluon.language import cp_async, mbarrier, smem, warp_role
from gluon.types import DType, TensorRef

VEC = Layout.shared(1, 1, 1, order=(0,))


@pytest.fixture(autouse=True)
def _in_order_unless_named(monkeypatch):
    monkeypatch.delenv(tasks.SCHEDULE_ENV, raising=False)


def copied_ring(v: str = "", producer_first: bool = False):
    """A producer warp copies round i's 64 floats of X into ring stage i % STAGES by cp.async and hands them to
    full[s] (`v`: "no_hand_over" never does, "late" after the arrive that completes the phase); four consumer
    warps wait on full[s], read the stage and write it to Y's row i."""

    @kernel(arch=SM90, num_warps=5)
    def copied_ring_kernel(X, Y, ROUNDS: gl.constexpr, STAGES: gl.constexpr = 2):
        ring = smem(gl.float32, VEC, shape=(64,), name="ring", stages=STAGES)
        full = mbarrier(count=1, name="full", stages=STAGES)
        empty = mbarrier(count=1, name="empty", stages=STAGES)

        def consume():
            with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
                offs = gl.arange(0, 64, layout=Layout.blocked([1], [32], [4], [0]))
                for i in range(ROUNDS):
                    s = i % STAGES
                    full[s].wait((i // STAGES) & 1)
                    got = ring[s].load(layout=Layout.blocked([1], [32], [4], [0]))     # the read
                    gl.store(Y + (i * 64 + offs), got)
                    empty[s].arrive()

        def produce():
            with warp_role(WarpRole.PRODUCER, warp_range=(4, 4)):
                r = gl.arange(0, 64, layout=Layout.blocked([1], [32], [1], [0]))
                for i in range(ROUNDS):
                    s = i % STAGES
                    empty[s].wait(((i // STAGES) & 1) ^ 1)
                    cp_async(ring[s], X + (i * 64 + r))                                # the copy
                    if v == "":
                        full[s].arrive_after_copies()
                    full[s].arrive()
                    if v == "late":
                        full[s].arrive_after_copies()

        if producer_first:
            produce()
            consume()
        else:
            consume()
            produce()

    return copied_ring_kernel


@pytest.mark.parametrize("producer_first", [False, True])
@pytest.mark.parametrize("stages", [2, 3])
def test_a_ring_filled_by_cp_async_runs_right_in_either_role_order(producer_first, stages):
    x, y = torch.randn(5 * 64), torch.full((5 * 64,), float("nan"))
    copied_ring("", producer_first).interpret((1,), x, y, ROUNDS=5, STAGES=stages)
    assert torch.equal(x, y)


@pytest.mark.parametrize("producer_first", [False, True])
def test_copies_never_handed_to_the_barrier_are_caught_at_the_read(producer_first):
    with pytest.raises(GluonError, match=r"reads stage 0 of shared region 'ring' while the cp\.async copies into it "
                                         r".* are in flight.*bar\.arrive_after_copies\(\)"):
        copied_ring("no_hand_over", producer_first).interpret((1,), torch.randn(128), torch.zeros(128), ROUNDS=2)


def test_copies_handed_over_after_the_phase_completed_are_caught_at_the_read():
    with pytest.raises(GluonError, match=r"reads stage 0 of shared region 'ring' before the cp\.async copies into "
                                         r"it .* have completed for it: the copies complete phase 1"):
        copied_ring("late", producer_first=True).interpret((1,), torch.randn(128), torch.zeros(128), ROUNDS=2)


def test_lowered_to_the_cp_async_mbarrier_arrive():
    refs = (TensorRef("X", DType.f32, shape=(320,)), TensorRef("Y", DType.f32, shape=(320,)))
    ck = copied_ring().compile(*refs, ROUNDS=5)
    assert ck.ttgir.count("ttng.async_copy_mbarrier_arrive") == 1
    assert "ARRIVES.LDGSTSBAR" in ck.sass() and "LDGSTS" in ck.sass()


def test_an_sm80_kernel_cannot_arrive_on_copies():
    @kernel(arch=SM80, num_warps=4)
    def sm80_arrive(X):
        bar = mbarrier(count=1)
        bar.arrive_after_copies()

    with pytest.raises(ArchError, match="cp_async_arrive"):
        sm80_arrive.compile(TensorRef("X", DType.f32, shape=(64,)))
