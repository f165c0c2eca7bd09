"""Tests of gluon.runtime that need no GPU.

Every launch here goes through a fake backend (runtime_fakes.py: the object the Launcher calls for everything
GPU-side), so the whole Python path runs: validation, specialization, TMA descriptor planning and
caching, the flat argument list handed to triton's C launcher, grid and stream handling. Tensors
are CPU tensors; ``cuda_like`` wraps one so that it reports itself as a CUDA tensor (is_cuda,
device, get_device), which lets the "cuda" backend configuration be validated here too.
"""

from __future__ import annotations

import re
import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from gluon import runtime as rt  # noqa: E402
from gluon.abi import ABIError, KernelABI, KernelParam, ParamKind  # noqa: E402
from gluon.dtypes import DType  # noqa: E402
from gluon.runtime import (LaunchError, Launcher, TensorDescriptor, make_tensor_descriptor,  # noqa: E402
                           tma_box_shape)
from gluon.runtime import cuda as rt_cuda  # noqa: E402, F401
from gluon.runtime import descriptors as rt_desc  # noqa: E402
from runtime_fakes import (COPY_ABI, COPY_ARGS, DATA, SHARED, TMA_ABI, TMA_ARGS, DirectBackend,  # noqa: E402
                           FakeBackend, NoGPU, abi, copy_launcher, cuda_like, fake_binary, param, tma_inputs,
                           ttgir_path)


@pytest.fixture(autouse=True)
def _fresh_cache():
    rt.clear_descriptor_cache()
    yield
    rt.clear_descriptor_cache()


@pytest.fixture(scope="module")
def tma_kernel(tmp_path_factory):
    """The sample TMA+WGMMA kernel, compiled for sm_90 with its ABI (works without a GPU); the compile
    step checks the ABI's boxes against Triton's tensordesc metadata."""
    pytest.importorskip("triton")
    from gluon.backend.compile import compile_ttgir
    from gluon.cache import KernelCache
    return compile_ttgir(ttgir_path("hopper_tma_wgmma.ttgir").read_text(), ("cuda", 90, 32), abi=TMA_ABI,
                         cache=KernelCache(tmp_path_factory.mktemp("tma")))


# --------------------------------------------------------------------------------------------
# the ABI, dtypes, boxes
# --------------------------------------------------------------------------------------------

def test_kernel_param_validates():
    assert param("x", "tensordesc", "f16", block_shape=[64, 64], swizzle_bytes=128).box == (64, 64)
    assert param("x", "tensordesc", "f16", block_shape=[64, 64]).rank == 2
    with pytest.raises(ValueError, match="'tensor' is not a valid ParamKind"):
        param("x", "tensor", "f16")
    with pytest.raises(ValueError, match="unknown dtype"):
        param("x", "pointer", "f17")
    with pytest.raises(ABIError, match="swizzle_bytes must be 0, 32, 64 or 128"):
        KernelParam("x", ParamKind.TENSORDESC, DType.f16, block_shape=(64, 64), swizzle_bytes=48, box=(64, 64))
    with pytest.raises(ABIError, match="box None does not match block_shape"):
        KernelParam("x", ParamKind.TENSORDESC, DType.f16, block_shape=(64, 64))
    with pytest.raises(ABIError, match="wider than the 32-byte swizzle"):
        KernelParam("x", ParamKind.TENSORDESC, DType.f16, block_shape=(64, 32), swizzle_bytes=32, box=(64, 32))
    with pytest.raises(ABIError, match="1..256"):
        KernelParam("x", ParamKind.TENSORDESC, DType.f16, block_shape=(512, 32), box=(512, 32))
    with pytest.raises(ABIError, match="a scalar of dtype f8e4m3 cannot be passed"):
        param("x", "scalar", "f8e4m3")
    with pytest.raises(ABIError, match="dtype must be a DType"):
        KernelParam("x", ParamKind.POINTER, "f16")


def test_abi_round_trips_through_json():
    a = KernelABI("k", ("cuda", 90, 32), tuple(TMA_ARGS) + (KernelParam("BLOCK", ParamKind.CONSTEXPR, value=64),),
                  num_ctas=2, ptx_passes=("tma_prefetch",), loc="k.py:3")
    assert KernelABI.from_json(a.to_json()) == a
    assert a.launch_types == ["nvTmaDesc", "i32", "i32", "i64", "i64"] * 3 + ["i32"]
    assert [p.name for p in a.runtime_params] == ["a_desc", "b_desc", "c_desc", "K"]
    assert a.launch_index("K") == 15 and a.constexprs == {"BLOCK": 64}


