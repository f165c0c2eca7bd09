"""The geometry of a persistent SM90 GEMM launch: output tiles, units of work, the grid, warps, and K slices.

Pure functions of a problem's size and a `GemmConfig`'s fields, shared by the picking rules (`config`), the host
(`host`) and the kernel's callers; they say nothing about which config is good, only what a config makes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import GemmConfig


def cdiv(a: int, b: int) -> int:
    """Ceiling division of sizes."""
    return -(-a // b)


def tiles(M: int, N: int, config: GemmConfig) -> int:
    return cdiv(M, config.BLOCK_M) * cdiv(N, config.step_n)


def slot_use(M: int, N: int, config: GemmConfig, num_sms: int) -> float:
    """The share of the persistent programs' tile slots (rounds x SMs x tile) that hold output: what a
    part-empty last round, or tiles hanging over the edges, cost."""
    return M * N / (cdiv(tiles(M, N, config), num_sms) * num_sms * config.BLOCK_M * config.step_n)


def units(M: int, N: int, config: GemmConfig, splits: int = 1) -> int:
    """Units of work of the persistent grid: a cluster's tiles (CLUSTER_M stacked along M), times the K
    slices."""
    return cdiv(cdiv(M, config.BLOCK_M), config.CLUSTER_M) * cdiv(N, config.step_n) * splits


def num_warps(config: GemmConfig) -> int:
    """Consumer warps, then the producer: one warp, a whole warpgroup in a cluster."""
    return 4 * config.CONSUMER_WGS + (4 if config.cluster_size > 1 else 1)


def grid(M: int, N: int, config: GemmConfig, num_sms: int, splits: int = 1) -> tuple[int]:
    """Persistent grid, in clusters (Triton's launcher starts a cluster's CTAs per grid entry): one per
    unit of work up to one per SM (CTAS_PER_SM per SM). With CLUSTER_K a unit is a tile, its K slices the
    cluster's CTAs."""
    work = units(M, N, config, 1 if config.CLUSTER_K > 1 else splits)
    return (max(1, min(work, num_sms * config.CTAS_PER_SM // config.cluster_size)),)


def balanced_splits(t: int, k_tiles: int, num_sms: int, min_k: int = 8, max_splits: int = 16) -> int:
    """K slices that even out the last wave of `t` tiles: counting up from one slice, a count is taken only
    where it keeps the persistent programs busier (units t x slices over whole waves) by more than 2 points
    than the count taken so far; each slice at least `min_k` k-steps. For
    problems that stream B once (small M), where a K slice costs only its small fp32 partial."""
    def busy(s: int) -> float:
        u = t * s
        return u / (cdiv(u, num_sms) * num_sms)
    best = 1
    for s in range(2, max_splits + 1):
        if cdiv(k_tiles, s) < min_k:
            break
        if busy(s) > busy(best) + 0.02:
            best = s
    return best


def split_k(M: int, N: int, K: int, config: GemmConfig, num_sms: int) -> int:
    """How many K slices: with SWAP_AB, `balanced_splits`; else 1 while the tiles fill the GPU, or else
    enough units for about one wave, each slice at least 16 k-steps, and every slice non-empty. A wave counts
    CTAs (CTAS_PER_SM an SM): in 2-CTA clusters along M an odd count of tile rows leaves a CTA of the last pair
    without rows, which still takes an SM."""
    if config.CLUSTER_K > 1:        # the cluster's CTAs are the slices
        return config.CLUSTER_K
    if config.SPLITK_GRID > 1:      # the slices that meet at a tile's counter
        return config.SPLITK_GRID
    t = tiles(M, N, config)
    k_tiles = cdiv(K, config.BLOCK_K)
    slots = num_sms * config.CTAS_PER_SM    # CTAs resident at once
    if config.SWAP_AB:              # a few tiles less than a wave already stream B at full bandwidth
        return 1 if t * 4 >= slots * 3 else balanced_splits(t, k_tiles, slots)
    if t * 2 > slots or k_tiles < 32:
        return 1      # small K: the fp32 workspace round trip would cost more than the idle SMs
    ctas = units(M, N, config) * config.CLUSTER_M
    want = min(slots // ctas, k_tiles // 16, 16)
    if want <= 1:
        return 1
    per = cdiv(k_tiles, want)
    return cdiv(k_tiles, per)


def slice_work(M: int, N: int, K: int, config: GemmConfig, num_sms: int) -> int:
    """Multiply-adds of one CTA's unit, its tile times its K slice (`split_k`'s): what a deep-K launch's time
    follows, all its units running at once."""
    k_tiles = cdiv(K, config.BLOCK_K)
    return config.BLOCK_M * config.BLOCK_N * cdiv(k_tiles, split_k(M, N, K, config, num_sms)) * config.BLOCK_K
