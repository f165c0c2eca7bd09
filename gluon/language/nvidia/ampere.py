"""Ampere (SM80) builtins: asynchronous copies to shared memory and the register-operand MMA.

`cp_async` / `cp_async_commit` / `cp_async_wait` (cp.async groups) and `mma` (HMMA, mma.sync, with
operands in registers or loaded from shared memory). Later NVIDIA archs that have these features
accept them too.
"""
from __future__ import annotations

from ... import ir
from ...types import Layout
from ..core import Tensor
from ..dot import _k_width, _register_dot
from ..memory import Shared, _address, _mask_for
from ..tracing import _tr, _user_loc


def cp_async(dst: Shared, src, mask=None) -> None:
    """cp.async (SM80+): copy `src` (pointer + offsets tile) into shared `dst`."""
    t = _tr()
    t.require("cp_async", "cp_async")
    base, offs = _address(src)
    if tuple(offs.shape) != tuple(dst.shape):
        raise ir.GluonError(f"cp_async: offsets tile {offs.shape} does not match the shared tile {dst.shape}", _user_loc())
    m = _mask_for(offs.shape, mask)
    t.emit("cp_async", [base, offs, dst] + ([m] if m is not None else []), [], {"has_mask": m is not None})


def cp_async_commit() -> None:
    _tr().require("cp_async", "cp_async_commit")
    _tr().emit("cp_async_commit")


def cp_async_wait(num: int = 0) -> None:
    _tr().require("cp_async", "cp_async_wait")
    _tr().emit("cp_async_wait", [], [], {"num": num})


def mma(a, b, acc="acc") -> Tensor:
    """Ampere-style tensor-core MMA (HMMA, mma.sync): acc += a @ b with register operands."""
    t = _tr()
    t.require("mma", "mma")
    return _register_dot("mma", a, b, acc, Layout.mma((t.warps, 1)), _k_width(a.dtype))