def test_tma_box_shape_follows_triton_rule():
    assert tma_box_shape((128, 64), 2, 128) == (128, 64)
    assert tma_box_shape((64, 128), 2, 128) == (64, 64)     # 128-byte swizzle: 64 fp16 inner
    assert tma_box_shape((128, 128), 2, 128) == (128, 64)
    assert tma_box_shape((512, 64), 2, 128) == (256, 64)    # every dim clamped to 256
    assert tma_box_shape((64, 64), 4, 64) == (64, 16)
    assert tma_box_shape((64, 40), 2, 0) == (64, 40)        # 80 bytes: a multiple of 16
    with pytest.raises(ValueError, match="narrower"):
        tma_box_shape((64, 32), 2, 128)
    with pytest.raises(ValueError, match="multiple of 16"):
        tma_box_shape((64, 4), 2, 0)


def test_box_matches_triton_tensordesc_metadata():
    """Our box rule gives what triton's get_tensordesc_metadata() reports for the sample."""
    pytest.importorskip("triton")
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    ctx = ir.context()
    ir.load_dialects(ctx)
    CUDABackend(GPUTarget("cuda", 90, 32)).load_dialects(ctx)
    meta = ir.parse_mlir_module(str(ttgir_path("hopper_tma_wgmma.ttgir")), ctx).get_tensordesc_metadata()
    for m, spec in zip(meta, TMA_ARGS):
        assert tuple(m["block_size"]) == tma_box_shape(spec.block_shape, 2, 128)
        assert m["swizzle"] == 3 and m["elem_size"] == 2 and m["elem_type"] == 6


def test_tma_dtype_table_matches_triton():
    driver = pytest.importorskip("triton.backends.nvidia.driver")
    assert rt_desc.TMA_DTYPE_DEVICE_TO_HOST == driver.TMA_DTYPE_DEVICE_TO_HOST
    for m, p in zip([6, 6, 6], TMA_ARGS):
        assert p.dtype.tma_type == m        # f16 in Triton's device-side enum


# --------------------------------------------------------------------------------------------
# the calling convention
# --------------------------------------------------------------------------------------------

def test_tma_launch_flat_arguments(tma_kernel):
    """Each descriptor goes out as [CUtensorMap, *shape (i32), *strides (i64)]; K last."""
    be = FakeBackend()
    L = Launcher(tma_kernel, backend=be)
    A, B, C = tma_inputs()
    L((2, 2), A, B, C, 512)
    assert be.launcher_types == (["nvTmaDesc", "i32", "i32", "i64", "i64"] * 3 + ["i32"])
    (call,) = be.calls
    g0, g1, g2, stream, function, packed, launch_md, enter, exit_ = call[:9]
    assert (g0, g1, g2) == (2, 2, 1)
    assert stream == 1000 and function == 0xF00
    assert packed == (tma_kernel.num_warps, 1, tma_kernel.shared_bytes)
    assert launch_md is None and enter is None and exit_ is None
    flat = call[9:]
    assert len(flat) == 16
    boxes = []
    for i, t in enumerate((A, B, C)):
        cumap, s0, s1, st0, st1 = flat[5 * i: 5 * i + 5]
        assert cumap[0] == "CUtensorMap"
        ptr, swizzle, elem_size, elem_type, box, shape, strides, padding = cumap[1]
        assert ptr == t.data_ptr() and swizzle == 3 and elem_size == 2 and elem_type == 6
        assert shape == tuple(t.shape) and strides == t.stride() and padding == 0
        assert (s0, s1, st0, st1) == (*t.shape, *t.stride())
        boxes.append(box)
    assert boxes == [(128, 64), (64, 64), (128, 64)]
    assert flat[-1] == 512


def test_flat_arguments_match_triton_launcher_format(tma_kernel):
    """The C launcher triton 3.6 generates for our types parses exactly our flat list."""
    driver = pytest.importorskip("triton.backends.nvidia.driver")
    be = FakeBackend()
    L = Launcher(tma_kernel, backend=be)
    L((2, 2), *tma_inputs(), 512)
    src = driver.make_launcher({}, {i: t for i, t in enumerate(be.launcher_types)}, None)
    fmt = re.search(r'PyArg_ParseTuple\(args, "([^"]+)"', src).group(1)
    assert fmt.startswith(driver._BASE_ARGS_FORMAT)
    arg_fmt = fmt[len(driver._BASE_ARGS_FORMAT):]
    flat = be.calls[0][9:]
    assert len(arg_fmt) == len(flat)
    py_for = {"O": object, "i": int, "L": int, "I": int, "d": float, "b": int, "h": int}
    for f, v in zip(arg_fmt, flat):
        assert isinstance(v, py_for[f]), (f, v)
    assert arg_fmt == "OiiLL" * 3 + "i"
    # base format: grid xyz, stream, function, coop, pdl, scratch x2, packed md, launch md, hooks
    assert driver._BASE_ARGS_FORMAT == "iiiKKppOOOOOO"


