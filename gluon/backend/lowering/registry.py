"""The lowering rules: one plain function per IR op kind, `rule(lw, op) -> None`.

A rule module decorates each of its functions with `@rule("kind")`; `lw` is the kernel's lowering
context (context.KernelLowering), which dispatches every op to `RULES[op.kind]` after checking that
the kind exists and that the target supports its op family. A kind gets exactly one rule: a second
`@rule` for it, or one for a kind `gluon.ir.OPS` does not define, is refused at import time.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ...ir import OPS, Op

if TYPE_CHECKING:
    from .context import KernelLowering

__all__ = ["RULES", "Rule", "rule"]

Rule = Callable[["KernelLowering", Op], None]

RULES: dict[str, Rule] = {}


def rule(*kinds: str) -> Callable[[Rule], Rule]:
    """Register the decorated function as the lowering rule of each op kind in `kinds`."""
    if not kinds or len(set(kinds)) != len(kinds):
        raise ValueError(f"rule() needs one or more distinct op kinds, got {kinds}")

    def register(fn: Rule) -> Rule:
        for kind in kinds:
            if kind not in OPS:
                raise ValueError(f"no IR op kind {kind!r} (gluon.ir.OPS) to lower")
            if kind in RULES:
                old = RULES[kind]
                raise ValueError(f"op kind {kind!r} already has a lowering rule ({old.__module__}.{old.__qualname__})")
        RULES.update(dict.fromkeys(kinds, fn))
        return fn

    return register
