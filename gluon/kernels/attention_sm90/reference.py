"""The fp32 reference `attention` is checked against (the tuner, the tests, the example): softmax(q k^T *
scale [+ causal mask]) v in float32 at "highest" matmul precision, the causal mask aligned bottom-right
as the kernel's (query i sees key j iff j <= i + Skv - Sq), a query that sees no key giving 0 (LSE -inf),
in chunks of at most `chunk_bytes` of scores so 16k x 16k problems fit in memory."""
from __future__ import annotations

import math

REFERENCE_BYTES = 1 << 30           # fp32 scores per chunk


def reference(q, k, v, causal: bool = False, scale: float | None = None, heads=None, with_lse: bool = False,
              chunk_bytes: int = REFERENCE_BYTES):
    """o [B, H, Sq, D] in fp32 for [B, H, S, D] q and [B, Hkv, Skv, D] k, v (Hkv dividing H: query head h
    reads k/v head h // (H // Hkv)); with `heads`, a list of (batch, head) pairs, only those: [n, Sq, D].
    With `with_lse`, also the natural-log log-sum-exp of the scaled scores, [B, H, Sq] (or [n, Sq])."""
    import torch
    B, H, Sq, D = q.shape
    HK, Skv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    qf = q.reshape(B * H, Sq, D)
    kf = k.reshape(B * HK, Skv, D)
    vf = v.reshape(B * HK, Skv, D)
    if heads is None:
        bh = torch.arange(B * H, device=q.device)
    else:
        bh = torch.tensor([b * H + h for b, h in heads], device=q.device, dtype=torch.long)
    kv_of = (bh // H) * HK + (bh % H) // (H // HK)              # batch x k/v head of each batch x query head
    n = len(bh)
    out = torch.empty(n, Sq, D, device=q.device, dtype=torch.float32)
    lse = torch.empty(n, Sq, device=q.device, dtype=torch.float32)
    row_bytes = 4 * max(1, Skv)
    rows = max(1, min(Sq, chunk_bytes // row_bytes))
    group = max(1, min(n, chunk_bytes // (row_bytes * rows)))
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")                 # no TF32 in the reference
    try:
        for h0 in range(0, n, group):
            idx = kv_of[h0:h0 + group]
            kc, vc = kf[idx].float(), vf[idx].float()
            qc = qf[bh[h0:h0 + group]]
            for i0 in range(0, Sq, rows):
                m = min(rows, Sq - i0)
                s = torch.matmul(qc[:, i0:i0 + m].float(), kc.transpose(1, 2)) * scale
                if causal:
                    i = torch.arange(i0, i0 + m, device=q.device)[:, None]
                    j = torch.arange(Skv, device=q.device)[None, :]
                    s.masked_fill_(j > i + (Skv - Sq), float("-inf"))
                p = torch.softmax(s, dim=-1)
                if causal:
                    p = p.nan_to_num_(0.0)                      # rows that see no key (Sq > Skv)
                out[h0:h0 + group, i0:i0 + m] = torch.matmul(p, vc)
                if with_lse:
                    lse[h0:h0 + group, i0:i0 + m] = torch.logsumexp(s, dim=-1)
    finally:
        torch.set_float32_matmul_precision(precision)
    if heads is None:
        out, lse = out.reshape(B, H, Sq, D), lse.reshape(B, H, Sq)
    return (out, lse) if with_lse else out
