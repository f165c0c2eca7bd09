"""Programmatic dependent launch (PDL) in the DSL: a kernel that starts while the kernel before it still runs.

A chain of small kernels (a model's elementwise ops between its GEMMs) pays, for each kernel, the gap between
the previous kernel's end and its own start: the launch, its CTAs' set-up, the first loads. On SM90 a kernel
can be launched as a programmatic dependent of the one before it on the stream: it may start as soon as every
CTA of that kernel has called `gl.griddep_launch_dependents()` (or ended), and it calls `gl.griddep_wait()`
before its first access to global memory, which returns once that kernel has finished and its writes are
visible. A kernel that calls `gl.griddep_wait()` is launched that way (its ABI's `launch_pdl`); the check GL206
refuses one that touches global memory before the wait, GL207 one whose wait sits in an `if`, a loop or a warp
role (docs/DIAGNOSTICS.md).

`axpb_kernel` computes out = inp * a + b; the chain applies it `links` times, each link reading the output of
the one before. With PDL=True every link waits for its input and lets the next link launch at its start, so the
next link's launch overlaps this one's work. The values do not change (the chain is checked bit for bit
against the chain without PDL).

Run it (from the repository root): `PYTHONPATH=$PWD python3 examples/dependent_launch.py`. With a GPU it checks
both chains against torch on NaN-poisoned outputs and times them as CUDA-graph replays in interleaved rounds, per
link (bench/common.py's `graphed` and `interleaved`, which the GPU path imports from the repository root);
without one it compiles for sm_90, prints the SASS's wait (ACQBULK) and trigger (PREEXIT) and the launch flag,
then checks the chain in the CPU interpreter (where the wait is a no-op: each launch runs to its end).
"""
from __future__ import annotations

import gluon
import gluon.language as gl
from gluon import Layout


@gluon.jit
def axpb_kernel(out_ptr, inp_ptr, n, a, b, BLOCK: gl.constexpr = 2048, NUM_WARPS: gl.constexpr = 4,
                PDL: gl.constexpr = False):
    """out[i] = inp[i] * a + b (fp32 math) for i in [pid * BLOCK, pid * BLOCK + BLOCK) of n. With PDL: launched
    as a programmatic dependent of the kernel before it, whose output `inp` may be."""
    if PDL:
        gl.griddep_wait()                   # before the first global access: inp is the previous link's output
        gl.griddep_launch_dependents()      # the next link may launch now; it waits for this one's output itself
    vec = 16 // inp_ptr.dtype.bytes
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=Layout.blocked([vec], [32], [NUM_WARPS]))
    m = offs < n
    x = gl.load(inp_ptr + offs, mask=m, other=0.0).to(gl.float32)
    gl.store(out_ptr + offs, x * a + b, mask=m)


# ------------------------------------------------------------------------------ host side


def chain(x, outs, a: float, b: float, pdl: bool, block: int = 2048, num_warps: int = 4):
    """outs[0] = x * a + b, outs[i] = outs[i - 1] * a + b: one launch a link, back to back on the current stream.
    Returns the last output."""
    n = x.numel()
    grid = (-(-n // block),)
    inp = x
    for out in outs:
        axpb_kernel[grid](out, inp, n, a, b, BLOCK=block, NUM_WARPS=num_warps, PDL=pdl, num_warps=num_warps)
        inp = out
    return inp


def reference(x, links: int, a: float, b: float):
    """The chain in fp32 torch ops, each link rounded to x's dtype as the kernel stores it."""
    y = x
    for _ in range(links):
        y = (y.float() * a + b).to(x.dtype)
    return y


def check(n: int, links: int, dtype, device: str = "cuda"):
    """Both chains on fresh random inputs into NaN-poisoned outputs: (ok, relative error of the PDL chain against
    `reference`, bit for bit equal to the chain without PDL)."""
    import torch
    x = torch.randn(n, device=device, dtype=dtype)
    a, b = 0.9, 0.1
    got = {}
    for pdl in (False, True):
        outs = [torch.full_like(x, float("nan")) for _ in range(links)]
        got[pdl] = chain(x, outs, a, b, pdl)
    ref = reference(x, links, a, b).float()
    err = ((got[True].float() - ref).norm() / ref.norm()).item()
    same = torch.equal(got[True], got[False])
    return not got[True].isnan().any().item() and err < 1e-2 and same, err, same


def main() -> int:
    from example_cli import gpu_present, interpreted      # here, not at the top: the file also loads by path
    if gpu_present():
        import torch

        from bench.common import graphed, interleaved       # the benches' graph capture and ABBA rounds
        ok_all = True
        for n, links in ((1 << 16, 16), (1 << 20, 16), (1 << 24, 8), (100003, 16)):
            ok, err, same = check(n, links, torch.bfloat16)
            ok_all &= ok
            x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
            outs = [torch.empty_like(x) for _ in range(links)]
            with_pdl, without = (graphed(lambda pdl=pdl: chain(x, outs, 0.9, 0.1, pdl)) for pdl in (True, False))
            r = interleaved(with_pdl, without, repeats=3, rep_ms=300)
            print(f"n={n:>8} x {links} links: {'ok' if ok else 'WRONG'} (rel err {err:.1e}, same bits: {same})  "
                  f"{r['time_ms'] * 1e3 / links:6.2f} us a link with PDL, {r['baseline_ms'] * 1e3 / links:6.2f} "
                  f"without: {r['ratio']:.3f}x")
        return 0 if ok_all else 1
    from gluon.backend.machine_code import sass_instructions
    from gluon.language import PointerArg, ScalarArg
    for pdl in (False, True):
        ck = axpb_kernel.compile(PointerArg(gl.bfloat16), PointerArg(gl.bfloat16), ScalarArg(gl.int32, 16),
                                 ScalarArg(gl.float32), ScalarArg(gl.float32), arch="sm90", num_warps=4, PDL=pdl)
        ops = sass_instructions(ck.sass())
        print(f"PDL={pdl}: launched as a dependent: {ck.abi.launch_pdl}; ACQBULK (wait) {ops.get('ACQBULK', 0)}, "
              f"PREEXIT (trigger) {ops.get('PREEXIT', 0)}; registers={ck.registers} spills={ck.spills}")

    def small() -> int:
        ok, err, same = check(5000, 4, __import__("torch").bfloat16, device="cpu")
        print(f"interpreter: chain of 4 over 5000 elements {'ok' if ok else 'WRONG'} (rel err {err:.1e}, "
              f"same bits with and without PDL: {same})")
        return 0 if ok else 1
    return interpreted(small)


if __name__ == "__main__":
    raise SystemExit(main())
