"""Plain Triton `tl.dot` matmul, autotuned over a small space: the "never below plain Triton" baseline.

Written the straightforward way (tiles, grouped program order, a K loop with Triton's own software
pipelining via num_stages); nothing Hopper-specific is spelled out, which is what plain Triton users get.
"""
import triton
import triton.language as tl

CONFIGS = [
    triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP_M": 8}, num_stages=s, num_warps=w)
    for bm, bn, bk, s, w in [
        (128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 4), (128, 128, 64, 4, 8),
        (128, 256, 32, 4, 8), (64, 256, 64, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4),
        (128, 128, 32, 5, 4), (256, 64, 64, 4, 4), (128, 256, 64, 4, 8), (64, 64, 64, 5, 4),
    ]
]


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def _matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    group = GROUP_M * num_n
    first_m = (pid // group) * GROUP_M
    rows = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % rows
    pid_n = (pid % group) // rows
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        x = tl.load(a, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        y = tl.load(b, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc)
        a += BK * stride_ak
        b += BK * stride_bk
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a, b, c):
    M, K = a.shape
    N = b.shape[1]
    grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)  # noqa: E731
    _matmul[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    return c


def best_config() -> str:
    """The config the autotuner picked for the last problem it tuned (tiles, stages, warps)."""
    c = _matmul.best_config
    return f"{c.kwargs['BM']}x{c.kwargs['BN']}x{c.kwargs['BK']}, {c.num_stages} stages, {c.num_warps} warps"
