"""A histogram in the DSL: counts of a 1-D tensor's values in NUM_BINS bins, as torch.bincount / torch.histc.

int32 x: bin = x (torch.bincount(x, minlength=NUM_BINS), values outside [0, NUM_BINS) ignored). fp16 /
bf16 / fp32 x: NUM_BINS equal bins over [lo, hi], bin = floor((x - lo) * NUM_BINS / (hi - lo)), x == hi in
the last bin, values outside [lo, hi] ignored (torch.histc(x, NUM_BINS, lo, hi)). The counts are int32.

Two levels, so that the global atomics stay few: a program walks its BLOCK-wide chunks of x (a grid of
at most a few programs per SM, each striding over the tensor) and counts each with `gl.histogram` (Triton's
`tt.histogram`: per-warp counts from ballots, summed in shared memory) into a register tile of bins it
carries through the loop; at the end it adds that tile into the global bins with one `gl.atomic_add` per
bin (REDG.E.ADD in the SASS), so NUM_BINS atomics a program, not one per element. `gl.histogram` takes a
power-of-two bin count: the kernel counts into HIST_BINS = the next power of two, masks off every value
outside [0, NUM_BINS) before counting (Triton does not drop them in every case) and masks the atomics of
the bins past NUM_BINS.

The loads are 16 bytes a thread: the strided loop runs over the first `n // VEC * VEC` elements (provably
a multiple of VEC, so the mask is constant over each vector) and program 0 counts the few left over.

Run it (from the repository root): `PYTHONPATH=$PWD python3 examples/histogram.py`. With a GPU it checks
against torch.bincount (exactly) and torch.histc (up to elements within rounding of a bin edge) into
poisoned bins and times against them; without one it compiles for sm_90 and prints registers, spills,
the global loads, the histogram's ballots (VOTE.ANY) and shared atomics (ATOMS.ADD), and the global
atomic adds (REDG.E.ADD: the old values are unused) in the SASS, then checks small cases in the CPU
interpreter.
"""
from __future__ import annotations

import gluon
import gluon.language as gl
from gluon import Layout

MAX_BINS = 2048              # tt.histogram keeps NUM_BINS / 32 counters a thread: 4096 bins spill
PROGRAMS_PER_SM = 4


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@gl.helper
def _count(x_ptr, offs, m, lo, hi, scale, NUM_BINS: gl.constexpr, HIST_BINS: gl.constexpr):
    """The [HIST_BINS] counts of x at offs (mask m) in bins 0..NUM_BINS-1; every other value masked off."""
    if x_ptr.dtype.is_int:
        b = gl.load(x_ptr + offs, mask=m, other=0).to(gl.int32)
        ok = m & (b >= 0) & (b < NUM_BINS)
    else:
        x = gl.load(x_ptr + offs, mask=m, other=0.0).to(gl.float32)
        t = (x - lo) * scale
        b = gl.minimum(gl.floor(t).to(gl.int32), NUM_BINS - 1)         # x == hi: the last bin
        # [lo, hi] tested on x itself, as histc does: (x - lo) * scale rounds an x just past hi to NUM_BINS
        ok = m & (x >= lo) & (x <= hi)                                  # NaN fails both
    return gl.histogram(gl.where(ok, b, 0), HIST_BINS, mask=ok)


@gluon.jit
def histogram_kernel(hist_ptr, x_ptr, n, lo, hi, scale, NUM_BINS: gl.constexpr, BLOCK: gl.constexpr = 2048,
                     NUM_WARPS: gl.constexpr = 4):
    """hist_ptr[b] += the count of x's elements in bin b (< NUM_BINS), over the chunks program p owns:
    [p * BLOCK, ...) striding by num_programs * BLOCK. For float x, bin = floor((x - lo) * scale) with
    scale = NUM_BINS / (hi - lo), x in [lo, hi]; for int x, bin = x (lo, hi and scale unused). hist_ptr must be zeroed (or
    hold counts to add to); the grid is any number of programs of NUM_WARPS warps (launch with
    num_warps=NUM_WARPS)."""
    vec = 16 // x_ptr.dtype.bytes
    HIST_BINS = _next_pow2(NUM_BINS)
    layout = Layout.blocked([vec], [32], [NUM_WARPS])
    lane = gl.arange(0, BLOCK, layout=layout)
    n_main = n // vec * vec                  # provably a multiple of vec: 16-byte loads in the loop
    counts = gl.zeros([HIST_BINS], gl.int32)
    for start in range(gl.program_id(0) * BLOCK, n_main, gl.num_programs(0) * BLOCK):
        offs = start + lane
        counts = counts + _count(x_ptr, offs, offs < n_main, lo, hi, scale, NUM_BINS, HIST_BINS)
    if gl.program_id(0) == 0:                # the last n % vec (< vec) elements, one a thread
        tail = n_main + gl.arange(0, 32 * NUM_WARPS, layout=Layout.blocked([1], [32], [NUM_WARPS]))
        counts = counts + _count(x_ptr, tail, tail < n, lo, hi, scale, NUM_BINS, HIST_BINS)
    bins = gl.arange(0, HIST_BINS)
    gl.atomic_add(hist_ptr + bins, counts, mask=bins < NUM_BINS, sem="relaxed")


