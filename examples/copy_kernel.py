"""Copy kernels in the two DSL forms.

* `copy_kernel`: the SIMT form. Each logical thread of the launch block copies one element; the
  compiler spreads the 2048 logical threads over the program's warps with 16-byte vectors.
* `copy_kernel_explicit`: the same copy with the register layout spelled out: each thread owns
  VEC contiguous elements (16 bytes for fp32 with VEC=4), 32 threads a warp, NUM_WARPS warps.

Run it: on a machine with a GPU it copies a tensor with both kernels and checks the result; without
one it compiles both for sm_90 and prints the vector loads found in the SASS.
"""
import gluon
import gluon.language as gl
from gluon import Layout


@gluon.jit
def copy_kernel(dst_ptr, src_ptr, n_elements, XBLOCK: gl.constexpr):
    idx = gl.program_id(0) * XBLOCK + gl.thread_id(0)
    if idx < n_elements:
        dst_ptr[idx] = src_ptr[idx]


@gluon.jit
def copy_kernel_explicit(dst_ptr, src_ptr, n_elements, XBLOCK: gl.constexpr, VEC: gl.constexpr,
                         NUM_WARPS: gl.constexpr, LOAD_CACHE: gl.constexpr = "", STORE_CACHE: gl.constexpr = ""):
    layout = Layout.blocked(size_per_thread=[VEC], threads_per_warp=[32], warps_per_cta=[NUM_WARPS])
    offs = gl.program_id(0) * XBLOCK + gl.arange(0, XBLOCK, layout=layout)
    mask = offs < n_elements
    x = gl.load(src_ptr + offs, mask=mask, cache=LOAD_CACHE)
    gl.store(dst_ptr + offs, x, mask=mask, cache=STORE_CACHE)


@gluon.jit
def copy_kernel_persistent(dst_ptr, src_ptr, n_elements, XBLOCK: gl.constexpr):
    """SIMT form with a grid-stride loop: a fixed grid (a few programs per SM) walks the tensor."""
    step = gl.num_programs(0) * XBLOCK
    for start in range(gl.program_id(0) * XBLOCK, n_elements, step):
        idx = start + gl.thread_id(0)
        if idx < n_elements:
            dst_ptr[idx] = src_ptr[idx]


def copy(dst, src, xblock: int = 1024, num_warps: int = 4, form: str = "simt", load_cache: str = "",
         store_cache: str = ""):
    """dst[:] = src[:] with one of the kernels: form = simt | explicit | persistent.

    The defaults (1024 elements, 4 warps: two 16-byte vectors per thread for fp32) measured fastest on
    the H200 (docs/PERF.md)."""
    n = src.numel()
    grid = (gl.cdiv(n, xblock),)
    if form == "explicit":
        copy_kernel_explicit[grid](dst, src, n, XBLOCK=xblock, VEC=16 // src.element_size(), NUM_WARPS=num_warps,
                                   LOAD_CACHE=load_cache, STORE_CACHE=store_cache, num_warps=num_warps)
    elif form == "persistent":
        import torch
        sms = torch.cuda.get_device_properties(src.device).multi_processor_count
        grid = (min(grid[0], sms * max(1, 64 // num_warps)),)
        copy_kernel_persistent[grid, (xblock,)](dst, src, n, XBLOCK=xblock, num_warps=num_warps)
    elif form == "simt":
        copy_kernel[grid, (xblock,)](dst, src, n, XBLOCK=xblock, num_warps=num_warps)
    else:
        raise ValueError(f"form must be simt, explicit or persistent, not {form!r}")
    return dst


def main() -> None:
    try:
        import torch
        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu:
        n = (1 << 24) + 123          # not a multiple of the block
        src = torch.randn(n, device="cuda")
        for form in ("simt", "explicit", "persistent"):
            dst = torch.full_like(src, float("nan"))
            copy(dst, src, form=form)
            torch.cuda.synchronize()
            ok = torch.equal(dst, src)
            print(f"{form:>10} copy of {n} fp32: {'exact' if ok else 'WRONG'}")
        return
    from gluon.backend.triton_compile import sass_instructions
    from gluon.dsl import PointerArg
    f32 = gl.float32
    for name, k, kw in (("simt", copy_kernel, dict(block=(4096,), XBLOCK=4096)),
                        ("explicit", copy_kernel_explicit, dict(XBLOCK=4096, VEC=4, NUM_WARPS=8)),
                        ("persistent", copy_kernel_persistent, dict(block=(4096,), XBLOCK=4096))):
        ck = k.compile(PointerArg(f32), PointerArg(f32), gl.ScalarArg(gl.int32, 16), arch="sm90", num_warps=8, **kw)
        ops = sass_instructions(ck.sass())
        vec = {op: n for op, n in ops.items() if op.startswith(("LDG", "STG"))}
        print(f"{name:>8}: registers={ck.registers} spills={ck.spills} global accesses in SASS: {vec}")


if __name__ == "__main__":
    main()
