"""Pass: warp-specialization checks.

Warp roles of one `warp_specialize` section must be disjoint, cover the kernel's warps exactly, and
include warp 0 (that role runs as Triton's default partition). A role that issues WGMMA must be whole
warpgroups starting at a warp index divisible by 4. Register budgets (setmaxnreg) must be multiples
of 8 in 24..256 and the block's total must fit the register file.
The barrier-protocol analysis (matching waits and arrives, phases, deadlocks) is not written yet.
"""
from __future__ import annotations

from .. import ir


def check_warp_roles(kernel: ir.Kernel) -> ir.Kernel:
    for op in kernel.walk():
        if op.kind == "warp_specialize":
            _check_section(kernel, op)
    return kernel


def _check_section(kernel: ir.Kernel, op: ir.Op) -> None:
    roles = op.attrs["roles"]
    owner: dict[int, str] = {}
    for role in roles:
        first, last = role["warps"]
        name = f"{role['role']} warps {first}..{last}"
        if first < 0 or last < first:
            raise ir.GluonError(f"warp role {name}: warp_range must be (first, last) with first <= last", op.loc)
        for w in range(first, last + 1):
            if w in owner:
                raise ir.GluonError(f"warp {w} belongs to two roles: {owner[w]} and {name}", op.loc)
            owner[w] = name
    missing = [w for w in range(kernel.num_warps) if w not in owner]
    extra = [w for w in owner if w >= kernel.num_warps]
    if extra:
        raise ir.GluonError(f"warp roles use warps {extra}, but the kernel has num_warps={kernel.num_warps}", op.loc)
    if missing:
        raise ir.GluonError(f"warps {missing} of the kernel's {kernel.num_warps} have no role; every warp needs one",
                            op.loc)
    defaults = [r for r in roles if r["warps"][0] == 0]
    default_warps = defaults[0]["warps"][1] + 1
    if default_warps % 4:
        raise ir.GluonError(f"the role holding warp 0 has {default_warps} warps; it runs as the default partition "
                            "and needs a multiple of 4 (put a 1-warp producer after the consumers instead)", op.loc)
    total_regs = 0
    for role, region in zip(roles, op.regions):
        first, last = role["warps"]
        n = last - first + 1
        uses_wgmma = any(o.kind == "wgmma" for o in region.walk())
        if uses_wgmma and (first % 4 or n % 4):
            raise ir.GluonError(f"role {role['role']} (warps {first}..{last}) issues wgmma, which needs whole "
                                "warpgroups: start at a warp index divisible by 4 and use a multiple of 4 warps",
                                _first_loc(region, "wgmma") or op.loc)
        r = role.get("registers")
        if r is not None and (r % 8 or not 24 <= r <= 256):
            raise ir.GluonError(f"role {role['role']}: registers={r}; setmaxnreg takes a multiple of 8 in 24..256",
                                op.loc)
        total_regs += n * 32 * (r if r is not None else 0)
    if total_regs > kernel.arch.regs_per_block:
        raise ir.GluonError(f"register budgets total {total_regs} registers, more than the {kernel.arch.regs_per_block} "
                            f"of an SM on {kernel.arch.name}", op.loc)


def _first_loc(region: ir.Region, kind: str):
    return next((o.loc for o in region.walk() if o.kind == kind), None)