# ------------------------------------------------------------------------------ host side


def default_config(n: int, num_bins: int, elem_bytes: int) -> dict:
    """2048-element chunks, 16 a thread on 4 warps: `tt.histogram` costs a ballot per element and bit of
    the bin index, all unrolled, so wider chunks grow the code more than they save in loop overhead; 8 warps
    from 1024 bins, so the bin tile stays at most 16 int32 a thread."""
    if not 1 <= num_bins <= MAX_BINS:
        raise ValueError(f"num_bins={num_bins}: the histogram kernel takes 1 to {MAX_BINS} bins")
    warps = 8 if num_bins >= 1024 else 4
    return {"BLOCK": 512 * warps, "NUM_WARPS": warps}


def _sm_count(device) -> int:
    import torch
    if getattr(device, "type", "cpu") == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132                               # an H100/H200, for launches that only compile or interpret


def launch_plan(x, hist, num_bins: int, lo: float = 0.0, hi: float = 0.0, **tunables) -> tuple[tuple, tuple, dict]:
    """(grid, runtime arguments, constexpr arguments incl. num_warps) of the launch `histogram` makes for a
    1-D contiguous x into hist (int32 [num_bins])."""
    n = x.numel()
    if x.dim() != 1 or (n > 1 and x.stride(0) != 1):
        raise ValueError("histogram_kernel takes a 1-D contiguous x")
    if n >= 2**31:
        raise ValueError("histogram_kernel indexes with 32-bit offsets: x is too large")
    cfg = dict(default_config(n, num_bins, x.element_size()), **tunables)
    programs = max(1, min(-(-n // cfg["BLOCK"]), PROGRAMS_PER_SM * _sm_count(x.device)))
    scale = num_bins / (hi - lo) if x.dtype.is_floating_point else 0.0
    args = (hist, x, n, float(lo), float(hi), float(scale))
    return (programs,), args, dict(cfg, NUM_BINS=num_bins, num_warps=cfg["NUM_WARPS"])


def histogram(x, num_bins: int, lo: float | None = None, hi: float | None = None, hist=None, **tunables):
    """int32 counts of x (any shape, flattened) in num_bins bins: torch.bincount(x, minlength=num_bins)
    restricted to [0, num_bins) for int32 x, torch.histc(x, num_bins, lo, hi) for fp16/bf16/fp32 x (lo < hi
    required: no min/max pass). Into `hist` (int32 [num_bins], zeroed here; new if None)."""
    import torch
    if x.dtype == torch.int32:
        lo, hi = 0.0, 0.0
    elif x.dtype in (torch.float16, torch.bfloat16, torch.float32):
        if lo is None or hi is None or not float(lo) < float(hi):
            raise ValueError(f"histogram of {x.dtype} needs lo < hi (got lo={lo}, hi={hi})")
    else:
        raise ValueError(f"histogram takes int32, fp16, bf16 or fp32 x, got {x.dtype}")
    hist = torch.zeros(num_bins, device=x.device, dtype=torch.int32) if hist is None else hist.zero_()
    if tuple(hist.shape) != (num_bins,) or hist.dtype != torch.int32 or not hist.is_contiguous():
        raise ValueError(f"hist is {tuple(hist.shape)} {hist.dtype}, expected contiguous ({num_bins},) int32")
    x = x.reshape(-1)
    if x.numel() == 0:
        return hist
    x = x if x.is_contiguous() else x.contiguous()
    grid, args, meta = launch_plan(x, hist, num_bins, lo, hi, **tunables)
    histogram_kernel[grid](*args, **meta)
    return hist


def reference(x, num_bins: int, lo: float | None = None, hi: float | None = None):
    """torch's counts, int32: bincount of the in-range int values, histc of float ones."""
    import torch
    x = x.reshape(-1)
    if x.dtype == torch.int32:
        v = x[(x >= 0) & (x < num_bins)]
        return torch.bincount(v, minlength=num_bins).to(torch.int32)
    return torch.histc(x.float(), num_bins, lo, hi).to(torch.int32)


def check(x, hist, num_bins: int, lo: float | None = None, hi: float | None = None) -> str | None:
    """None when hist is torch's histogram of x, else what differs. Int x: exactly. Float x: ours rounds
    (x - lo) * scale once where torch computes (x - lo) * bins / (hi - lo), so an element within a few ulp
    of a bin edge may land one bin over: the counts may differ by as many elements as lie that near an
    edge, and the total must match."""
    import torch
    ref = reference(x, num_bins, lo, hi)
    if x.dtype == torch.int32:
        if torch.equal(hist, ref):
            return None
        i = int((hist != ref).nonzero()[0, 0])
        return f"bin {i}: {int(hist[i])} where torch counts {int(ref[i])}"
    if int(hist.sum()) != int(ref.sum()):
        return f"{int(hist.sum())} elements counted where torch counts {int(ref.sum())}"
    t = (x.reshape(-1).double() - lo) * num_bins / (hi - lo)
    near = int(((t - t.round()).abs() <= 1e-5 * t.abs().clamp(min=1.0)).sum())
    moved = int((hist - ref).abs().sum()) // 2
    return None if moved <= near else f"{moved} elements in other bins than torch's, {near} near an edge"


def check_case(n: int, num_bins: int, dtype, device: str = "cuda"):
    """One case on fresh random x (int32: values from -5 to num_bins + 4; float: randn over [-3, 3]) into
    poisoned bins, checked by `check`: (ok, the fraction of elements in other bins than torch's, what
    differs or None, x, hist, lo, hi)."""
    import torch
    if dtype == torch.int32:
        x = torch.randint(-5, num_bins + 5, (n,), device=device, dtype=dtype)
        lo = hi = None
    else:
        x = torch.randn(n, device=device, dtype=dtype)
        lo, hi = -3.0, 3.0
    hist = torch.full((num_bins,), -1, device=device, dtype=torch.int32)
    histogram(x, num_bins, lo, hi, hist)
    problem = check(x, hist, num_bins, lo, hi)
    moved = int((hist - reference(x, num_bins, lo, hi)).abs().sum()) / 2
    return problem is None, moved / n, problem, x, hist, lo, hi


def main() -> int:
    from example_cli import gpu_present, interpreted_cases      # here, not at the top: the file also loads by path
    if gpu_present():
        import torch
        import triton.testing
        for n in (1 << 26, (1 << 24) + 3, 100_001):
            for num_bins in (256, 100, 1000):
                for dtype in (torch.int32, torch.float32, torch.float16):
                    _, _, problem, x, hist, lo, hi = check_case(n, num_bins, dtype)
                    if dtype == torch.int32:
                        def theirs_fn(x=x, num_bins=num_bins):
                            return torch.bincount(x.clamp(0, num_bins), minlength=num_bins + 1)
                    else:                    # torch.histc on CUDA takes no fp16/bf16: theirs converts first
                        def theirs_fn(x=x, num_bins=num_bins):
                            return torch.histc(x if x.dtype == torch.float32 else x.float(), num_bins, -3.0, 3.0)
                    ours = triton.testing.do_bench(lambda: histogram(x, num_bins, lo, hi, hist), return_mode="median")
                    theirs = triton.testing.do_bench(theirs_fn, return_mode="median")
                    print(f"{n:>9} {num_bins:>5} bins {str(dtype)[6:]:>8}: {problem or 'ok'}  "
                          f"{ours * 1e3:8.1f} us vs torch {theirs * 1e3:8.1f} us: {theirs / ours:.2f}x")
        return 0
    from gluon.backend.machine_code import sass_instructions
    from gluon.language import PointerArg, ScalarArg
    for dt in (gl.int32, gl.float16, gl.float32):
        for num_bins in (256, 100, 1000):
            cfg = default_config(1 << 24, num_bins, dt.bytes)
            f32 = ScalarArg(gl.float32)
            ck = histogram_kernel.compile(PointerArg(gl.int32), PointerArg(dt), ScalarArg(gl.int32, 16), f32, f32, f32,
                                          arch="sm90", num_warps=cfg["NUM_WARPS"], NUM_BINS=num_bins, **cfg)
            ops = sass_instructions(ck.sass())
            mem = {op: ops[op] for op in ("LDG.E", "LDG.E.128", "VOTE.ANY", "ATOMS.ADD", "REDG.E.ADD.STRONG.GPU")
                   if op in ops}
            print(f"{dt.name:>4} {num_bins:>4} bins {cfg}: registers={ck.registers} spills={ck.spills} {mem}")

    bins = {"int32": 100, "float32": 256, "float16": 1000}      # the SASS summary's bin counts
    return interpreted_cases(lambda n, dtype, device: check_case(n, bins[str(dtype).removeprefix("torch.")], dtype,
                                                                 device),
                             [((5003,), "int32"), ((4099,), "float32"), ((9001,), "float16")])


if __name__ == "__main__":
    raise SystemExit(main())
