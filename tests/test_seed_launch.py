"""The seed's launch style (issue 19 item 2): `copy_kernel[grid, (2048,)](dst.data_ptr(), src.data_ptr(), n,
XBLOCK=2048)`. A bare int says nothing about what it points to, so it is an address only for a parameter
annotated `gl.pointer(dtype)`; without the annotation, using it as a pointer is an error that says how to
write one. Objects with `__cuda_array_interface__` or DLPack specialize like torch tensors. Everything up
to the compile runs without a GPU; the launches are gpu-marked."""
import importlib.util
import textwrap

import pytest

import gluon
import gluon.language as gl
from gluon.ir import GluonError
from gluon.language import PointerArg


@gluon.jit
def copy_ptr(dst_ptr: gl.pointer(gl.float32), src_ptr: gl.pointer(gl.float32), n_elements, XBLOCK: gl.constexpr):
    idx = gl.program_id(0) * XBLOCK + gl.thread_id(0)
    if idx < n_elements:
        dst_ptr[idx] = src_ptr[idx]


@gluon.jit
def copy_plain(dst_ptr, src_ptr, n_elements, XBLOCK: gl.constexpr):
    idx = gl.program_id(0) * XBLOCK + gl.thread_id(0)
    if idx < n_elements:
        dst_ptr[idx] = src_ptr[idx]


@gluon.jit
def copy_offsets(dst_ptr, src_ptr, n_elements, XBLOCK: gl.constexpr):
    offs = gl.program_id(0) * XBLOCK + gl.arange(0, XBLOCK)
    gl.store(dst_ptr + offs, gl.load(src_ptr + offs, mask=offs < n_elements), mask=offs < n_elements)


class FakeCudaArray:
    """Just `__cuda_array_interface__` (what numba / cupy arrays offer), on the CPU."""

    def __init__(self, ptr: int, n: int, typestr: str = "<f4"):
        self.__cuda_array_interface__ = {"data": (ptr, False), "typestr": typestr, "shape": (n,), "version": 3}


def _compiled(kernel, *args):
    return kernel[(1,), (2048,)].compiled(*args, XBLOCK=2048, arch="sm90")


def _params(ck):
    return [(p.name, str(p.value.type), p.divisibility) for p in ck.kernel.params]


def test_pointer_annotation_is_a_frozen_value():
    a = gl.pointer(gl.float32)
    assert a == gl.pointer(gl.float32) and hash(a) == hash(gl.pointer(gl.float32)) and a != gl.pointer(gl.float16)
    assert repr(a) == "gl.pointer(gl.float32)" and a.dtype is gl.float32
    assert gl.pointer("bf16").dtype is gl.bfloat16
    with pytest.raises(AttributeError):
        a.dtype = gl.float16
    with pytest.raises(TypeError, match="give the element type"):
        gl.pointer("nope")


def test_int_addresses_compile_as_pointers_with_their_alignment():
    ck = _compiled(copy_ptr, 0x7f0000001000, 0x7f0000002000, 100)
    assert _params(ck)[:2] == [("dst_ptr", "ptr<f32>", 16), ("src_ptr", "ptr<f32>", 16)]
    assert "tt.divisibility = 16" in ck.ttgir
    odd = _compiled(copy_ptr, 0x7f0000001004, 0x7f0000002000, 100)       # 4-byte aligned only
    assert odd is not ck and _params(odd)[0] == ("dst_ptr", "ptr<f32>", 1)
    assert _compiled(copy_ptr, 0x7f0000005000, 0x7f0000006000, 100) is ck  # same key: cached


def test_annotated_pointer_takes_a_tensor_of_its_dtype():
    torch = pytest.importorskip("torch")
    t = torch.zeros(8)
    assert _params(_compiled(copy_ptr, t, 0x7f0000002000, 8))[0] == ("dst_ptr", "ptr<f32>", 16)


def test_a_wrong_dtype_tensor_for_an_annotated_pointer_says_so():
    torch = pytest.importorskip("torch")
    with pytest.raises(GluonError) as e:
        _compiled(copy_ptr, torch.zeros(8, dtype=torch.float16), 0x7f0000002000, 8)
    msg = str(e.value)
    assert "argument 'dst_ptr' is a float16 tensor" in msg and "gl.pointer(gl.float32)" in msg


def test_a_float_for_an_annotated_pointer_says_what_to_pass():
    with pytest.raises(GluonError, match=r"'src_ptr' is annotated gl.pointer\(gl.float32\), but the launch passed "
                                         r"a float; pass a device address \(an int\) or a tensor"):
        _compiled(copy_ptr, 0x7f0000001000, 1.5, 8)


@pytest.mark.parametrize("kernel", [copy_plain, copy_offsets], ids=["indexed", "offset"])
def test_an_int_without_the_annotation_names_the_parameter_and_the_fix(kernel):
    with pytest.raises(GluonError) as e:
        kernel[(1,), (2048,)].compiled(0x7f0000001000, 0x7f0000002000, 100, XBLOCK=2048, arch="sm90")
    msg = str(e.value)
    assert "tile indexing" not in msg
    assert "parameter 'src_ptr' is used as a pointer, but the launch passed an int" in msg
    assert "`src_ptr: gl.pointer(gl.float32)`" in msg and "pass the tensor itself" in msg


