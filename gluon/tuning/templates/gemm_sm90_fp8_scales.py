"""`gemm_sm90` on fp8 inputs with per-row / per-column or DeepGEMM-style block scales, for the tuner: `ROWCOL`
(specs/gemm_sm90_fp8_rowcol.toml) and `BLOCK` (specs/gemm_sm90_fp8_block.toml).

The scale kind is part of the problem, not a knob: its inputs, reference and baseline differ from the
per-tensor problem's (gemm_sm90.py), so each is a template of its own (results and builds under its own
name). A [M, K] and B [N, K] (K-major) in e4m3 or e5m2, C in bf16, fp32 scales random in [0.25, 2.25) so a
scale taken for another row, column or block fails the check:
* ROWCOL: scale_a [M] (a row of A each), scale_b [N] (a column of B each), applied in the epilogue; against
  torch._scaled_mm's rowwise scaling of the same operands.
* BLOCK: scale_a [M, ceil(K/128)] (a row of A per 128 of K), scale_b [ceil(N/128), ceil(K/128)] (128 x 128
  blocks of B); the kernel sums each 128-deep block's product in fp32 (`launch`'s block path: BLOCK_K 128,
  BLOCK_N 64 or 128, no SWAP_AB; other configs fail to trace and are pruned with the kernel's reason);
  against torch._scaled_mm with the same block scales where this torch / cuBLASLt takes them
  (`scaled_mm_blockwise`), else its rowwise scaling of the same operands.
Everything else (the spec's names, splits, the models, `run`) is the GEMM adapter's.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG
from gluon.kernels.gemm_sm90.block_scaled import BLOCK_SCALED_TALL, BLOCK_SCALED_WIDE, block_scaled_overrides

from .gemm_sm90 import _GemmSM90Tuning


def block_scale_shapes(M: int, N: int, K: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(scale_a's, scale_b's) shape for an M x N x K problem."""
    KB, NB = -(-K // 128), -(-N // 128)
    return (M, KB), (NB, KB)


def dequantized(a, b, scale_a, scale_b):
    """(scale_a * A) @ (scale_b * B)^T in fp64, the scales expanded over their blocks."""
    M, K = a.shape
    N = b.shape[0]
    sa = scale_a.double().repeat_interleave(128, dim=1)[:, :K]
    sb = scale_b.double().repeat_interleave(128, dim=0)[:N].repeat_interleave(128, dim=1)[:, :K]
    return (a.double() * sa) @ (b.double() * sb).T


def scaled_mm_blockwise(a, b, scale_a, scale_b, out, ref=None):
    """torch._scaled_mm of these fp8 operands with their block scales into `out`, as a callable, for the first
    scale layout this torch and cuBLASLt take (each tried once; with `ref`, also checked against it to 1e-2),
    or None where none is taken."""
    import torch
    layouts = ((scale_a.t().contiguous().t(), scale_b.t()), (scale_a, scale_b.t()),
               (scale_a.t().contiguous().t(), scale_b.t().contiguous()))
    for sa, sb in layouts:
        def call(sa=sa, sb=sb):
            return torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=out.dtype, out=out)
        try:
            call()
            torch.cuda.synchronize()
        except (RuntimeError, ValueError, TypeError):
            continue
        if ref is None or ((out.double() - ref).norm() / ref.norm()).item() <= 1e-2:
            return call
    return None


class _ScaledFP8Tuning(_GemmSM90Tuning):
    """The two scale kinds' common part: fp8 dtypes, the inputs' scales of `scale_shapes` (the trace takes
    the subclass's SCALE)."""
    dtypes = ("fp8e4m3", "fp8e5m2")

    def source_hash(self) -> str:
        h = hashlib.sha256(super().source_hash().encode())
        h.update(Path(__file__).read_bytes())
        return h.hexdigest()[:16]

    def scale_shapes(self, M: int, N: int, K: int) -> tuple[tuple, tuple]:
        raise NotImplementedError

    def seed_configs(self, shapes=(), dtypes=()):
        """The GEMM's seeds with fp8's k-step (its last three; the scaled launches' picks are not `pick`'s)."""
        return super().seed_configs()[3:]

    def fp8_scales(self, M, N, K, device, g):
        import torch
        sa_shape, sb_shape = self.scale_shapes(M, N, K)
        return (torch.rand(sa_shape, device=device, generator=g) * 2 + 0.25,
                torch.rand(sb_shape, device=device, generator=g) * 2 + 0.25)

    def missing_scales(self, a, b) -> str:
        """c = (scale_a a) @ (scale_b b).T in bf16 takes the scales of `scale_shapes`: the error without them."""
        sa_shape, sb_shape = self.scale_shapes(a.shape[0], b.shape[0], a.shape[1])
        return f"{self.name} takes scale_a= ({list(sa_shape)} fp32) and scale_b= ({list(sb_shape)} fp32)"