def test_pointer_launch_and_warp_count_from_metadata():
    """A warp-specialized kernel launches metadata num_warps, not ttg.num-warps."""
    be = FakeBackend()
    L = copy_launcher(be, num_warps=12)
    x, y = torch.randn(100).half(), torch.empty(100).half()
    L((4,), x, y, 100)
    call = be.calls[0]
    assert call[:3] == (4, 1, 1)
    assert call[5] == (12, 1, 1024)
    assert call[9:] == (x.data_ptr(), y.data_ptr(), 100)
    assert be.launcher_types == ["*fp16", "*fp16", "i32"]
    assert be.launcher_meta.tensordesc_meta is None   # descriptors are already expanded by us


def test_warp_specialized_sample_uses_metadata_num_warps(tmp_path):
    pytest.importorskip("triton")
    from gluon.backend.compile import compile_ttgir
    from gluon.cache import KernelCache
    k = compile_ttgir(ttgir_path("hopper_ws_wgmma.ttgir").read_text(), ("cuda", 90, 32),
                      abi=abi(TMA_ARGS, "ws_wgmma_kernel"), cache=KernelCache(tmp_path))
    be = FakeBackend()
    L = Launcher(k, backend=be)
    assert L.num_warps == k.metadata["num_warps"] > 4
    L((2, 2), *tma_inputs(), 512)
    assert be.calls[0][5][0] == k.metadata["num_warps"]


def test_compiled_binary_carries_its_abi(tmp_path, monkeypatch):
    """A Binary from gluon.backend.compile keeps the ABI it was compiled with (and in its cache entry, so a
    later process that loads the entry without a lowering can launch it)."""
    pytest.importorskip("triton")
    from gluon.backend.binary import Binary
    from gluon.backend.compile import compile_ttgir
    monkeypatch.setenv("GLUON_CACHE_DIR", str(tmp_path))
    binary = compile_ttgir(ttgir_path("hopper_tma_wgmma.ttgir").read_text(), ("cuda", 90, 32), abi=TMA_ABI)
    assert binary.abi is TMA_ABI and Binary.load(binary.path).abi == TMA_ABI
    be = FakeBackend()
    L = Launcher(Binary.load(binary.path), backend=be)
    L((2, 2), *tma_inputs(), 512)
    assert be.launcher_types[0] == "nvTmaDesc"
    assert be.calls[0][5][0] == binary.num_warps
    assert [f[4] for f in be.fills] == [(128, 64), (64, 64), (128, 64)]   # the ABI's boxes
    path = DATA / "layouts_smem.ttgir" if (DATA / "layouts_smem.ttgir").exists() else SHARED / "layouts_smem.ttgir"
    if path.exists():
        ptrs = abi([param("x_ptr", "pointer", "f32", divisibility=16), param("out_ptr", "pointer", "f32", divisibility=16)],
                   "layouts_smem_kernel")
        P = Launcher(compile_ttgir(path.read_text(), ("cuda", 90, 32), abi=ptrs), backend=be)
        x = torch.randn(65 * 64)
        P((1,), x, x)
        with pytest.raises(LaunchError, match="tt.divisibility = 16"):
            P((1,), x[1:], x)


def test_an_abi_that_disagrees_with_the_binary_is_a_compile_error(tmp_path):
    """The compile step checks the ABI's TMA boxes against what Triton's TMA code assumes."""
    pytest.importorskip("triton")
    from gluon.backend.compile import CompileError, compile_ttgir
    from gluon.cache import KernelCache
    wrong = abi([param("a_desc", "tensordesc", "f16", block_shape=(128, 64), swizzle_bytes=64)] + TMA_ARGS[1:])
    with pytest.raises(CompileError, match="descriptor a_desc: the ABI says box \\(128, 32\\), 64-byte swizzle"):
        compile_ttgir(ttgir_path("hopper_tma_wgmma.ttgir").read_text(), ("cuda", 90, 32), abi=wrong,
                      cache=KernelCache(tmp_path))


