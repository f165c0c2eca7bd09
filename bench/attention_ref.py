"""The attention benchmark's correctness side: the bottom-right causal mask, an fp32 reference and the error.

The reference is torch SDPA's math backend in float32 on the benchmark's own inputs, with an explicit
bool mask (not `is_causal`, which torch aligns top-left). It is computed per (batch, head) pair and in
row chunks, so the score matrix of one chunk stays small (S=16384 would otherwise need 34 GB per
batch of 16 heads), and only for the pairs `check_pairs` picks when checking every head would cost too
much: the first and the last pair always (they catch batch/head indexing errors), evenly spaced ones
between them.
"""
from __future__ import annotations

import torch

CHUNK_SCORE_BYTES = 256 << 20    # one chunk's fp32 score matrix


def causal_mask(sq: int, skv: int, row0: int = 0, rows: int | None = None,
                device: torch.device | str | None = None) -> torch.Tensor:
    """Bool [rows, skv] (rows row0.. of the [sq, skv] mask), True where query row i may see key j:
    j <= i + (skv - sq), the diagonal aligned to the bottom-right corner as in FlashAttention (with
    sq > skv the first sq - skv rows see no key)."""
    rows = sq - row0 if rows is None else rows
    i = torch.arange(row0, row0 + rows, device=device)[:, None]
    j = torch.arange(skv, device=device)[None, :]
    return j <= i + (skv - sq)


def check_pairs(batch: int, heads: int, pair_flop: float, budget_flop: float) -> list[tuple[int, int]]:
    """The (b, h) pairs to check: all of them if their reference costs at most `budget_flop`, else as many
    as fit (at least 2), evenly spaced over b * heads + h and including the first and the last."""
    n = batch * heads
    k = n if pair_flop * n <= budget_flop else max(2, min(n, int(budget_flop // max(pair_flop, 1.0))))
    if k >= n:
        idx = list(range(n))
    else:
        idx = sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})
    return [(i // heads, i % heads) for i in idx]


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
              pairs: list[tuple[int, int]]) -> torch.Tensor:
    """fp32 outputs [len(pairs), Sq, D] of the given (b, h) pairs (query head h reads kv head
    h // (Hq // Hkv)); rows that see no key are 0 (FlashAttention's convention)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    sq, skv, d = q.shape[2], k.shape[2], q.shape[3]
    group = q.shape[1] // k.shape[1]
    chunk = max(1, CHUNK_SCORE_BYTES // (4 * max(skv, 1)))
    out = torch.zeros(len(pairs), sq, d, device=q.device, dtype=torch.float32)
    with sdpa_kernel(SDPBackend.MATH):
        for n, (b, h) in enumerate(pairs):
            kf = k[b, h // group].float()[None, None]
            vf = v[b, h // group].float()[None, None]
            for r0 in range(0, sq, chunk):
                rows = min(chunk, sq - r0)
                qf = q[b, h, r0:r0 + rows].float()[None, None]
                mask = causal_mask(sq, skv, r0, rows, q.device) if causal else None
                o = sdpa(qf, kf, vf, attn_mask=mask, scale=scale)[0, 0]
                if mask is not None:
                    o = o.masked_fill(~mask.any(-1, keepdim=True), 0.0)
                out[n, r0:r0 + rows] = o
    return out


def max_rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """max|out - ref| / max|ref| in float32 (NaN if out holds a NaN; a zero ref gives 0 for a zero out,
    inf otherwise)."""
    diff = (out.float() - ref.float()).abs().max().item()
    scale = ref.float().abs().max().item()
    if scale == 0.0:
        return diff if diff != diff else (0.0 if diff == 0.0 else float("inf"))
    return diff / scale
