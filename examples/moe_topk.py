"""MoE routing in the DSL: per token, a softmax over its E expert logits, the top-k experts, and their
weights renormalized to sum to 1 (Mixtral's router; `renormalize=False` keeps the softmax probabilities).

`logits` is [T, E] (fp32 / fp16 / bf16; any E up to 256, padded to a power of two with -inf, which becomes
probability 0 and is never picked ahead of a real expert). Out: `weights` [T, k] fp32 and `experts` [T, k]
int32, largest weight first, equal probabilities in expert order (the earliest expert first). A program
owns TOKENS tokens; each token's row is held by LANES lanes of a warp, E // LANES experts a thread (16 at
most), so the softmax's max and sum and the sort's columns stay in registers or cross lanes with shuffles:
`gl.topk(p, TOP, dim=1, return_indices=True)`, a bitonic top-k of (probability, expert) pairs
(docs/LANGUAGE.md, "Sorting"). k need not be a power of two: the kernel takes the top TOP = the next
power of two and stores the first k. Up to 16 experts a token is one thread's: no shuffle and no shared
memory at all; for more, the top-k's rows end spread over lanes and reach the stores' layout (a thread's
TOP results side by side, one vector store) through shared memory, a few hundred bytes a warp.

Run it (from the repository root): `PYTHONPATH=$PWD python3 examples/moe_topk.py`. With a GPU it checks
against torch (softmax, topk, renormalize) and times against that torch sequence; without one it compiles
for sm_90 and prints registers, spills, the shuffles and the global loads/stores in the SASS, then checks
small cases in the CPU interpreter.
"""
from __future__ import annotations

import gluon
import gluon.language as gl
from gluon import Layout

LOG2E = 1.4426950408889634
MAX_EXPERTS = 256              # 16 experts a thread over 16 lanes; more would want a row across warps