def test_grid_forms():
    be = FakeBackend()
    L = copy_launcher(be)
    x, y = torch.randn(64).half(), torch.empty(64).half()
    seen = {}

    def grid(meta):
        seen.update(meta)
        return (meta["n"] // meta["BLOCK"],)

    L(grid, x, y, 64, BLOCK=16)
    assert be.calls[-1][:3] == (4, 1, 1)
    assert seen["src"] is x and seen["BLOCK"] == 16
    L(3, x, y, 64)
    assert be.calls[-1][:3] == (3, 1, 1)
    import numpy as np
    L((np.int64(2), 3), x, y, 64)
    assert be.calls[-1][:3] == (2, 3, 1)
    n = len(be.calls)
    L((0,), x, y, 64)                       # an empty grid launches nothing
    assert len(be.calls) == n
    for bad in [(1, 2, 3, 4), (-1,), (1, 70000), ("a",), ()]:
        with pytest.raises(LaunchError, match="grid"):
            L(bad, x, y, 64)


def test_stream_selection():
    be = FakeBackend()
    L = copy_launcher(be)
    x, y = torch.randn(64).half(), torch.empty(64).half()
    L((1,), x, y, 64)
    assert be.calls[-1][3] == 1000                      # current stream of the device
    L((1,), x, y, 64, stream=77)
    assert be.calls[-1][3] == 77
    L((1,), x, y, 64, stream=SimpleNamespace(cuda_stream=99))
    assert be.calls[-1][3] == 99
    with pytest.raises(LaunchError, match="stream"):
        L((1,), x, y, 64, stream="default")


def test_launch_hooks_get_metadata():
    be = FakeBackend()
    seen = []
    be.hooks = (seen.append, None)
    L = copy_launcher(be)
    L((1,), torch.randn(8).half(), torch.empty(8).half(), 8)
    md = be.calls[-1][6]
    assert md.get()["name"] == "k" and md.get()["stream"] == 1000


def test_binary_loaded_once_per_device_and_device_switch():
    be = FakeBackend(device_type="cuda", current=0)
    L = copy_launcher(be)
    x0, y0 = cuda_like(torch.randn(16).half(), 0), cuda_like(torch.empty(16).half(), 0)
    x1, y1 = cuda_like(torch.randn(16).half(), 1), cuda_like(torch.empty(16).half(), 1)
    L((1,), x0, y0, 16)
    L((1,), x0, y0, 16)
    L((1,), x1, y1, 16)
    assert [d for (_, _, d) in be.loads] == [0, 1]
    assert be.calls[-1][4] == 0xF01 and be.calls[-1][3] == 1001
    assert be.contexts == [1]             # launched under the tensors' device, not the current one


# --------------------------------------------------------------------------------------------
# validation (all before the GPU is touched)
# --------------------------------------------------------------------------------------------

def strict_copy_launcher():
    return Launcher(fake_binary(), COPY_ABI, backend=NoGPU())


def test_wrong_number_of_arguments():
    L = strict_copy_launcher()
    with pytest.raises(LaunchError, match=r"copy_kernel \(copy.py:2\) takes 3 arguments \(src, dst, n\), got 2"):
        L((1,), torch.randn(4).half(), torch.randn(4).half())


def test_cpu_tensor_error_message():
    L = strict_copy_launcher()
    with pytest.raises(LaunchError) as e:
        L((1,), torch.randn(4).half(), cuda_like(torch.randn(4).half()), 4)
    msg = str(e.value)
    assert "argument 'src'" in msg and "copy_kernel" in msg and "copy.py:3" in msg
    assert "is a CPU tensor; move it to the GPU: src.cuda()" in msg
    assert isinstance(e.value, ValueError)


def test_wrong_dtype_rank_contiguity():
    L = strict_copy_launcher()
    good = cuda_like(torch.randn(8).half())
    with pytest.raises(LaunchError, match=r"argument 'src'.*has dtype torch.float32, but the kernel needs f16"):
        L((1,), cuda_like(torch.randn(8)), good, 8)
    with pytest.raises(LaunchError, match=r"argument 'dst'.*has rank 2 \(shape \(2, 4\)\), but the kernel needs rank 1"):
        L((1,), good, cuda_like(torch.randn(2, 4).half()), 8)
    with pytest.raises(LaunchError, match=r"argument 'dst'.*not contiguous.*dst.contiguous\(\)"):
        L((1,), good, cuda_like(torch.randn(16).half())[::2], 8)
    # src does not need contiguity
    L2 = copy_launcher(FakeBackend(device_type="cuda"))
    L2((1,), cuda_like(torch.randn(16).half())[::2], good, 8)


def test_tensors_on_different_devices():
    L = strict_copy_launcher()
    with pytest.raises(LaunchError, match=r"argument 'dst'.*is on cuda:1, but an earlier argument is on cuda:0"):
        L((1,), cuda_like(torch.randn(8).half(), 0), cuda_like(torch.randn(8).half(), 1), 8)


def test_no_cuda_device_at_all():
    """With the real backend on this CPU-only machine: a clear error, not a C-level crash."""
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    L = Launcher(fake_binary(), abi(COPY_ARGS, "copy_kernel"))
    with pytest.raises(LaunchError, match="no CUDA device"):
        L((1,), cuda_like(torch.randn(8).half()), cuda_like(torch.randn(8).half()), 8)
    with pytest.raises(LaunchError, match="no CUDA device"):
        L((1,), 0x7f0000000000, 0x7f0000001000, 8)
    with pytest.raises(LaunchError, match="is a CPU tensor"):
        L((1,), torch.randn(8).half(), torch.randn(8).half(), 8)


def test_scalar_range_and_types():
    import numpy as np
    be = FakeBackend()
    args = [param("x", "scalar", "i32"), param("y", "scalar", "u32"), param("f", "scalar", "f32"),
            param("h", "scalar", "f16"), param("b", "scalar", "i1"), param("q", "scalar", "i64")]
    L = Launcher(fake_binary(), abi(args, "s"), backend=be)
    L((1,), -2**31, 2**32 - 1, 1, 2.5, True, 2**62)
    assert be.calls[-1][9:] == (-2**31, 2**32 - 1, 1.0, 2.5, 1, 2**62)
    assert be.launcher_types == ["i32", "u32", "fp32", "fp16", "i1", "i64"]
    L((1,), np.int32(7), np.uint32(9), np.float32(0.5), float("inf"), np.bool_(False), np.int64(-5))
    assert be.calls[-1][9:] == (7, 9, 0.5, float("inf"), 0, -5)
    with pytest.raises(LaunchError, match=r"argument 'x' of s is 1099511627776, outside the range of i32"):
        L((1,), 2**40, 0, 0.0, 0.0, False, 0)
    with pytest.raises(LaunchError, match=r"'y'.*is -1, outside the range of u32"):
        L((1,), 0, -1, 0.0, 0.0, False, 0)
    with pytest.raises(LaunchError, match=r"'x'.*got float 3.5, but the kernel needs an integer"):
        L((1,), 3.5, 0, 0.0, 0.0, False, 0)
    with pytest.raises(LaunchError, match=r"'f'.*needs a number"):
        L((1,), 0, 0, "1.0", 0.0, False, 0)
    with pytest.raises(LaunchError, match=r"'h'.*beyond the largest finite f16"):
        L((1,), 0, 0, 0.0, 1e6, False, 0)
    with pytest.raises(LaunchError, match=r"'b'.*needs a bool"):
        L((1,), 0, 0, 0.0, 0.0, 2, 0)
    with pytest.raises(LaunchError, match=r"'x'.*\.item\(\)"):
        L((1,), torch.tensor(3), 0, 0.0, 0.0, False, 0)


def test_tma_rules():
    be = FakeBackend()
    L = Launcher(fake_binary(),
                 abi([param("a", "tensordesc", "f16", block_shape=(64, 64), swizzle_bytes=128, source="gemm.py:7")],
                     "gemm"), backend=be)
    base = torch.randn(128, 136).half()
    L((1,), base[:, :128])          # row stride 272 bytes: a multiple of 16
    with pytest.raises(LaunchError, match=r"argument 'a' \(gemm.py:7\) of gemm has base address 0x[0-9a-f]+, not 16-byte aligned"):
        L((1,), base[:, 1:129])
    with pytest.raises(LaunchError, match=r"last stride 128.*stride 1"):
        L((1,), torch.randn(128, 128).half().t())
    with pytest.raises(LaunchError, match=r"stride 66 elements = 132 bytes in dimension 0.*multiple of 16 bytes"):
        L((1,), torch.randn(64, 66).half()[:, :64])
    with pytest.raises(LaunchError, match=r"has dtype torch.float32, but the kernel needs f16"):
        L((1,), torch.randn(64, 64))
    with pytest.raises(LaunchError, match=r"has rank 3"):
        L((1,), torch.randn(2, 64, 64).half())
    with pytest.raises(LaunchError, match=r"size 0 in dimension 0"):
        L((1,), torch.randn(0, 64).half())
    with pytest.raises(LaunchError, match="CPU tensor"):
        Launcher(fake_binary(), abi([param("a", "tensordesc", "f16", block_shape=(64, 64), swizzle_bytes=128)],
                                    "gemm"), backend=NoGPU())((1,), torch.randn(64, 64).half())


def test_launcher_refuses_what_it_cannot_launch():
    with pytest.raises(LaunchError, match=r"has no kernel ABI .*pass Launcher\(binary, abi\)"):
        Launcher(fake_binary(), backend=FakeBackend())
    with pytest.raises(LaunchError, match="CUDA binaries only"):
        Launcher(fake_binary(target=("hip", "gfx942", 64)), abi(COPY_ARGS, target=("hip", "gfx942", 64)),
                 backend=FakeBackend())
    # u32 rides on a signless i32 parameter; constexprs are not passed
    L = copy_launcher(params=COPY_ARGS[:2] + [param("n", "scalar", "u32"),
                                              KernelParam("BLOCK", ParamKind.CONSTEXPR, value=64)])
    assert L.launch_types == ["*fp16", "*fp16", "u32"] and L._nargs == 3


def test_load_time_checks():
    x, y = cuda_like(torch.randn(8).half()), cuda_like(torch.randn(8).half())
    L = copy_launcher(FakeBackend(device_type="cuda", capability=(8, 0)))
    with pytest.raises(LaunchError, match="compiled for sm_90, but device 0 is sm_80"):
        L((1,), x, y, 8)
    L = copy_launcher(FakeBackend(device_type="cuda", max_shared=1000))
    with pytest.raises(LaunchError, match="needs 1024 bytes of shared memory; device 0 allows 1000"):
        L((1,), x, y, 8)
    L = copy_launcher(FakeBackend(device_type="cuda", max_threads=256), num_warps=12)
    with pytest.raises(LaunchError, match="launches 12 warps"):
        L((1,), x, y, 8)


# --------------------------------------------------------------------------------------------
# non-torch pointers
# --------------------------------------------------------------------------------------------

class CAI:
    def __init__(self, ptr, typestr="<f2", shape=(8,), strides=None):
        self.__cuda_array_interface__ = {"data": (ptr, False), "typestr": typestr, "shape": shape,
                                         "strides": strides, "version": 3}


def test_pointer_like_objects():
    be = FakeBackend()
    L = copy_launcher(be)
    L((1,), CAI(0x1000), SimpleNamespace(data_ptr=lambda: 0x2000, dtype=torch.float16), 8)
    assert be.calls[-1][9:] == (0x1000, 0x2000, 8)
    L((1,), 0x3000, None, 8)
    assert be.calls[-1][9:] == (0x3000, 0, 8)
    with pytest.raises(LaunchError, match=r"typestr '<f4', but the kernel needs f16"):
        L((1,), CAI(0x1000, "<f4"), 0x2000, 8)
    with pytest.raises(LaunchError, match=r"'dst'.*not contiguous"):
        L((1,), 0x1000, CAI(0x1000, strides=(4,)), 8)
    with pytest.raises(LaunchError, match=r"'src'.*rank 2"):
        L((1,), CAI(0x1000, shape=(2, 4)), 0x2000, 8)
    with pytest.raises(LaunchError, match=r"'src'.*has dtype f32"):
        L((1,), SimpleNamespace(data_ptr=lambda: 0x2000, dtype=torch.float32), 0x2000, 8)
    with pytest.raises(LaunchError, match=r"'src'.*a pointer argument needs a GPU tensor"):
        L((1,), "x", 0x2000, 8)
    bf = Launcher(fake_binary(), abi([param("p", "pointer", "bf16")]), backend=be)
    bf((1,), CAI(0x1000, "<V2"))          # bf16 has no typestr: the element size is checked


# --------------------------------------------------------------------------------------------
# specialization
# --------------------------------------------------------------------------------------------

def test_binary_divisibility_is_enforced():
    """A binary compiled with tt.divisibility = 16 (the ABI's divisibility) must not get values that break
    it; a float or bool scalar never carries one."""
    be = FakeBackend()
    div = [param("src", "pointer", "f16", divisibility=16), param("dst", "pointer", "f16", divisibility=16),
           param("n", "scalar", "i32", divisibility=16)]
    L = copy_launcher(be, params=div)
    x = torch.empty(64).half()
    L((1,), x, x, 32)
    with pytest.raises(LaunchError, match=r"'src'.*not 16-byte aligned.*tt.divisibility = 16"):
        L((1,), x[1:], x, 32)
    with pytest.raises(LaunchError, match=r"'n'.*is 24, not a multiple of 16"):
        L((1,), x, x, 24)
    # without the attribute anything goes
    L2 = copy_launcher(be)
    L2((1,), x[1:], x, 24)


# --------------------------------------------------------------------------------------------
# descriptors: prebuilt objects and the cache
# --------------------------------------------------------------------------------------------

def test_descriptor_cache_and_fill_after_validation(tma_kernel):
    be = FakeBackend()
    L = Launcher(tma_kernel, backend=be)
    A, B, C = tma_inputs()
    L((2, 2), A, B, C, 512)
    L((2, 2), A, B, C, 512)
    assert len(be.fills) == 3
    info = rt.descriptor_cache_info()
    assert info["size"] == 3 and info["hits"] == 3
    L((1, 2), A[:128], B, C[:128], 512)          # new shapes -> new descriptors for A and C
    assert len(be.fills) == 5
    # an invalid later argument: nothing is filled for the earlier ones
    A2 = torch.randn(256, 512).half()
    with pytest.raises(LaunchError, match="'K'"):
        L((2, 2), A2, B, C, 2**40)
    assert len(be.fills) == 5
    # the cache is bounded
    old = rt_desc.DESC_CACHE.maxsize
    rt_desc.DESC_CACHE.maxsize = 4
    try:
        for i in range(6):
            L((1, 1), torch.randn(128 + 8 * i, 512).half(), B, C, 512)
        assert rt.descriptor_cache_info()["size"] == 4
    finally:
        rt_desc.DESC_CACHE.maxsize = old


def test_prebuilt_tensor_descriptor(tma_kernel):
    be = FakeBackend()
    L = Launcher(tma_kernel, backend=be)
    A, B, C = tma_inputs()
    da = make_tensor_descriptor(A, (128, 64), 128)
    assert isinstance(da, TensorDescriptor) and da.box == (128, 64)
    L((2, 2), da, make_tensor_descriptor(B, [64, 128], 128), C, 512)
    assert be.fills[0][0] == A.data_ptr() and be.fills[1][4] == (64, 64)
    with pytest.raises(LaunchError, match=r"'a_desc'.*block \(64, 64\) with 128-byte swizzle, but the kernel moves \(128, 64\)"):
        L((2, 2), make_tensor_descriptor(A, (64, 64), 128), B, C, 512)
    with pytest.raises(LaunchError, match="not 16-byte aligned"):
        make_tensor_descriptor(A[:, 1:], (128, 64), 128)
    with pytest.raises(LaunchError, match="narrower"):
        make_tensor_descriptor(A, (128, 32), 128)
    with pytest.raises(LaunchError, match="rank"):
        make_tensor_descriptor(A, (128,), 128)
    with pytest.raises(LaunchError, match="padding 'nan' needs a floating-point"):
        make_tensor_descriptor(torch.zeros(64, 64, dtype=torch.int32), (64, 16), 0, padding="nan")
    strict = Launcher(tma_kernel, backend=NoGPU())
    with pytest.raises(LaunchError, match="descriptor of a CPU tensor"):
        strict((2, 2), da, cuda_like(B), cuda_like(C), 512)


# --------------------------------------------------------------------------------------------
# speed
# --------------------------------------------------------------------------------------------

def _per_call_us(fn, n=2000, repeats=5):
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n * 1e6)
    return best


