"""Plain Triton FlashAttention-2 forward, autotuned over a small space: the baseline our attention must beat.

Written the way a Triton user writes it for Hopper (the shape of Triton's tutorial 06): one program per
(BLOCK_M query rows, batch x query head), Q kept in shared memory, K/V tiles streamed in through TMA
(host tensor descriptors over the whole [B, H, S, D] tensors, so out-of-range rows read as zeros and
stores past the end are clipped: any Sq and Skv), online softmax in base 2 with scale*log2(e) folded in,
Triton's own software pipelining (num_stages). The K/V loop is split in two so the common blocks carry no
mask at all: blocks every row of the program sees completely, then the few that need the causal or the
Skv boundary mask. Causal is bottom-right aligned as in FlashAttention (query row i sees key j iff
j <= i + Skv - Sq); blocks above the diagonal are never loaded; a row that sees no key gets zeros.
GQA: query head h reads kv head h // (Hq // Hkv).
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

LOG2E = 1.4426950408889634
SMEM_BYTES = 232448              # sm_90's opt-in shared memory per block (227 KiB)
DTYPES = (torch.float16, torch.bfloat16)
HEAD_DIMS = (64, 128)


def smem_bytes(block_m: int, block_n: int, head_dim: int, stages: int, elem: int = 2) -> int:
    """Shared memory the pipelined kernel asks for: Q once, a K and a V tile per stage, and up to 1 KiB of
    barriers and alignment (Triton 3.6 for sm_90 reported 230400 B for 128x128, D128, 3 stages: this gives
    that; 4 stages ask 295936 B and fail)."""
    return (block_m + 2 * stages * block_n) * head_dim * elem + 1024


def _keep(block_m: int, block_n: int, head_dim: int, stages: int, warps: int) -> bool:
    """Configs that can run well on sm_90: Q, K and V fit in shared memory; 8 warps only with a 128-row Q
    tile (two warpgroups of 64 rows; with 64 rows they would split the tile's columns); with 4 warps and
    128 rows one warpgroup holds the fp32 accumulator and the score tile for all of them, which ptxas
    spills once D + BLOCK_N reaches 192 (D128 x 64: 255 registers and 88-96 B of spills; D128 x 128:
    2 KB), so those need D + BLOCK_N <= 128."""
    if smem_bytes(block_m, block_n, head_dim, stages) > SMEM_BYTES:
        return False
    if warps == 8 and block_m < 128:
        return False
    return not (warps == 4 and block_m == 128 and head_dim + block_n > 128)


def _prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    head_dim = kwargs["HEAD_DIM"]
    kept = [c for c in configs if _keep(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], head_dim, c.num_stages,
                                        c.num_warps)]
    return kept or configs[:1]


def _set_block_shapes(nargs: dict) -> None:
    """The descriptors' boxes follow the config being run (the autotuner calls this before every launch)."""
    bm, bn, d = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["HEAD_DIM"]
    nargs["q_desc"].block_shape = [1, 1, bm, d]
    nargs["o_desc"].block_shape = [1, 1, bm, d]
    nargs["k_desc"].block_shape = [1, 1, bn, d]
    nargs["v_desc"].block_shape = [1, 1, bn, d]


CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=s, num_warps=w, pre_hook=_set_block_shapes)
    for bm in (64, 128) for bn in (64, 128) for s in (2, 3, 4) for w in (4, 8)
]