def test_trace_takes_an_int_for_an_annotated_pointer_and_checks_a_pointer_arg():
    m = copy_ptr.trace(0x7f0000001000, PointerArg(gl.float32), gl.int32, block=(2048,), XBLOCK=2048)
    assert str(m.kernel.params[0].value.type) == "ptr<f32>"
    with pytest.raises(GluonError, match="'src_ptr' is annotated gl.pointer\\(gl.float32\\), but was given a "
                                         "pointer to float16"):
        copy_ptr.trace(0x7f0000001000, PointerArg(gl.float16), gl.int32, block=(2048,), XBLOCK=2048)


def test_a_cuda_array_interface_object_works_like_a_tensor():
    ck = _compiled(copy_plain, FakeCudaArray(0x7f0000001000, 100), FakeCudaArray(0x7f0000002000, 100), 100)
    assert _params(ck)[:2] == [("dst_ptr", "ptr<f32>", 16), ("src_ptr", "ptr<f32>", 16)]
    half = _compiled(copy_plain, FakeCudaArray(0x7f0000001002, 100, "<f2"), FakeCudaArray(0x7f0000002000, 100, "<f2"),
                     100)
    assert _params(half)[:2] == [("dst_ptr", "ptr<f16>", 1), ("src_ptr", "ptr<f16>", 16)]
    with pytest.raises(GluonError, match="is a float16 tensor"):       # and against an annotation
        _compiled(copy_ptr, FakeCudaArray(0x7f0000001000, 100, "<f2"), 0x7f0000002000, 100)


def test_raw_bytes_take_their_dtype_from_the_annotation():
    """bf16 / fp8 have no typestr of their own ('<V2', '|V1'): an annotation of that size names them."""

    @gluon.jit
    def fill_bf16(dst_ptr: gl.pointer(gl.bfloat16), n, XBLOCK: gl.constexpr):
        idx = gl.program_id(0) * XBLOCK + gl.thread_id(0)
        if idx < n:
            dst_ptr[idx] = 1.0

    ck = fill_bf16[(1,), (2048,)].compiled(FakeCudaArray(0x7f0000001000, 8, "<V2"), 8, XBLOCK=2048, arch="sm90")
    assert _params(ck)[0] == ("dst_ptr", "ptr<bf16>", 16)


def test_a_dlpack_object_works_like_a_tensor():
    np = pytest.importorskip("numpy")
    pytest.importorskip("torch")
    ck = _compiled(copy_plain, np.zeros(16, np.float32), np.zeros(16, np.float32), 16)
    assert _params(ck)[:2] == [("dst_ptr", "ptr<f32>", 16), ("src_ptr", "ptr<f32>", 16)]


def test_a_string_annotation_from_future_annotations(tmp_path):
    src = tmp_path / "future_kernel.py"
    src.write_text(textwrap.dedent('''
        from __future__ import annotations
        import gluon
        import gluon.language as gl

        @gluon.jit
        def k(dst_ptr: gl.pointer(gl.float16), n, XBLOCK: gl.constexpr):
            idx = gl.program_id(0) * XBLOCK + gl.thread_id(0)
            if idx < n:
                dst_ptr[idx] = 1.0
    '''))
    spec = importlib.util.spec_from_file_location("future_kernel", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.k.pointers == {"dst_ptr": gl.float16}
    ck = mod.k[(1,), (2048,)].compiled(0x7f0000001000, 8, XBLOCK=2048, arch="sm90")
    assert _params(ck)[0] == ("dst_ptr", "ptr<f16>", 16)


# ------------------------------------------------------------------------------ on the GPU


@pytest.mark.gpu
def test_the_seed_launch_copies_on_the_gpu():
    torch = pytest.importorskip("torch")
    n = (1 << 20) + 7
    src = torch.randn(n, device="cuda")
    dst = torch.full_like(src, float("nan"))
    grid = (gl.cdiv(n, 2048),)
    copy_ptr[grid, (2048,)](dst.data_ptr(), src.data_ptr(), n, XBLOCK=2048)
    torch.cuda.synchronize()
    assert torch.equal(dst, src)


@pytest.mark.gpu
def test_a_cuda_array_interface_object_launches_on_the_gpu():
    torch = pytest.importorskip("torch")

    class Wrapped:
        def __init__(self, t):
            self.t, self.__cuda_array_interface__ = t, t.__cuda_array_interface__

    n = 10_000
    src = torch.randn(n, device="cuda")
    dst = torch.zeros_like(src)
    copy_plain[(gl.cdiv(n, 2048),), (2048,)](Wrapped(dst), Wrapped(src), n, XBLOCK=2048)
    torch.cuda.synchronize()
    assert torch.equal(dst, src)