def test_launch_overhead_pointer_args():
    """Pure-Python pre-launch work of a 3-argument launch stays far below 200 us (typically ~3 us)."""
    L = copy_launcher(FakeBackend())
    L._backend.make_launcher = lambda types, meta: (lambda *a: None)   # no call recording
    L._c_launcher = None
    L._functions.clear()
    x, y = torch.randn(1024).half(), torch.empty(1024).half()
    us = _per_call_us(lambda: L((8,), x, y, 1024))
    assert us < 200, f"{us:.1f} us per launch"


def test_launch_overhead_tma_args(tma_kernel):
    """Cache-hit path of a TMA launch (3 descriptors + 1 scalar) is also far below 200 us."""
    be = FakeBackend()
    L = Launcher(tma_kernel, backend=be)
    be.make_launcher = lambda types, meta: (lambda *a: None)
    A, B, C = tma_inputs()
    us = _per_call_us(lambda: L((2, 2), A, B, C, 512))
    assert us < 200, f"{us:.1f} us per launch"


def test_jit_launch_with_cpu_tensor_names_argument_and_call_site():
    """Through the JIT: the kernel compiles for its arch (no GPU needed), then the launcher refuses
    the CPU tensor before touching a GPU, naming the argument, the kernel and the launch line."""
    torch = pytest.importorskip("torch")
    from gluon.kernels.gemm_tile_sm90 import gemm_tile_sm90, grid
    from gluon.runtime import LaunchError
    a = torch.randn(256, 64, dtype=torch.float16)
    with pytest.raises(LaunchError) as e:
        gemm_tile_sm90[grid(256, 256)](a, a.T.contiguous(), torch.empty(256, 256, dtype=torch.float16), 64)  # here
    msg = str(e.value)
    assert "argument 'A'" in msg and "gemm_tile_sm90" in msg and "CPU tensor" in msg and "A.cuda()" in msg
    line = next(i for i, l in enumerate(open(__file__), 1) if l.rstrip().endswith("64)  # here"))
    assert f"launched at {__file__}:{line}" in msg


