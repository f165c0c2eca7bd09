"""The fp32 reference the attention tests check against: softmax(q k^T * scale + mask) v in float32,
the causal mask aligned bottom-right (query i sees key j iff j <= i + Skv - Sq), a query that sees no
key giving zeros (and LSE -inf); query rows in chunks so 16k x 16k scores fit in memory."""
from __future__ import annotations


def reference(q, k, v, causal: bool, scale: float, heads=None, chunk: int = 4096):
    """(o, lse) in fp32 for the (batch, head) pairs `heads` (all if None), [n, Sq, D] and [n, Sq]."""
    import torch
    B, H, Sq, D = q.shape
    HK, Skv = k.shape[1], k.shape[2]
    pairs = heads if heads is not None else [(b, h) for b in range(B) for h in range(H)]
    outs, lses = [], []
    for b, h in pairs:
        kf, vf = k[b, h // (H // HK)].float(), v[b, h // (H // HK)].float()
        o_rows, l_rows = [], []
        for r0 in range(0, Sq, chunk):
            s = q[b, h, r0:r0 + chunk].float() @ kf.T * scale
            if causal:
                i = torch.arange(r0, r0 + s.shape[0], device=q.device)[:, None]
                j = torch.arange(Skv, device=q.device)[None, :]
                s = s.masked_fill(j > i + (Skv - Sq), float("-inf"))
            lse = torch.logsumexp(s, -1)
            p = torch.nan_to_num(torch.exp(s - lse[:, None]), nan=0.0)
            o_rows.append(p @ vf)
            l_rows.append(lse)
        outs.append(torch.cat(o_rows))
        lses.append(torch.cat(l_rows))
    return torch.stack(outs), torch.stack(lses)


def rel_error(out, ref) -> float:
    """max |out - ref| / max |ref|."""
    return ((out.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