class _RowColFP8Tuning(_ScaledFP8Tuning):
    name = "gemm_sm90_fp8_rowcol"
    SCALE = "rowcol"

    def scale_shapes(self, M, N, K):
        return (M,), (N,)

    def reference(self, inputs):
        a, b = inputs["a"], inputs["b"]
        return (a.double() * inputs["scale_a"].double()[:, None]) @ (b.double() * inputs["scale_b"].double()[:, None]).T

    def baseline(self, inputs):
        import torch
        a, b, o = inputs["a"], inputs["b"], inputs["base_out"]
        sa, sb = inputs["scale_a"].reshape(-1, 1), inputs["scale_b"].reshape(1, -1)
        return lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, out=o)


class _BlockFP8Tuning(_ScaledFP8Tuning):
    name = "gemm_sm90_fp8_block"
    SCALE = "block"

    def scale_shapes(self, M, N, K):
        return block_scale_shapes(M, N, K)

    def reference(self, inputs):
        return dequantized(inputs["a"], inputs["b"], inputs["scale_a"], inputs["scale_b"])

    def baseline(self, inputs):
        import torch
        a, b, o = inputs["a"], inputs["b"], inputs["base_out"]
        got = scaled_mm_blockwise(a, b, inputs["scale_a"], inputs["scale_b"], o)
        if got is not None:
            return got
        sa = inputs["scale_a"].amax(dim=1, keepdim=True)            # the same operands, per row / column
        sb = inputs["scale_b"].amax(dim=1).repeat_interleave(128)[: b.shape[0]].reshape(1, -1).contiguous()
        return lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, out=o)

    def seed_configs(self, shapes=(), dtypes=()):
        """What `launch` runs at each of `shapes` (`pick`: the 128x256 halves at the LLM shapes, the decode buckets'
        64x128 tiles on one warpgroup, ...), first, so `gluon build --best` serves no bucket slower than it even
        after a short search. Then the block-scaled forms `launch` has run or can: 128x128 tiles, two warpgroups
        each its own role, K_ZIGZAG; that with the warpgroups taking turns (MMA_TURNS); without K_ZIGZAG; with the
        scales loaded a k-step ahead (SCALES_AHEAD); with cuBLAS's k-loop (PIPELINED_PROMOTION); 192x128 tiles on
        three warpgroups (`block_scaled_tall`); 128x256 tiles in two halves (`block_scaled_wide`). Each config
        once."""
        d = DEFAULT_CONFIG
        cfg = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, STAGES=3, GROUP_M=d.GROUP_M, PRODUCER_REGS=d.PRODUCER_REGS,
                   SWIZZLE=d.SWIZZLE, EPILOGUE="tma", SPLIT_WGS=True, CONSUMER_REGS=d.CONSUMER_REGS,
                   CLUSTER_M=1, CONSUMER_WARPS=8, PRODUCER_WARPS=1, K_ZIGZAG=True, MMA_TURNS=False,
                   SCALES_AHEAD=False, PIPELINED_PROMOTION=False, QUARTERS=False)
        tall = {k: v for k, v in BLOCK_SCALED_TALL.items() if k != "CONSUMER_WGS"}         # the spec counts warps
        tall = dict(cfg, **tall, CONSUMER_WARPS=4 * BLOCK_SCALED_TALL["CONSUMER_WGS"])
        wide = {k: v for k, v in BLOCK_SCALED_WIDE.items() if k != "CONSUMER_WGS"}
        wide = dict(cfg, **wide, CONSUMER_WARPS=4 * BLOCK_SCALED_WIDE["CONSUMER_WGS"])
        picks = [self.pick(shape, dtype) for shape in shapes for dtype in dtypes if dtype in self.dtypes]
        seeds, seen = [], []                # a seed equal to an earlier one in the fixed seeds' names is that one
        for seed in picks + [cfg, dict(cfg, MMA_TURNS=True), dict(cfg, K_ZIGZAG=False), dict(cfg, SCALES_AHEAD=True),
                             dict(cfg, PIPELINED_PROMOTION=True), tall, wide]:
            key = {k: seed.get(k) for k in cfg}
            if key not in seen:
                seen.append(key)
                seeds.append(seed)
        return seeds

    def launch_overrides(self, M, N, K, num_sms, out_size, aligned):
        """Block scales' tiles (`block_scaled_overrides`), as `launch` puts them on choose_config's pick."""
        return block_scaled_overrides(M, N, K, num_sms, out_size, aligned, None)


ROWCOL = _RowColFP8Tuning()
BLOCK = _BlockFP8Tuning()
