"""Which registers of Triton's PTX hold the address of a by-value kernel parameter (a TMA descriptor).

Triton takes a descriptor parameter's generic address in two steps, `mov.b64 %rdA, k_param_i;` then
`cvta.param.u64 %rdB, %rdA;`, and its TMA instructions name either register. The PTX passes that find
a descriptor's copies (cluster.py) or a copy's descriptor (prefetch.py) read that relation here.
"""
from __future__ import annotations

import re


def param_registers(ptx: str, kernel: str) -> dict[str, str]:
    """register -> the parameter (`<kernel>_param_<i>`) whose address it holds, for both steps."""
    movs = dict(re.findall(rf"mov\.b64\s+(%rd\d+),\s*({re.escape(kernel)}_param_\d+);", ptx))
    regs = dict(movs)
    for dst, src in re.findall(r"cvta\.param\.u64\s+(%rd\d+),\s*(%rd\d+);", ptx):
        if src in movs:
            regs[dst] = movs[src]
    return regs
