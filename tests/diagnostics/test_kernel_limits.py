"""The kernel's own limits (issue 20, item 1): threads per block over the arch's limit (GL303, at the
kernel's def line) and register layouts whose warps or threads per warp do not match the code that
runs them (GL301 / GL302), which used to pass our passes and fail in Triton's verifier on the TTGIR."""
import gluon.language as gl
from gluon import SM90, DType, Layout, TensorRef, WarpRole, kernel
from gluon.language import warp_role

from _diag import expect_error, passes

I32 = (TensorRef("A", DType.i32, shape=("N",)),)


@kernel(arch=SM90, num_warps=40)
def too_many_warps(A):                                                      # def line
    gl.store(A + gl.arange(0, 128), gl.arange(0, 128))


def test_gl303_num_warps_40_in_the_decorator():
    e = expect_error(too_many_warps, I32, "GL303", "# def line")
    assert "num_warps=40 is 1280 threads per block, but sm90 allows at most 1024" in e.message


def test_gl303_num_warps_33_at_the_trace():
    expect_error(too_many_warps, I32, "GL303", "# def line", num_warps=33)


@kernel(arch=SM90, num_warps=36)
def roles_over_the_limit(A):                                                # roles def
    with warp_role(WarpRole.CONSUMER, warp_range=(0, 31)):
        gl.store(A + gl.arange(0, 128), gl.arange(0, 128))
    with warp_role(WarpRole.PRODUCER, warp_range=(32, 35)):
        pass


def test_gl303_warp_roles_of_36_warps():
    expect_error(roles_over_the_limit, I32, "GL303", "# roles def")


@kernel(arch="cdna3", num_warps=4)
def amd_kernel(A):                                                          # amd def
    offs = gl.arange(0, 256, layout=Layout.blocked([1], [32], [4], [0]))    # 32 lanes on cdna3
    gl.store(A + offs, offs)


def test_gl303_17_waves_on_cdna3():
    e = expect_error(amd_kernel, I32, "GL303", "# amd def", num_warps=17)
    assert "cdna3 allows at most 1024 (16 waves of 64)" in e.message


def test_gl302_32_thread_layout_on_a_64_wide_wave():
    e = expect_error(amd_kernel, I32, "GL302", "# 32 lanes on cdna3")
    assert "a warp of cdna3 has 64 threads" in e.message


@kernel(arch=SM90, num_warps=4)
def layout_of_8_warps(A):
    offs = gl.arange(0, 256, layout=Layout.blocked([1], [32], [8], [0]))    # 8 warps
    gl.store(A + offs, offs)


def test_gl301_layout_over_more_warps_than_the_kernel():
    e = expect_error(layout_of_8_warps, I32, "GL301", "# 8 warps")
    assert "spreads it over 8 warps" in e.message and "num_warps=4" in e.message


@kernel(arch=SM90, num_warps=4)
def layout_of_16_lanes(A):
    offs = gl.arange(0, 128, layout=Layout.blocked([1], [16], [4], [0]))    # 16 lanes
    gl.store(A + offs, offs)


def test_gl302_threads_per_warp_16_on_sm90():
    e = expect_error(layout_of_16_lanes, I32, "GL302", "# 16 lanes")
    assert "multiply to 16, but a warp of sm90 has 32 threads" in e.message


@kernel(arch=SM90, num_warps=8)
def role_layout(A):
    with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
        offs = gl.arange(0, 128, layout=Layout.blocked([1], [32], [8], [0]))  # the kernel's 8, not the role's 4
        gl.store(A + offs, offs)
    with warp_role(WarpRole.PRODUCER, warp_range=(4, 7)):
        pass


def test_gl301_layout_of_the_kernel_inside_a_4_warp_role():
    e = expect_error(role_layout, I32, "GL301", "# the kernel's 8, not the role's 4")
    assert "role consumer (warps 0..3) runs on 4 warps" in e.message


