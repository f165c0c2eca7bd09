"""Rules of the AMD CDNA3 (gfx942) ops: the MFMA dot."""
from __future__ import annotations

from ....ir import Op
from ..context import KernelLowering
from ..dot import lower_dot
from ..registry import rule


@rule("mfma")
def lower_mfma(lw: KernelLowering, op: Op) -> None:
    lower_dot(lw, op, None)
