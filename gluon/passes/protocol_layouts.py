"""The register-layout checks of check_protocol (gluon/passes/protocol_checks.py): a tile's layout must
spread it over exactly the warps that run the code making it (its warp role's, else the kernel's), in warps
of the arch's size. Otherwise Triton rejects the TTGIR with a message that names no line of the user's
kernel; here it is reported at the op that makes the tile.

The kernel
* GL301: a register layout whose warps (the product of warps_per_cta) are not the warps that run the
  code (the warp role's, or the kernel's num_warps outside the roles); Triton's verifier would reject
  the generated TTGIR ("Layout has a total of N warps per CTA, but the context requires M").
* GL302: a blocked layout whose threads per warp (the product of threads_per_warp) are not the arch's
  warp size (32 on NVIDIA, 64 on CDNA3).
"""
from __future__ import annotations

import math

from .. import ir
from ..types import BlockedLayout, DotOperandLayout, MFMALayout, MMALayout, SliceLayout
from .analysis import Site
from .layout_assign import module_warps
from .protocol_common import err


def _layout_counts(layout) -> tuple[int | None, int | None]:
    """(warps, threads per warp) a register layout spreads a tile over; None where it does not say."""
    if isinstance(layout, (SliceLayout, DotOperandLayout)):
        return _layout_counts(layout.parent)
    if isinstance(layout, BlockedLayout):
        return math.prod(layout.warps_per_cta), math.prod(layout.threads_per_warp)
    if isinstance(layout, (MMALayout, MFMALayout)):
        return math.prod(layout.warps_per_cta), None
    return None, None


def check_layout_sizes(kernel: ir.Kernel, ordered: list[ir.Op], where: dict[ir.Op, Site]) -> None:
    outside = module_warps(kernel)
    warp_size = kernel.arch.warp_size
    for op in ordered:
        for v in op.results:
            t = v.type
            if not isinstance(t, ir.TileType) or t.layout is None:
                continue
            warps, tpw = _layout_counts(t.layout)
            site = where[op]
            if site.role is not None:
                ws, i = site.role
                first, last = ws.attrs["roles"][i]["warps"]
                allowed = {last - first + 1}
                ctx = f"role {ws.attrs['roles'][i]['role']} (warps {first}..{last}) runs on {last - first + 1}"
            else:
                allowed = {outside}
                ctx = (f"kernel {kernel.name} runs on num_warps={kernel.num_warps}" if outside == kernel.num_warps else
                       f"code outside the warp roles of kernel {kernel.name} runs on the default role's {outside}")
            if tpw is not None and tpw != warp_size:
                raise err("GL302", f"{op.kind} makes a {'x'.join(map(str, t.shape))} tile in layout {t.layout}, whose "
                          f"threads_per_warp multiply to {tpw}, but a warp of {kernel.arch.name} has {warp_size} "
                          f"threads; make threads_per_warp multiply to {warp_size}", op.loc)
            if warps is not None and warps not in allowed:
                want = min(allowed)
                raise err("GL301", f"{op.kind} makes a {'x'.join(map(str, t.shape))} tile in layout {t.layout}, which "
                          f"spreads it over {warps} warps (warps_per_cta), but the {ctx} warps; make warps_per_cta "
                          f"multiply to {want} (Layout.rows(..., num_warps={want}), Layout.wgmma(({want}, 1)), ...)",
                          op.loc)