@gluon.jit
def moe_router_kernel(w_ptr, idx_ptr, logits_ptr, n_tokens, n_experts, logits_stride,
                      E: gl.constexpr, K: gl.constexpr, TOP: gl.constexpr, LANES: gl.constexpr,
                      NUM_WARPS: gl.constexpr = 4, RENORMALIZE: gl.constexpr = True):
    """Route tokens [pid * TOKENS, ...): TOKENS = (32 // LANES) * NUM_WARPS, each token's E (>= n_experts)
    logits across LANES lanes. w_ptr / idx_ptr are [n_tokens, K] fp32 / int32, contiguous."""
    TOKENS = (32 // LANES) * NUM_WARPS
    lay = Layout.blocked([1, E // LANES], [32 // LANES, LANES], [NUM_WARPS, 1], [1, 0])
    rows = gl.expand_dims(gl.program_id(0) * TOKENS + gl.arange(0, TOKENS, layout=Layout.slice(1, lay)), 1)
    cols = gl.expand_dims(gl.arange(0, E, layout=Layout.slice(0, lay)), 0)
    row_ok = rows < n_tokens
    x = gl.load(logits_ptr + rows * logits_stride + cols, mask=row_ok & (cols < n_experts),
                other=float("-inf")).to(gl.float32)
    x = gl.where(row_ok, x, 0.0)                             # tokens past the end: finite, never stored
    e = gl.exp2((x - gl.expand_dims(gl.max(x, 1), 1)) * LOG2E)
    p = e / gl.expand_dims(gl.sum(e, 1), 1)
    w, expert = gl.topk(p, TOP, dim=1, return_indices=True)
    # the results in a layout of their own shape: a thread's TOP weights (and experts) of its token side by
    # side, one vector store each (lanes holding copies of a row are masked off by the compiler)
    olay = Layout.blocked([1, TOP], [32 // LANES, LANES], [NUM_WARPS, 1], [1, 0])
    orows = gl.expand_dims(gl.program_id(0) * TOKENS + gl.arange(0, TOKENS, layout=Layout.slice(1, olay)), 1)
    kcols = gl.expand_dims(gl.arange(0, TOP, layout=Layout.slice(0, olay)), 0)
    if RENORMALIZE:
        kept = gl.where(kcols < K, w, 0.0)                   # the first K of the TOP, K not a power of two
        w = w / gl.expand_dims(gl.sum(kept, 1), 1)
    out = orows * K + kcols
    m = (orows < n_tokens) & (kcols < K)
    gl.store(w_ptr + out, w, mask=m)
    gl.store(idx_ptr + out, expert, mask=m)


# ------------------------------------------------------------------------------ host side


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def default_config(n_experts: int, k: int) -> dict:
    """E padded to a power of two (at least 2), at most 16 experts a thread: a row over LANES = E / 16
    lanes (one thread a row up to 16 experts); TOP = k rounded up to a power of two; 4 warps."""
    if not 1 <= k <= n_experts <= MAX_EXPERTS:
        raise ValueError(f"need 1 <= k <= n_experts <= {MAX_EXPERTS}, got k={k}, n_experts={n_experts}")
    e = max(2, _next_pow2(n_experts))
    return {"E": e, "K": k, "TOP": _next_pow2(k), "LANES": max(1, e // 16), "NUM_WARPS": 4}


def tokens_per_program(cfg: dict) -> int:
    return (32 // cfg["LANES"]) * cfg["NUM_WARPS"]


def launch_plan(logits, weights, experts, k: int, renormalize: bool = True, **tunables) -> tuple[tuple, tuple, dict]:
    """(grid, runtime arguments, constexpr arguments incl. num_warps) of `route`'s launch."""
    n_tokens, n_experts = logits.shape
    if logits.stride(1) != 1:
        raise ValueError("moe_router_kernel needs unit stride along the experts")
    if n_tokens * max(logits.stride(0), k) >= 2**31:
        raise ValueError("moe_router_kernel indexes with 32-bit offsets: the tensor is too large")
    cfg = default_config(n_experts, k)
    cfg.update(tunables)
    grid = (-(-n_tokens // tokens_per_program(cfg)),)
    args = (weights, experts, logits, n_tokens, n_experts, logits.stride(0))
    return grid, args, dict(cfg, RENORMALIZE=renormalize, num_warps=cfg["NUM_WARPS"])


def route(logits, k: int, renormalize: bool = True, weights=None, experts=None, **tunables):
    """(weights [T, k] fp32, experts [T, k] int32) of the 2-D `logits` [T, E]: softmax over E, the top k,
    renormalized to sum to 1 unless `renormalize=False`. `weights` / `experts` (contiguous) are written
    when given, else made."""
    import torch
    n_tokens = logits.shape[0]
    if logits.dim() != 2:
        raise ValueError(f"logits must be [tokens, experts], got shape {tuple(logits.shape)}")
    weights = torch.empty((n_tokens, k), dtype=torch.float32, device=logits.device) if weights is None else weights
    experts = torch.empty((n_tokens, k), dtype=torch.int32, device=logits.device) if experts is None else experts
    if n_tokens == 0:
        return weights, experts
    logits = logits if logits.stride(-1) == 1 else logits.contiguous()
    grid, args, meta = launch_plan(logits, weights, experts, k, renormalize, **tunables)
    moe_router_kernel[grid](*args, **meta)
    return weights, experts


def reference(logits, k: int, renormalize: bool = True):
    """torch's router: fp32 softmax, torch.topk, renormalized. (weights, experts as int64)."""
    import torch
    p = torch.softmax(logits.float(), dim=-1)
    w, i = torch.topk(p, k, dim=-1)
    return (w / w.sum(-1, keepdim=True) if renormalize else w), i


def check(logits, k: int, weights, experts, renormalize: bool = True) -> float:
    """The largest error of (weights, experts) against torch, or an AssertionError. Experts must be distinct
    and in range, and pick probabilities equal (to rounding) to torch's top-k, in order: where probabilities
    tie, or nearly (the softmaxes round differently), another expert than torch's is as right."""
    import torch
    p = torch.softmax(logits.float(), dim=-1)
    ref_w, _ = reference(logits, k, renormalize)
    top = torch.topk(p, k, dim=-1).values
    e = experts.long()
    assert bool(((e >= 0) & (e < logits.shape[1])).all()), "an expert index out of range"
    assert bool((e.sort(-1).values.diff(dim=-1) > 0).all()), "an expert picked twice"
    picked = p.gather(1, e)
    assert torch.allclose(picked, top, rtol=1e-5, atol=1e-7), "the experts are not the top-k"
    torch.testing.assert_close(weights, ref_w, rtol=1e-5, atol=1e-6)
    return (weights - ref_w).abs().max().item()


def check_case(t: int, e: int, k: int, dtype, device: str = "cuda"):
    """One case, top-k of e experts for t tokens of fresh random logits into poisoned outputs, checked by
    `check`: (ok, the largest weight error (NaN when wrong), what is wrong or None, logits, weights, experts)."""
    import torch
    logits = torch.randn(t, e, device=device, dtype=dtype)
    w = torch.full((t, k), float("nan"), device=device)
    i = torch.full((t, k), -1, device=device, dtype=torch.int32)
    route(logits, k, weights=w, experts=i)
    try:
        return True, check(logits, k, w, i), None, logits, w, i
    except AssertionError as exc:
        return False, float("nan"), str(exc), logits, w, i


TOP_K = {8: 2, 64: 6, 128: 8, 160: 8, 256: 8}      # the k the script routes to, by the number of experts


def main() -> int:
    from example_cli import gpu_present, interpreted_cases      # here, not at the top: the file also loads by path
    if gpu_present():
        import torch
        import triton.testing
        for (t, e, k) in ((16384, 8, 2), (16384, 64, 6), (16384, 128, 8), (4096, 160, 8), (65536, 256, 8)):
            for dtype in (torch.float32, torch.bfloat16):
                ok, err, problem, logits, w, i = check_case(t, e, k, dtype)
                if not ok:
                    print(f"  {problem}")
                ours = triton.testing.do_bench(lambda: route(logits, k, weights=w, experts=i), return_mode="median")
                theirs = triton.testing.do_bench(lambda: reference(logits, k), return_mode="median")
                print(f"{t:>6} tokens x {e:<4} experts top-{k} {str(dtype)[6:]:>8}: {'ok' if ok else 'WRONG'} "
                      f"(err {err:.1e})  {ours * 1e3:8.1f} us vs torch {theirs * 1e3:8.1f} us: {theirs / ours:.2f}x")
        return 0
    from gluon.backend.machine_code import sass_instructions
    from gluon.language import PointerArg, ScalarArg
    for dt in (gl.float32, gl.bfloat16):
        for e, k in ((8, 2), (64, 6), (128, 8)):
            cfg = default_config(e, k)
            ints = [ScalarArg(gl.int32, 16)] * 3
            ck = moe_router_kernel.compile(PointerArg(gl.float32), PointerArg(gl.int32), PointerArg(dt), *ints,
                                           arch="sm90", num_warps=cfg["NUM_WARPS"], **cfg)
            ops = sass_instructions(ck.sass())
            mem = {op: n for op, n in sorted(ops.items()) if op.startswith(("LDG.", "STG.", "SHFL.", "LDS", "STS"))}
            print(f"{dt.name:>4} E={e:<3} k={k} {cfg}: registers={ck.registers} spills={ck.spills} {mem}")

    # [tokens, experts] cases, each routed to TOP_K[experts]: one thread a token (8), lanes a token (64, and
    # 160 padded to 256 with -inf)
    return interpreted_cases(lambda t, e, dtype, device: check_case(t, e, TOP_K[e], dtype, device),
                             [((333, 8), "float32"), ((100, 64), "bfloat16"), ((37, 160), "float16")])


if __name__ == "__main__":
    raise SystemExit(main())