# --------------------------------------------------------------------------------------------
# host cost per launch (issue 18): hooks, the direct C call, the 1-D grid
# --------------------------------------------------------------------------------------------

def test_empty_triton_hook_chains_are_no_hooks():
    """Triton 3.6's launch hooks are HookChain objects even when nothing is registered; passing them
    would make every launch build its metadata and call two empty Python chains."""
    pytest.importorskip("triton")
    from triton import knobs

    from gluon.runtime.cuda import CudaBackend
    be = CudaBackend()
    assert be.launch_hooks() == (None, None)

    def hook(metadata):
        pass
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        enter, exit_ = be.launch_hooks()
        assert enter is knobs.runtime.launch_enter_hook and exit_ is knobs.runtime.launch_exit_hook
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert be.launch_hooks() == (None, None)


def test_direct_launch_only_without_scratch():
    from gluon.runtime.cuda import CudaBackend

    def c_fn(*a):
        pass
    plain = SimpleNamespace(global_scratch_size=0, profile_scratch_size=0, launch=c_fn,
                            launch_cooperative_grid=False, launch_pdl=True)
    assert CudaBackend().direct_launch(plain) == (c_fn, False, True)
    assert CudaBackend().direct_launch(SimpleNamespace(**{**vars(plain), "global_scratch_size": 128})) is None
    assert CudaBackend().direct_launch(SimpleNamespace(**{**vars(plain), "profile_scratch_size": 64})) is None


