"""`gemm_sm90` on fp8 inputs with DeepGEMM-style block scales, for the tuner: `TUNING`, named by
specs/gemm_sm90_fp8_block.toml.

The scale kind is part of the problem, not a knob: its inputs, reference and baseline differ from the
per-tensor problem's, so it is a template of its own (results and builds under its own name). A [M, K] and
B [N, K] (K-major) in e4m3 or e5m2; scale_a [M, ceil(K/128)] (a row of A per 128 of K) and scale_b
[ceil(N/128), ceil(K/128)] (128 x 128 blocks of B), fp32, random in [0.25, 2.25) so a block's scale taken
for another's fails the check; C in bf16. The kernel sums each 128-deep block's product in fp32 (`launch`'s
block path: BLOCK_K 128, BLOCK_N 64 or 128, no SWAP_AB; other configs fail to trace and are pruned with the
kernel's reason). Baseline: torch._scaled_mm with the same block scales where this torch / cuBLASLt takes
them (`scaled_mm_blockwise`), else its per-row/column scaling of the same operands. Everything else (the
spec's names, splits, the models) is the GEMM adapter's.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from gluon.dtypes import DType
from gluon.ir import GluonError
from gluon.kernels.gemm_sm90 import DEFAULT_CONFIG, gemm_sm90, num_warps, stand_ins
from gluon.tuning.template import gluon_dtype, torch_dtype

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


class _GemmSM90BlockFP8Tuning(_GemmSM90Tuning):
    name = "gemm_sm90_fp8_block"
    dtypes = ("fp8e4m3", "fp8e5m2")

    def source_hash(self) -> str:
        h = hashlib.sha256(super().source_hash().encode())
        h.update(Path(__file__).read_bytes())
        return h.hexdigest()[:16]

    def trace(self, config, shape, dtype, arch):
        if str(arch) != "sm90":
            raise GluonError(f"gemm_sm90 runs on sm90 (WGMMA + TMA), not {arch}")
        cfg = self.kernel_config(config, dtype)
        return gemm_sm90.trace(*stand_ins(gluon_dtype(dtype), DType.bf16, splits=self.splits(config, shape)),
                               arch=arch, num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=True, SCALE="block")

    def make_inputs(self, shape, dtype, device, seed):
        import torch
        M, N, K = shape
        g = torch.Generator(device=device)
        g.manual_seed(int(seed))
        dt = torch_dtype(dtype)
        a = torch.randn(M, K, device=device, generator=g, dtype=torch.float32).to(dt)
        b = torch.randn(N, K, device=device, generator=g, dtype=torch.float32).to(dt)
        sa_shape, sb_shape = block_scale_shapes(M, N, K)
        sa = torch.rand(sa_shape, device=device, generator=g) * 2 + 0.25
        sb = torch.rand(sb_shape, device=device, generator=g) * 2 + 0.25
        return {"a": a, "b": b, "scale_a": sa, "scale_b": sb,
                "out": torch.empty(M, N, device=device, dtype=torch.bfloat16),
                "base_out": torch.empty(M, N, device=device, dtype=torch.bfloat16)}

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

    def seed_configs(self):
        """What `launch` runs for block scales at several tiles a program: 128x128 tiles, two warpgroups each
        its own role, K_ZIGZAG; then without K_ZIGZAG."""
        d = DEFAULT_CONFIG
        cfg = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, STAGES=3, GROUP_M=d.GROUP_M, PRODUCER_REGS=d.PRODUCER_REGS,
                   SWIZZLE=d.SWIZZLE, EPILOGUE="tma", SPLIT_WGS=True, CONSUMER_REGS=d.CONSUMER_REGS,
                   CLUSTER_M=1, CONSUMER_WARPS=8, PRODUCER_WARPS=1, K_ZIGZAG=True)
        return [cfg, dict(cfg, K_ZIGZAG=False)]

    def call(self, config, a, b, out=None, scale_a=None, scale_b=None):
        """c = (scale_a a) @ (scale_b b).T in bf16: b [N, K] (nn.Linear's weight), scale_a [M, ceil(K/128)],
        scale_b [ceil(N/128), ceil(K/128)] fp32. `out` is written when given."""
        if scale_a is None or scale_b is None:
            M, K = a.shape
            sa_shape, sb_shape = block_scale_shapes(M, b.shape[0], K)
            raise GluonError(f"gemm_sm90_fp8_block takes scale_a= ({list(sa_shape)} fp32) and scale_b= "
                             f"({list(sb_shape)} fp32)")
        return super().call(config, a, b, out=out, scale_a=scale_a, scale_b=scale_b)


TUNING = _GemmSM90BlockFP8Tuning()
