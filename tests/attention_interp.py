"""bench/triton_attention.py run by Triton's interpreter on the CPU (tests/test_bench_attention.py starts this
in a subprocess: TRITON_INTERPRET must be set before the kernel is decorated). Prints one JSON line per
case: its max relative error against an fp32 softmax and its NaN count.

fp16 only: the interpreter's tl.dot gives garbage for bf16 operands (a 16x16 bf16 dot is off by 1e10
there), which says nothing about the compiled kernel.
"""
import json
import math
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import triton.runtime.interpreter as interpreter  # noqa: E402

_patch = interpreter._patch_lang_tensor


def _patch_index(tensor, scope):
    """The interpreter turns a scalar into a Python int with int(ndarray), which numpy >= 2.? refuses for
    its 1-element arrays (every runtime loop bound): take the element instead."""
    _patch(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))


interpreter._patch_lang_tensor = _patch_index

from bench.triton_attention import triton_attention  # noqa: E402


def softmax_reference(q, k, v, causal, scale):
    """fp32 softmax(q k^T) v written out by hand (no SDPA): GQA by repeating kv heads, the bottom-right
    mask by index comparison, rows that see nothing set to 0."""
    g = q.shape[1] // k.shape[1]
    kf, vf = k.float().repeat_interleave(g, 1), v.float().repeat_interleave(g, 1)
    s = q.float() @ kf.transpose(-1, -2) * scale
    if causal:
        sq, skv = q.shape[2], k.shape[2]
        i, j = torch.arange(sq)[:, None], torch.arange(skv)[None, :]
        s = s.masked_fill(~(j <= i + skv - sq), float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0) @ vf


# (B, Hq, Hkv, Sq, Skv, D, causal, BLOCK_M, BLOCK_N, layout)
CASES = [
    (1, 2, 2, 64, 64, 64, False, 64, 64, "contiguous"),
    (2, 4, 2, 100, 150, 64, True, 64, 64, "contiguous"),      # GQA, Sq < Skv, ragged tails
    (1, 2, 1, 150, 100, 64, True, 128, 64, "contiguous"),     # Sq > Skv: the first 50 rows see nothing
    (1, 2, 2, 77, 200, 64, False, 64, 128, "contiguous"),
    (1, 2, 2, 33, 33, 128, True, 128, 64, "contiguous"),
    (1, 1, 1, 130, 10, 64, True, 64, 64, "contiguous"),       # Skv < BLOCK_N
    (1, 2, 2, 70, 90, 64, True, 64, 64, "bshd"),              # [B, S, H, D] tensors seen as [B, H, S, D]
    (1, 2, 2, 40, 50, 64, False, 64, 64, "padded"),           # row stride D+1: not TMA-describable, copied
    (2, 4, 4, 50, 60, 64, True, 64, 64, "expanded"),          # k, v broadcast over heads (stride 0): copied
    (1, 1, 1, 70, 70, 64, False, 64, 64, "unit"),             # size-1 dims with odd strides: used as they are
]


def make(b, hq, hkv, sq, skv, d, layout, gen):
    def t(h, s):
        if layout == "bshd":
            return torch.randn(b, s, h, d, generator=gen).half().transpose(1, 2)
        if layout == "padded":
            return torch.randn(b, h, s, d + 1, generator=gen).half()[..., :d]
        if layout == "expanded":
            return torch.randn(b, 1, s, d, generator=gen).half().expand(b, h, s, d)
        if layout == "unit":
            return torch.randn(b, h, s, d, generator=gen).half().as_strided((b, h, s, d), (3, 5, d, 1))
        return torch.randn(b, h, s, d, generator=gen).half()
    return t(hq, sq), t(hkv, skv), t(hkv, skv)


def main() -> None:
    gen = torch.Generator().manual_seed(0)
    for b, hq, hkv, sq, skv, d, causal, bm, bn, layout in CASES:
        q, k, v = make(b, hq, hkv, sq, skv, d, layout, gen)
        scale = 1.0 / math.sqrt(d)
        out = torch.full((b, hq, sq, d), float("nan"), dtype=torch.float16)
        o = triton_attention(q, k, v, causal=causal, scale=scale, out=out,
                             config={"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": 4, "num_stages": 2})
        ref = softmax_reference(q, k, v, causal, scale)
        err = ((o.float() - ref).abs().max() / ref.abs().max()).item()
        print(json.dumps({"case": [b, hq, hkv, sq, skv, d, causal, bm, bn, layout], "err": err,
                          "nan": int(torch.isnan(o).sum()), "same_out": o is out}), flush=True)


if __name__ == "__main__":
    main()
