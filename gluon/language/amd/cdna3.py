"""AMD CDNA3 (gfx942, MI300) builtins: the matrix-core MFMA."""
from __future__ import annotations

from ...types import Layout
from ..core import Tensor
from ..dot import _register_dot
from ..tracing import _tr


def mfma(a, b, acc="acc") -> Tensor:
    """AMD CDNA matrix-core MFMA: acc += a @ b."""
    t = _tr()
    t.require("mfma", "mfma")
    w = t.warps
    wpc = (2, w // 2) if w % 2 == 0 and w >= 4 else (w, 1)
    return _register_dot("mfma", a, b, acc, Layout.mfma(wpc, (32, 32, 8)), 4 * 16 // a.dtype.bits if a.dtype.bits <= 16 else 1)
