"""PTX post-pass: prefetch a kernel's TMA descriptors into the descriptor cache at kernel start.

A TMA copy reads its 128-byte descriptor (a by-value kernel parameter) before it can move data; the
first copy through a descriptor that is not cached waits for that read (an L2 or DRAM round trip),
and in a GEMM with one tile per CTA both the first load and the final TMA store of the output pay it
on the critical path. CUTLASS therefore issues `prefetch.tensormap` for every descriptor at kernel
start. Triton 3.6's TTGIR has no op for it, so when the kernel asks for it (`set_tma_prefetch()`, recorded
in its ABI) this pass inserts, right after the entry label, one
`prefetch.tensormap` per parameter that some `cp.async.bulk.tensor` uses as its descriptor, issued by
thread 0 only (the cache is per SM; the other threads would issue duplicates).
"""
from __future__ import annotations

import re

from .hashing import file_hash
from .params import param_registers


class PrefetchPassError(RuntimeError):
    pass



def source_hash() -> str:
    """This pass's source, for the compile cache key of the kernels it rewrites."""
    return file_hash(__file__)


# the descriptor operand of a bulk tensor copy (load, multicast load, store, reduce, prefetch):
# `[%rdN, {coords}]`
_TENSOR_COPY = re.compile(r"cp(?:\.reduce)?\.async\.bulk(?:\.prefetch)?\.tensor\.[1-5]d[\w.:]*\s+(?:\[[^\]]*\],\s*)?"
                          r"\[(%rd\d+),\s*\{")
_ENTRY = re.compile(r"^\$L__func_begin\d+:\s*$", re.M)


def rewrite(ptx: str, kernel: str) -> tuple[str, dict]:
    """Insert the prefetches; returns the new PTX and {"prefetched": [parameter names]}."""
    params: list[str] = []
    param_regs = param_registers(ptx, kernel)
    for reg in dict.fromkeys(_TENSOR_COPY.findall(ptx)):
        p = param_regs.get(reg)
        if p is None:
            raise PrefetchPassError(f"TMA descriptor register {reg} of {kernel} does not come from a kernel "
                                    "parameter in the PTX; cannot prefetch it")
        if p not in params:
            params.append(p)
    if not params:
        return ptx, {"prefetched": []}
    entry = _ENTRY.search(ptx)
    if entry is None:
        raise PrefetchPassError(f"no entry label ($L__func_begin) in the PTX of {kernel}")
    lines = ["{", ".reg .pred %gluon_pf;", ".reg .b32 %gluon_tid;", ".reg .b64 %gluon_tm;",
             "mov.u32 %gluon_tid, %tid.x;", "setp.eq.u32 %gluon_pf, %gluon_tid, 0;"]
    for p in params:
        lines += [f"mov.b64 %gluon_tm, {p};", "cvta.param.u64 %gluon_tm, %gluon_tm;",
                  "@%gluon_pf prefetch.tensormap [%gluon_tm];"]
    lines.append("}")
    block = "\n\t" + "\n\t".join(lines)
    return ptx[:entry.end()] + block + ptx[entry.end():], {"prefetched": params}