@triton.jit
def _block(acc, l_i, m_i, q, k_desc, v_desc, b, hk, start_n, offs_m, offs_n, Skv, shift, qk_scale,
           BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """One K/V block of the online softmax. Unmasked blocks take the row max before scaling (one FMA per
    score, the scale is positive); masked ones put -inf where a key is out of range or above the diagonal,
    and a row with no key seen yet subtracts 0 instead of -inf (no NaN: its p and alpha are 0; its running
    max stays -inf, so a later block's scores are not measured against a made-up 0)."""
    k = k_desc.load([b, hk, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
    qk = tl.dot(q, k.T)
    if MASKED:
        cols = start_n + offs_n
        keep = cols[None, :] < Skv
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None] + shift)
        qk = tl.where(keep, qk * qk_scale, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        m_sub = tl.where(m_ij == float("-inf"), 0.0, m_ij)
        p = tl.math.exp2(qk - m_sub[:, None])
    else:
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        m_sub = m_ij
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
    alpha = tl.math.exp2(m_i - m_sub)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    v = v_desc.load([b, hk, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_ij


@triton.autotune(configs=CONFIGS, key=["Sq", "Skv", "HEAD_DIM", "CAUSAL"],
                 prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _attn_fwd(q_desc, k_desc, v_desc, o_desc, Sq, Skv, Hq, GROUP, qk_scale,
              HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    num_m = tl.cdiv(Sq, BLOCK_M)
    pid_m = tl.program_id(0)
    if CAUSAL:                      # the longest programs (last rows: most keys) first: a shorter tail
        pid_m = num_m - 1 - pid_m
    bh = tl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    hk = h // GROUP
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    shift = Skv - Sq                # row i sees key j iff j <= i + shift (bottom-right aligned)
    if CAUSAL:
        # keys no row of this block sees start at start_m + BLOCK_M + shift; every row sees keys up to
        # start_m + shift, so blocks ending there need no mask
        hi = tl.minimum(tl.maximum(start_m + BLOCK_M + shift, 0), Skv)
        full = tl.minimum(tl.maximum(start_m + shift + 1, 0), Skv) // BLOCK_N * BLOCK_N
    else:
        hi = Skv
        full = Skv // BLOCK_N * BLOCK_N
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    q = q_desc.load([b, h, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
    for start_n in range(0, full, BLOCK_N):
        acc, l_i, m_i = _block(acc, l_i, m_i, q, k_desc, v_desc, b, hk, start_n, offs_m, offs_n, Skv, shift,
                               qk_scale, BLOCK_N, HEAD_DIM, False, CAUSAL)
    for start_n in range(tl.multiple_of(full, BLOCK_N), hi, BLOCK_N):
        acc, l_i, m_i = _block(acc, l_i, m_i, q, k_desc, v_desc, b, hk, start_n, offs_m, offs_n, Skv, shift,
                               qk_scale, BLOCK_N, HEAD_DIM, True, CAUSAL)
    l_i = tl.where(l_i == 0.0, 1.0, l_i)        # rows that saw no key: acc is 0, the output 0
    out = (acc / l_i[:, None]).to(o_desc.dtype)
    o_desc.store([b, h, start_m, 0], out.reshape(1, 1, BLOCK_M, HEAD_DIM))


def _tma_ready(t: torch.Tensor) -> bool:
    """TMA describes the tensor as it is: last dim contiguous, the base and every stride a dimension is
    stepped along 16-byte aligned (a size-1 dimension's stride is never used: torch leaves it arbitrary)."""
    e = t.element_size()
    return (t.stride(-1) == 1 and t.data_ptr() % 16 == 0
            and all(n == 1 or (s > 0 and (s * e) % 16 == 0) for n, s in zip(t.shape[:-1], t.stride()[:-1])))


def _descriptor(t: torch.Tensor) -> TensorDescriptor:
    """A TMA descriptor of the whole [B, H, S, D] tensor; size-1 dims get the stride they would have if
    contiguous over the next one (TensorDescriptor wants every stride aligned). The box is a placeholder:
    _set_block_shapes sets it per config before each launch."""
    st = list(t.stride())
    for i in range(t.dim() - 2, -1, -1):
        if t.shape[i] == 1:
            st[i] = st[i + 1] * t.shape[i + 1]
    return TensorDescriptor(t, list(t.shape), st, [1, 1, 16, t.shape[-1]])


def triton_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                     scale: float | None = None, out: torch.Tensor | None = None,
                     config: dict | None = None) -> torch.Tensor:
    """softmax(q k^T * scale [+ causal mask]) v for q [B, Hq, Sq, D], k and v [B, Hkv, Skv, D] (any strides;
    tensors TMA cannot describe as they are are copied contiguous first, which costs a copy). `out`, if
    given, is written (it must be TMA-describable: [B, Hq, Sq, D], 16-byte aligned strides). `config`
    ({'BLOCK_M', 'BLOCK_N', 'num_warps', 'num_stages'}) launches that config instead of autotuning (a
    config to study on the GPU; Triton's interpreter, which cannot autotune, on the CPU)."""
    B, Hq, Sq, D = q.shape
    Bk, Hkv, Skv, Dk = k.shape
    if v.shape != k.shape or Bk != B or Dk != D:
        raise ValueError(f"shapes do not match: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"query heads ({Hq}) must be a multiple of kv heads ({Hkv})")
    if D not in HEAD_DIMS or q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"head dim {D} / dtypes {q.dtype}, {k.dtype}, {v.dtype}: supported are D in {HEAD_DIMS}, "
                         "fp16 or bf16 throughout")
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    if not scale > 0:
        raise ValueError(f"scale must be positive (the row max is taken before scaling), got {scale}")
    if out is None:
        out = torch.empty(B, Hq, Sq, D, device=q.device, dtype=q.dtype)
    elif out.shape != q.shape or out.dtype != q.dtype or not _tma_ready(out):
        raise ValueError(f"out must be a TMA-describable {tuple(q.shape)} {q.dtype} tensor")
    if B * Hq * Sq == 0:
        return out
    if Skv == 0:                    # no key at all: every row sees nothing
        return out.zero_()
    q, k, v = (t if _tma_ready(t) else t.clone(memory_format=torch.contiguous_format) for t in (q, k, v))
    descs = [_descriptor(t) for t in (q, k, v, out)]
    grid = lambda meta: (triton.cdiv(Sq, meta["BLOCK_M"]), B * Hq)  # noqa: E731
    args = (*descs, Sq, Skv, Hq, Hq // Hkv, scale * LOG2E)
    if config is None:
        _attn_fwd[grid](*args, HEAD_DIM=D, CAUSAL=bool(causal))
        return out
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    _set_block_shapes({"q_desc": descs[0], "k_desc": descs[1], "v_desc": descs[2], "o_desc": descs[3],
                       "BLOCK_M": bm, "BLOCK_N": bn, "HEAD_DIM": D})
    _attn_fwd.fn[grid](*args, HEAD_DIM=D, CAUSAL=bool(causal), BLOCK_M=bm, BLOCK_N=bn,
                       num_warps=config.get("num_warps", 8), num_stages=config.get("num_stages", 3))
    return out


def best_config() -> str:
    """The config the autotuner picked for the last problem it tuned (tiles, stages, warps)."""
    c = _attn_fwd.best_config
    return f"{c.kwargs['BLOCK_M']}x{c.kwargs['BLOCK_N']}, {c.num_stages} stages, {c.num_warps} warps"
