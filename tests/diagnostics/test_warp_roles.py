"""Warp roles that cannot run (GL701-GL710, warp_spec's check_warp_roles and the trace of `warp_role`),
and a warp role given as a bad string or int (GL503). A wrong range is reported at its `with` line: an
overlap used to surface as a wgmma warpgroup-size error, a reversed range at the section's first role."""
import gluon.language as gl
from gluon import SM90, DType, Layout, TensorRef, WarpRole, kernel
from gluon.language import mbarrier, smem, warp_role, wgmma

from _diag import expect_error, passes

I32 = (TensorRef("A", DType.i32, shape=("N",)),)


def _fill(A):
    gl.store(A + gl.arange(0, 128), gl.arange(0, 128))


def two_roles(consumer, producer, num_warps=8, registers=(None, None), wgmma_in=None):
    @kernel(arch=SM90, num_warps=num_warps)
    def roles(A):
        with warp_role(WarpRole.CONSUMER, warp_range=consumer, registers=registers[0]):   # consumer role
            if wgmma_in == "consumer":
                a = smem(gl.float16, Layout.swizzled(128, 64), name="a", value=gl.zeros((128, 64), gl.float16))
                b = smem(gl.float16, Layout.swizzled(64, 128), name="b", value=gl.zeros((64, 128), gl.float16))
                gl.fence_async_shared()
                wgmma(a, b, gl.zeros((128, 128), gl.float32, layout=Layout.wgmma((4, 1), instr_n=128)))  # wgmma
            _fill(A)
        with warp_role(WarpRole.PRODUCER, warp_range=producer, registers=registers[1]):   # producer role
            if wgmma_in == "producer":
                a = smem(gl.float16, Layout.swizzled(64, 64), name="a2", value=gl.zeros((64, 64), gl.float16))
                b = smem(gl.float16, Layout.swizzled(64, 64), name="b2", value=gl.zeros((64, 64), gl.float16))
                gl.fence_async_shared()
                wgmma(a, b, gl.zeros((64, 64), gl.float32, layout=Layout.wgmma((4, 1), instr_n=64)))  # producer wgmma
    return roles


def test_the_usual_split_passes():
    passes(two_roles((0, 3), (4, 7)), I32)


def test_gl701_reversed_range():
    e = expect_error(two_roles((0, 3), (7, 4)), I32, "GL701", "# producer role")
    assert "did you mean warp_range=(4, 7)?" in e.message


def test_gl701_negative_first_warp():
    expect_error(two_roles((-1, 3), (4, 7)), I32, "GL701", "# consumer role")


def test_gl701_a_single_int_for_the_range():
    e = expect_error(two_roles(4, (4, 7)), I32, "GL701", "# consumer role")
    assert "warp_range=4: it must be a pair of Python ints" in e.message


def test_gl701_a_float_in_the_range():
    expect_error(two_roles((0, 3.0), (4, 7)), I32, "GL701", "# consumer role")


def test_gl702_overlapping_ranges():
    e = expect_error(two_roles((0, 3), (3, 7)), I32, "GL702", "# producer role")
    assert "warp 3 belongs to two roles: consumer warps 0..3 and producer warps 3..7" in e.message


def test_gl702_overlap_with_a_wgmma_in_the_role_is_an_overlap_not_a_warpgroup_size():
    e = expect_error(two_roles((0, 3), (2, 7), wgmma_in="producer"), I32, "GL702", "# producer role")
    assert "warpgroup" not in e.message


def test_gl703_roles_past_num_warps():
    e = expect_error(two_roles((0, 3), (4, 11)), I32, "GL703", "# consumer role")
    assert "num_warps=8" in e.message


def test_gl704_a_warp_in_no_role():
    e = expect_error(two_roles((0, 3), (5, 7)), I32, "GL704", "# consumer role")
    assert "warps [4]" in e.message


def test_gl705_default_partition_of_two_warps():
    expect_error(two_roles((0, 1), (2, 5), num_warps=6), I32, "GL705", "# consumer role")


def test_gl706_wgmma_in_a_role_of_two_warps():
    e = expect_error(two_roles((0, 3), (4, 5), num_warps=6, wgmma_in="producer"), I32, "GL706", "# producer wgmma")
    assert "whole warpgroups" in e.message


def test_gl707_registers_not_a_multiple_of_8():
    e = expect_error(two_roles((0, 3), (4, 7), registers=(None, 30)), I32, "GL707", "# producer role")
    assert "registers=30; setmaxnreg takes a multiple of 8 in 24..256" in e.message


def test_gl710_register_budgets_over_the_register_file():
    e = expect_error(two_roles((0, 7), (8, 8), num_warps=9, registers=(232, 56)), I32, "GL710", "# consumer role")
    assert "register budgets total 66560 registers" in e.message


def cluster_roles(producer_warps, producer_syncs):
    @kernel(arch=SM90, num_warps=4 + producer_warps)
    def k(A):
        gl.set_cluster(2)
        bar = mbarrier(count=1, name="bar")
        with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):                # consumer role
            gl.cluster_sync()
            bar.wait(0)
        with warp_role(WarpRole.PRODUCER, warp_range=(4, 3 + producer_warps)):   # producer role
            if producer_syncs:
                gl.cluster_sync()
            bar.arrive()
    return k


def test_gl708_a_role_that_never_reaches_cluster_sync():
    expect_error(cluster_roles(4, False), I32, "GL708", "# producer role")


def test_gl709_cluster_sync_with_padded_worker_warps():
    expect_error(cluster_roles(1, True), I32, "GL709", "# consumer role")


def role_named(role):
    @kernel(arch=SM90, num_warps=4)
    def named(A):
        with warp_role(role, warp_range=(0, 3)):                            # the role
            _fill(A)
    return named


def test_gl503_warp_role_as_a_misspelled_string():
    e = expect_error(role_named("produser"), I32, "GL503", "# the role")
    assert "did you mean 'producer'?" in e.message


def test_gl503_warp_role_as_an_int():
    expect_error(role_named(3), I32, "GL503", "# the role")