def test_the_launcher_calls_the_c_function_with_the_scratch_slots_empty():
    be = DirectBackend()
    src, dst = torch.randn(64).half(), torch.empty(64).half()
    L = copy_launcher(backend=be)
    L((2,), src, dst, 64)
    (call,) = be.calls
    assert call[0] == "direct" and call[1:4] == (2, 1, 1) and call[4] == 1000 and call[5] == 0xF00
    assert call[6:10] == (False, False, None, None)              # cooperative, pdl, global / profile scratch
    assert call[10] == L._packed_metadata and call[11:14] == (None, None, None)   # no hooks: no metadata
    assert call[14:] == (src.data_ptr(), dst.data_ptr(), 64)


def test_a_1d_grid_out_of_range_is_still_refused():
    with pytest.raises(LaunchError, match="out of range"):
        copy_launcher()((2**31,), torch.randn(64).half(), torch.empty(64).half(), 64)


def test_row_copy_prepares_one_driver_descriptor_and_names_a_failure(monkeypatch):
    """CudaBackend.row_copy: without cuda-python's driver bindings, None (torch copies); with them (a stand-in
    module here), one CUDA_MEMCPY2D built at preparation, each call setting the two addresses and enqueueing it
    on the prepared stream; a driver error is a LaunchError naming the copy."""
    import sys
    import types

    from gluon.runtime.cuda import CudaBackend
    from gluon.runtime.errors import LaunchError
    for name in ("cuda", "cuda.bindings", "cuda.bindings.driver"):  # not installed
        monkeypatch.setitem(sys.modules, name, None)
    assert CudaBackend().row_copy(10, 2, 10, 16, 7) is None
    enqueued = []

    class Desc:
        pass
    drv = types.SimpleNamespace(CUDA_MEMCPY2D=Desc, CUmemorytype=types.SimpleNamespace(CU_MEMORYTYPE_DEVICE="dev"),
                                CUresult=types.SimpleNamespace(CUDA_SUCCESS=0))
    drv.cuMemcpy2DAsync = lambda d, s: (enqueued.append((d.srcDevice, d.dstDevice, d.srcPitch, d.dstPitch,
                                                         d.WidthInBytes, d.Height, d.srcMemoryType, s)) or
                                        (types.SimpleNamespace(name="CUDA_ERROR_INVALID_VALUE") if d.srcDevice < 0
                                         else 0,))
    pkg = types.ModuleType("cuda")
    pkg.bindings = types.ModuleType("cuda.bindings")
    pkg.bindings.driver = drv
    monkeypatch.setitem(sys.modules, "cuda", pkg)
    monkeypatch.setitem(sys.modules, "cuda.bindings", pkg.bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", drv)
    copy = CudaBackend().row_copy(500, 256, 500, 512, 7)
    copy(4096, 8192)
    copy(4608, 8192)
    assert enqueued == [(4096, 8192, 500, 512, 500, 256, "dev", 7), (4608, 8192, 500, 512, 500, 256, "dev", 7)]
    with pytest.raises(LaunchError, match="cuMemcpy2DAsync of 256 rows of 500 bytes .* CUDA_ERROR_INVALID_VALUE"):
        copy(-1, 8192)
