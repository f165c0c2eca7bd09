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
         store_cache: str = "", kernel=None):
    """dst[:] = src[:] with one of the kernels: form = simt | explicit | persistent. `kernel`: that kernel
    already compiled for these settings (a `gluon.jit.CompiledKernel`, e.g. the tuner's), launched as it is.

    The defaults (1024 elements, 4 warps: two 16-byte vectors per thread for fp32) measured fastest on
    the H200 (docs/PERF.md)."""
    n = src.numel()
    grid = (gl.cdiv(n, xblock),)
    if form not in ("simt", "explicit", "persistent"):
        raise ValueError(f"form must be simt, explicit or persistent, not {form!r}")
    if form == "persistent":
        import torch
        sms = torch.cuda.get_device_properties(src.device).multi_processor_count
        grid = (min(grid[0], sms * max(1, 64 // num_warps)),)
    if kernel is not None:
        kernel(grid, dst, src, n)
    elif form == "explicit":
        copy_kernel_explicit[grid](dst, src, n, XBLOCK=xblock, VEC=16 // src.element_size(), NUM_WARPS=num_warps,
                                   LOAD_CACHE=load_cache, STORE_CACHE=store_cache, num_warps=num_warps)
    elif form == "persistent":
        copy_kernel_persistent[grid, (xblock,)](dst, src, n, XBLOCK=xblock, num_warps=num_warps)
    else:
        copy_kernel[grid, (xblock,)](dst, src, n, XBLOCK=xblock, num_warps=num_warps)
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
    from gluon.backend.machine_code import sass_instructions
    from gluon.language import PointerArg
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


# ------------------------------------------------------------------------------ tuning (`gluon tune`)

from gluon.tuning.template import H200_SMS, TuningTemplate, element_size, gluon_dtype, torch_dtype  # noqa: E402


class _CopyTuning(TuningTemplate):
    """`copy` for the tuner: XBLOCK, NUM_WARPS, FORM (simt | explicit | persistent) and, for the
    explicit form, LOAD_CACHE / STORE_CACHE. Shapes are (N,) elements."""

    name = "copy"
    dims = ("N",)
    params = ("XBLOCK", "NUM_WARPS", "FORM", "LOAD_CACHE", "STORE_CACHE")

    @staticmethod
    def _settings(config):
        return (int(config.get("XBLOCK", 1024)), int(config.get("NUM_WARPS", 4)), config.get("FORM", "simt"),
                config.get("LOAD_CACHE", ""), config.get("STORE_CACHE", ""))

    def trace(self, config, shape, dtype, arch):
        from gluon.language import PointerArg, ScalarArg
        xblock, nw, form, lc, sc = self._settings(config)
        (n,) = shape
        dt = gluon_dtype(dtype)
        # the stand-ins the launch makes (gluon.jit._stand_in), so the launch hits the disk cache
        args = (PointerArg(dt, 16), PointerArg(dt, 16),
                ScalarArg(gl.int32 if -2**31 <= n < 2**31 else gl.int64, 16 if n % 16 == 0 else 1))
        if form == "simt":
            return copy_kernel.trace(*args, arch=arch, num_warps=nw, block=(xblock,), XBLOCK=xblock)
        if form == "persistent":
            return copy_kernel_persistent.trace(*args, arch=arch, num_warps=nw, block=(xblock,), XBLOCK=xblock)
        if form == "explicit":
            return copy_kernel_explicit.trace(*args, arch=arch, num_warps=nw, XBLOCK=xblock,
                                              VEC=16 // element_size(dtype), NUM_WARPS=nw, LOAD_CACHE=lc,
                                              STORE_CACHE=sc)
        raise gluon.GluonError(f"FORM must be simt, explicit or persistent, not {form!r}")

    def legality_key(self, config_id, shape, dtype, arch):
        (n,) = shape
        return (config_id, dtype, arch, n % 16 == 0, -2**31 <= n < 2**31)

    def make_inputs(self, shape, dtype, device, seed):
        import torch
        (n,) = shape
        g = torch.Generator(device=device)
        g.manual_seed(int(seed))
        src = torch.randn(n, device=device, generator=g, dtype=torch.float32).to(torch_dtype(dtype))
        return {"src": src, "out": torch.empty_like(src), "base_out": torch.empty_like(src)}

    def run(self, inputs, config, kernel=None):
        xblock, nw, form, lc, sc = self._settings(config)
        copy(inputs["out"], inputs["src"], xblock, nw, form, lc, sc, kernel=kernel)

    def reference(self, inputs):
        return inputs["src"]                       # exact: the check widens chunks to fp64

    def shape_of(self, src, out=None):
        return (src.numel(),)

    def call_args(self, inputs):
        return (inputs["src"],)

    def call(self, config, src, out=None):
        """A copy of `src` (into `out` when given)."""
        import torch
        out = torch.empty_like(src) if out is None else out
        self.run({"src": src, "out": out}, config)
        return out

    def baseline(self, inputs):
        dst, src = inputs["base_out"], inputs["src"]
        return lambda: dst.copy_(src)

    def bytes(self, shape, dtype):
        return 2.0 * shape[0] * element_size(dtype)

    def model_s(self, config, shape, dtype, peak_flops=989e12, peak_bw=4.8e12, num_sms=H200_SMS):
        """Bandwidth roofline; the persistent form pays for its unpipelined grid-stride loop (docs/PERF.md:
        7-10%)."""
        t = self.roofline_s(shape, dtype, peak_flops, peak_bw)
        return t * (1.08 if self._settings(config)[2] == "persistent" else 1.0)


TUNING = _CopyTuning()
