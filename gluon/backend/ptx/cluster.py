"""PTX post-pass for thread-block clusters: TMA multicast and cluster-wide mbarrier arrives.

Triton 3.6 has no TTGIR form for either (docs/CLUSTERS.md), so the lowering marks them and this pass
rewrites Triton's PTX before ptxas:

* A TMA load through a descriptor the kernel's ABI marks `multicast` becomes
  `cp.async.bulk.tensor...multicast::cluster [...], ctaMask` with every CTA of the cluster in the mask:
  the tile lands at the same shared-memory offset, and completes bytes on the same mbarrier, in each.
* An arrive the lowering emitted with the count `ARRIVE_SENTINEL` becomes a local arrive plus one `mapa`
  + remote `mbarrier.arrive.relaxed.cluster` per other CTA of the cluster, under the original
  predicate: the "slot free" signal of a ring that other CTAs fill by multicast.

The kernel's ABI says what to do (`num_ctas`, and which descriptor parameters multicast); the compile
step keys its cache on it. The kernel itself is compiled with num-ctas = 1
(each CTA its own tensors, as in CUDA); the compile step records `num_ctas` in the binary's metadata,
and Triton's launcher then starts grid[0] * num_ctas CTAs in clusters of (num_ctas, 1, 1).
"""
from __future__ import annotations

import re

from .hashing import file_hash
from .params import param_registers

# an arrive count no real arrive uses; the lowering writes it for arrive(cluster=True)
ARRIVE_SENTINEL = 3098


_TMA_G2S = re.compile(
    r"(cp\.async\.bulk\.tensor\.[1-5]d\.shared::cluster\.global\.mbarrier::complete_tx::bytes)"
    r"(\s+\[[^\]]+\],\s*\[(%rd\d+),\s*\{[^}]*\}\],\s*\[[^\]]+\])\s*;")
_SENTINEL_ARRIVE = re.compile(
    r"(@!?%p\d+\s+)?mbarrier\.arrive\.shared::cta\.b64\s+_,\s*\[(%r\d+)\],\s*" + str(ARRIVE_SENTINEL) + r"\s*;")


class ClusterPassError(RuntimeError):
    pass


def source_hash() -> str:
    """This pass's source, for the compile cache key of the kernels it rewrites."""
    return file_hash(__file__)


def rewrite(ptx: str, kernel: str, num_ctas: int, multicast_params: dict[str, int]) -> tuple[str, dict]:
    """Apply the pass; `multicast_params` maps descriptor names to their PTX parameter index.
    Returns the new PTX and what was rewritten (multicast copies per descriptor, cluster arrives)."""
    stats: dict = {"num_ctas": num_ctas, "multicast_copies": {}, "cluster_arrives": 0}
    mask = (1 << num_ctas) - 1
    param_regs = param_registers(ptx, kernel)
    for dname, index in multicast_params.items():
        regs = {r for r, p in param_regs.items() if p == f"{kernel}_param_{index}"}
        if not regs:
            raise ClusterPassError(f"no register holds descriptor {dname} ({kernel}_param_{index}) in the PTX")
        count = 0

        def sub(m):
            nonlocal count
            if m.group(3) not in regs:
                return m.group(0)
            count += 1
            return f"{m.group(1)}.multicast::cluster{m.group(2)}, {mask};"

        ptx = _TMA_G2S.sub(sub, ptx)
        if count == 0:
            raise ClusterPassError(f"no TMA load through descriptor {dname} found in the PTX to multicast")
        stats["multicast_copies"][dname] = count

    def arrive(m):
        pred, addr = (m.group(1) or ""), m.group(2)
        stats["cluster_arrives"] += 1
        # this CTA's barrier: the plain local arrive; the others: mapa + a relaxed remote arrive (the
        # default .release semantics make ptxas put MEMBAR.ALL.GPU before each one: the GEMM ran at 0.62x
        # cuBLAS; the slot's readers, WGMMAs, have completed at wgmma.wait_group before this arrive)
        lines = ["{", ".reg .b32 %gluon_rank, %gluon_peer, %gluon_remote;",
                 f"{pred}mbarrier.arrive.shared::cta.b64 _, [{addr}];",
                 "mov.u32 %gluon_rank, %cluster_ctarank;"]
        for i in range(1, num_ctas):
            lines += [f"add.u32 %gluon_peer, %gluon_rank, {i};",
                      f"and.b32 %gluon_peer, %gluon_peer, {num_ctas - 1};",
                      f"mapa.shared::cluster.u32 %gluon_remote, {addr}, %gluon_peer;",
                      f"{pred}mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%gluon_remote];"]
        lines.append("}")
        return "\n\t".join(lines)

    ptx = _SENTINEL_ARRIVE.sub(arrive, ptx)
    if str(ARRIVE_SENTINEL) in ptx and re.search(rf"mbarrier\.arrive[^;]*\b{ARRIVE_SENTINEL}\b", ptx):
        raise ClusterPassError(f"an arrive with the cluster marker count {ARRIVE_SENTINEL} is in a form this pass "
                               "does not know; it would corrupt the barrier's count")
    return ptx, stats
