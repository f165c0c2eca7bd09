"""PTX post-passes: what Triton 3.6's TTGIR cannot say, added to the PTX Triton generates, before ptxas.

`cluster` (TMA multicast and cluster-wide arrives), `prefetch` (TMA descriptor prefetch) and `prologue`
(the prologue's redundant CTA barriers) each rewrite one kernel's PTX; `params`, `scan` and `hashing` are
what they share. This module says which run for a kernel, from its ABI, in which order, and what of them
goes into the compile cache key.

The cluster pass (cluster.py: TMA multicast, cluster-wide arrives) runs for every kernel whose ABI has
`num_ctas > 1`; then the opt-in passes the ABI names (`KernelABI.ptx_passes`, set by `gl.set_<name>()`),
in the order of `OPT_IN`. Each pass's source hash is part of the cache key of the kernels it rewrites,
so changing a pass recompiles them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ...abi import KernelABI
from . import cluster as ptx_cluster
from . import prefetch as ptx_prefetch
from . import prologue as ptx_prologue

# opt-in pass name (the kernel attribute and `gl.set_<name>`) -> (module, metadata key of what it did)
OPT_IN = {
    "tma_prefetch": (ptx_prefetch, "gluon_prefetch"),
    "lean_prologue": (ptx_prologue, "gluon_prologue"),
}


@dataclass
class Rewrite:
    """One pass, ready to run on a kernel's PTX: `run(ptx, kernel) -> (ptx, what it did)`; what it did is
    kept in `stats` for the binary's metadata under `metadata_key`."""

    name: str
    run: Callable[[str, str], tuple[str, dict]]
    metadata_key: str
    stats: dict = field(default_factory=dict)

    def __call__(self, ptx: str, kernel: str) -> str:
        ptx, st = self.run(ptx, kernel)
        self.stats.update(st)
        return ptx


def _check(abi: KernelABI) -> None:
    unknown = [n for n in abi.ptx_passes if n not in OPT_IN]
    if unknown:
        raise ValueError(f"kernel {abi.name} asks for unknown PTX passes {unknown}; known: {sorted(OPT_IN)}")


def _multicast_params(abi: KernelABI) -> dict[str, int]:
    """Multicast descriptor name -> its index in the PTX parameter list."""
    return {p.name: abi.launch_index(p.name) for p in abi.runtime_params if p.multicast}


def requested(abi: KernelABI | None) -> list[Rewrite]:
    """The passes this kernel's PTX goes through, in order (none for raw TTGIR without an ABI)."""
    if abi is None:
        return []
    _check(abi)
    out = []
    if abi.num_ctas > 1:
        params, n = _multicast_params(abi), abi.num_ctas
        out.append(Rewrite("cluster", lambda ptx, k: ptx_cluster.rewrite(ptx, k, n, params), "gluon_cluster"))
    for name, (mod, md_key) in OPT_IN.items():
        if name in abi.ptx_passes:
            out.append(Rewrite(name, mod.rewrite, md_key))
    return out


def key_parts(abi: KernelABI | None) -> tuple:
    """What of the passes a kernel's binary depends on: each pass's source, and the cluster's shape."""
    if abi is None:
        return ()
    _check(abi)
    parts: tuple = ()
    if abi.num_ctas > 1:
        parts += (("ptx_cluster", [ptx_cluster.source_hash(), abi.num_ctas, sorted(_multicast_params(abi).items())]),)
    parts += tuple((f"ptx_{name}", mod.source_hash()) for name, (mod, _) in OPT_IN.items() if name in abi.ptx_passes)
    return parts


def stage_hook(rewrites: list[Rewrite]):
    """A Triton stages hook that runs the kernel's PTX through `rewrites` in order before ptxas."""
    def hook(backend, stages, options, language, capability):
        make_ptx = stages["ptx"]

        def ptx_stage(src, metadata):
            ptx = make_ptx(src, metadata)
            for rewrite in rewrites:
                ptx = rewrite(ptx, metadata["name"])
            return ptx

        stages["ptx"] = ptx_stage

    return hook