@kernel(arch=SM90, num_warps=4)
def wgmma_layout_of_two_warpgroups(A):
    z = gl.zeros((128, 128), gl.float32, layout=Layout.wgmma((8, 1), instr_n=128))   # two warpgroups
    gl.store(A + gl.arange(0, 128)[:, None] * 128 + gl.arange(0, 128)[None, :], z)


def test_gl301_wgmma_accumulator_layout_of_8_warps_in_a_4_warp_kernel():
    expect_error(wgmma_layout_of_two_warpgroups, (TensorRef("A", DType.f32, shape=("N",)),), "GL301",
                 "# two warpgroups")


def test_matching_layouts_pass():
    @kernel(arch=SM90, num_warps=8)
    def ok(A):
        with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
            offs = gl.arange(0, 128, layout=Layout.blocked([1], [32], [4], [0]))
            gl.store(A + offs, offs)
        with warp_role(WarpRole.PRODUCER, warp_range=(4, 7)):
            offs = gl.arange(0, 256, layout=Layout.blocked([2], [32], [4], [0]))
            gl.store(A + offs, offs)
    passes(ok, I32)


@kernel(arch=SM90, num_warps=8)
def outside_roles_on_all_warps(A):
    offs = gl.arange(0, 256, layout=Layout.blocked([1], [32], [8], [0]))  # all 8 warps, outside the roles
    gl.store(A + offs, offs)
    with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
        gl.store(A + gl.arange(0, 128), gl.arange(0, 128))
    with warp_role(WarpRole.PRODUCER, warp_range=(4, 7)):
        pass


def test_gl301_code_outside_the_roles_runs_on_the_default_roles_warps():
    e = expect_error(outside_roles_on_all_warps, I32, "GL301", "# all 8 warps, outside the roles")
    assert "code outside the warp roles of kernel outside_roles_on_all_warps runs on the default role's 4" in e.message


def test_default_layouts_outside_the_roles_get_the_default_roles_warps():
    @kernel(arch=SM90, num_warps=8)
    def outside(A):
        offs = gl.arange(0, 256)
        gl.store(A + offs, offs)
        with warp_role(WarpRole.CONSUMER, warp_range=(0, 3)):
            gl.store(A + gl.arange(0, 128), gl.arange(0, 128))
        with warp_role(WarpRole.PRODUCER, warp_range=(4, 7)):
            pass
    k = passes(outside, I32).kernel
    ar = next(op for op in k.body.ops if op.kind == "arange")
    assert ar.results[0].type.layout.warps_per_cta == (4,)


F32 = (TensorRef("A", DType.f32, shape=("N",)),)


def _rc(R, C):
    return gl.arange(0, R)[:, None] * C + gl.arange(0, C)[None, :]


@kernel(arch=SM90, num_warps=4)
def tile_of_16_lanes(A):
    z = gl.zeros((64, 64), gl.float32, layout=Layout.blocked([1, 4], [4, 4], [4, 1], [1, 0]))   # 4x4 lanes
    gl.store(A + _rc(64, 64), z)


def test_gl302_a_2d_layout_of_16_lanes():
    expect_error(tile_of_16_lanes, F32, "GL302", "# 4x4 lanes")


@kernel(arch=SM90, num_warps=4)
def tile_of_8_warps(A):
    z = gl.zeros((64, 64), gl.float32, layout=Layout.blocked([1, 4], [8, 4], [2, 4], [1, 0]))   # 2x4 warps
    gl.store(A + _rc(64, 64), z)


def test_gl301_a_2d_layout_of_8_warps_in_a_4_warp_kernel():
    expect_error(tile_of_8_warps, F32, "GL301", "# 2x4 warps")


@kernel(arch=SM90, num_warps=4)
def slice_of_8_warps(A):
    offs = gl.arange(0, 64, layout=Layout.slice(0, Layout.blocked([1, 4], [8, 4], [8, 1], [1, 0])))  # parent of 8
    gl.store(A + offs, offs.to(gl.float32))


def test_gl301_a_slice_whose_parent_has_8_warps():
    expect_error(slice_of_8_warps, F32, "GL301", "# parent of 8")
