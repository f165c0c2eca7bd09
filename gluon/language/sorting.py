"""Sorting along one axis of a register tile: `sort` and `topk` (Triton's `tl.sort` / `tl.topk`), optionally
with the int32 positions the values came from (`return_indices=True`, what MoE routing needs).

Both are bitonic networks, built as Triton 3.6 builds them (triton/language/standard.py `sort_impl`): the
sorted axis is viewed as a hypercube of size-2 dimensions (`reshape`), one per bit of an element's position,
and each compare-and-swap pairs the elements that differ in one bit. Triton finds the partner with a
bitcast and an xor-reduction; this DSL has no bitcast, so a step moves that bit's dimension last
(`permute`), takes the two halves (`split`), keeps or swaps them elementwise (`where`) and puts them back
(`join`, `permute`). No new IR op, lowering or interpreter rule: the composite is made of shape ops whose
result layouts are Triton's own inference (linear layouts: a `permute` moves no data, a `split` of a
dimension held in a thread's registers moves none, one held across lanes is a warp shuffle, as Triton's
xor-reduction over such a bit is), and the interpreter runs it as it runs those ops.

`topk` is Triton's bitonic top-k (sort runs of k, then repeatedly keep the better half of two runs and
merge again, https://www.doc.ic.ac.uk/~hlgr/pdfs/MassivelyParallelTopK.pdf): with b = log2(n), c = log2(k)
it takes c(c+1)/2 + (b-c)(c+1) columns where a sort takes b(b+1)/2 (top-2 of 64: 11, not 21), and the
result tile is k wide.

The order is a total one. NaN sorts above every number (last ascending, first descending, kept by a
top-k ahead of any number), as torch.sort / torch.topk do. Equal values (and -0.0 / +0.0, which compare equal) are in an
unspecified order among themselves when only values are returned; with `return_indices=True` ties are
broken by position, smaller first, so the result is that of a stable sort (torch.sort(..., stable=True))
in both directions, and a top-k keeps the earliest of equal values.
"""
from __future__ import annotations

import builtins

from .. import ir
from ..types import DType
from .core import Tensor, _to_tensor, arange, broadcast_to, expand_dims, where
from .shapes import join, permute, reshape, split
from .tracing import _static_int, _user_loc

_FP8 = (DType.f8e4m3, DType.f8e5m2)


# ------------------------------------------------------------------------------ arguments


def _operand(x, fn: str) -> Tensor:
    if isinstance(x, (tuple, list)):
        raise ir.GluonError(f"{fn}: x must be one register tile, got a {type(x).__name__} of {len(x)}; sort each "
                            "tile, or ask for the indices (return_indices=True) and gl.gather the others by them",
                            _user_loc())
    x = _to_tensor(x)
    if not x.is_tile:
        raise ir.GluonError(f"{fn}: x must be a register tile, got a scalar {x.dtype.name}", _user_loc())
    if x.dtype in _FP8:
        raise ir.GluonError(f"{fn}: x is {x.dtype.name}, and Triton 3.6 does not compile comparisons of fp8 tiles; "
                            "sort it as float16 (x.to(gl.float16), exact) and cast back", _user_loc())
    return x


def _dim(dim, x: Tensor, fn: str) -> int:
    rank = len(x.shape)
    if dim is None:
        return rank - 1
    if isinstance(dim, Tensor) or isinstance(dim, bool):
        raise ir.GluonError(f"{fn}: dim must be a Python int in {-rank}..{rank - 1} (x is {x.shape}), got {dim!r}",
                            _user_loc())
    d = _static_int(dim, f"{fn}'s dim")
    if not -rank <= d < rank:
        raise ir.GluonError(f"{fn}: dim={d} is out of range for x of shape {x.shape}; it must be in "
                            f"{-rank}..{rank - 1}", _user_loc())
    d %= rank
    n = x.shape[d]
    if n & (n - 1):
        raise ir.GluonError(f"{fn}: x's dim {d} has {n} elements; a bitonic sort needs a power of two (pad the "
                            f"tile to {1 << n.bit_length()} with values that sort last)", _user_loc())
    return d


def _flag(v, name: str, fn: str) -> bool:
    if not isinstance(v, bool):
        raise ir.GluonError(f"{fn}: {name} must be True or False (a Python bool), got {v!r}", _user_loc())
    return v


# ------------------------------------------------------------------------------ the order


def _lt(a: Tensor, b: Tensor, is_float: bool) -> Tensor:
    """a < b with NaN above every number (torch's order), as an i1 tile: for floats `not (a >= b)` (true
    where a < b or either is NaN) and a is a number; two compares."""
    if not is_float:
        return a < b
    return ~(a >= b) & (a == a)


class _Order:
    """Which of two (value, position) elements comes first in the result: the smaller value (`descending`:
    the larger), then, where positions are carried, the smaller position. Strict and total with positions."""

    def __init__(self, descending: bool, is_float: bool):
        self.descending, self.is_float = descending, is_float

    def _first(self, a: Tensor, b: Tensor) -> Tensor:
        return _lt(b, a, self.is_float) if self.descending else _lt(a, b, self.is_float)

    def before(self, av: Tensor, ai: Tensor | None, bv: Tensor, bi: Tensor | None) -> Tensor:
        """i1: a comes before b. Without positions, equal values are unordered (False both ways); with them,
        equal values go in position order: a first when b's value does not come first and a's position is
        the smaller."""
        first = self._first(av, bv)
        if ai is None:
            return first
        return first | (~self._first(bv, av) & (ai < bi))


# ------------------------------------------------------------------------------ the hypercube


class _Cube:
    """The tile viewed as `rest + (2,) * bits`: the hypercube axis of position bit b is `len(rest) + bits - 1 - b`
    (row-major: bit 0 is the last axis). `idx` is the int32 positions tile of the same shape, or None when the
    positions are not carried (yet: they are made at the first split, in the halves' own layout)."""

    def __init__(self, vals: Tensor, rest: tuple[int, ...], bits: int, idx: Tensor | None, want_idx: bool):
        self.vals, self.rest, self.bits, self.idx, self.want_idx = vals, rest, bits, idx, want_idx

    def axis(self, b: int) -> int:
        return len(self.rest) + self.bits - 1 - b

    def halves(self, b: int) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        """The elements whose position has bit b clear (lo) and set (hi), each `rest + (2,) * (bits - 1)`, and
        their positions when carried."""
        a = self.axis(b)
        order = [d for d in builtins.range(len(self.rest) + self.bits) if d != a] + [a]
        lo, hi = split(permute(self.vals, order))
        if self.idx is not None:
            ilo, ihi = split(permute(self.idx, order))
        elif self.want_idx:
            ilo = self._positions(b)
            ihi = ilo + (1 << b)
        else:
            ilo = ihi = None
        return lo, hi, ilo, ihi

    def hi_is_later(self) -> bool:
        """Whether each hi of the next `halves` is known to come after its lo in position: before the
        positions are carried (they are made at that split), so a tie needs no compare of positions."""
        return self.idx is None

    def _positions(self, skip: int) -> Tensor:
        """The positions of the elements of a half split off at bit `skip` (that bit clear): the sum of each
        remaining bit's 0/1 along its axis, broadcast, so it takes the halves' layout where it meets them."""
        pos = None
        for b in builtins.range(self.bits):
            if b != skip:
                t = self.bit(b, skip, as_int=True) * (1 << b)
                pos = t if pos is None else pos + t
        if pos is None:                       # one bit, split off: the half is rest-shaped, positions 0
            pos = arange(0, 1)
            for _ in builtins.range(len(self.rest) - 1):
                pos = expand_dims(pos, 0)
        return pos

    def bit(self, b: int, skip: int, as_int: bool = False) -> Tensor:
        """A tile of the halves' rank (bit `skip` split off) holding bit b of each element's position: 2 along
        that bit's axis, 1 elsewhere (it broadcasts). i1, or int32 0/1 with `as_int`."""
        a = self.axis(b)
        a = a if a < self.axis(skip) else a - 1
        t = arange(0, 2)
        if not as_int:
            t = t == 1
        rank = len(self.rest) + self.bits - 1
        for d in builtins.range(rank):
            if d != a:
                t = expand_dims(t, d)
        return t

    def put(self, b: int, lo: Tensor, hi: Tensor, ilo: Tensor | None, ihi: Tensor | None) -> None:
        """Make lo / hi the elements with bit b clear / set again (the inverse of `halves`)."""
        a = self.axis(b)
        rank = len(self.rest) + self.bits
        back = [d if d < a else d - 1 for d in builtins.range(rank)]
        back[a] = rank - 1
        self.vals = permute(join(lo, hi), back)
        if ilo is not None:
            self.idx = permute(join(ilo, ihi), back)


def _compare_and_swap(c: _Cube, b: int, flip_bit: int | None, order: _Order) -> None:
    """One column of the network: each pair differing in position bit b ends in `order` (lo first), or in the
    reverse order where bit `flip_bit` of the position is set (the alternating runs of a bitonic stage)."""
    fresh = c.hi_is_later()
    lo, hi, ilo, ihi = c.halves(b)
    swap = order.before(hi, None if fresh else ihi, lo, None if fresh else ilo)
    if flip_bit is not None:
        swap = swap ^ c.bit(flip_bit, b)
    c.put(b, where(swap, hi, lo), where(swap, lo, hi),
          None if ilo is None else where(swap, ihi, ilo), None if ilo is None else where(swap, ilo, ihi))


def _merge(c: _Cube, stage: int, alternating: bool, order: _Order) -> None:
    """Sort the bitonic runs of 2^stage elements: compare-and-swap on bits stage-1 .. 0; with `alternating`,
    the runs whose bit `stage` is set end reversed (so pairs of runs form bitonic runs for the next stage)."""
    for b in builtins.range(stage - 1, -1, -1):
        _compare_and_swap(c, b, stage if alternating else None, order)


def _keep_first_run(c: _Cube, b: int, order: _Order) -> None:
    """Of each two runs of 2^b (one sorted, one reversed), the 2^b elements that come first: pairwise, the one
    that comes first of each pair (a bitonic run holding the pair's first half). Bit b leaves the cube."""
    fresh = c.hi_is_later()
    lo, hi, ilo, ihi = c.halves(b)
    take = order.before(hi, None if fresh else ihi, lo, None if fresh else ilo)
    c.vals = where(take, hi, lo)
    if ilo is not None:
        c.idx = where(take, ihi, ilo)
    c.bits -= 1


def _network(x: Tensor, d: int, k: int, descending: bool, want_idx: bool) -> tuple[Tensor, Tensor | None]:
    """The first k of x along dim d in `descending` order (k = n: a sort), and their positions if wanted."""
    shape = x.shape
    rank = len(shape)
    n = shape[d]
    to_last = [a for a in builtins.range(rank) if a != d] + [d]
    t = permute(x, to_last)
    rest = t.shape[:-1] or (1,)
    bits, kbits = n.bit_length() - 1, k.bit_length() - 1
    order = _Order(descending, x.dtype.is_float)
    c = _Cube(reshape(t, rest + (2,) * bits) if bits else reshape(t, rest), rest, bits, None, want_idx)
    for stage in builtins.range(1, kbits + 1):           # runs of k sorted, alternately reversed unless k = n
        _merge(c, stage, stage < bits, order)
    for level in builtins.range(kbits + 1, bits + 1):    # top-k: halve, merge the kept runs again
        _keep_first_run(c, kbits, order)
        _merge(c, kbits, level < bits, order)
    out_shape = t.shape[:-1] + (k,)
    back = [0] * rank
    for i, a in enumerate(to_last):
        back[a] = i
    vals = permute(reshape(c.vals, out_shape), back)
    if not want_idx:
        return vals, None
    if c.idx is None:                                    # n = 1: nothing was split, every position is 0
        idx = arange(0, 1)
        for _ in builtins.range(len(out_shape) - 1):
            idx = expand_dims(idx, 0)
        return vals, permute(broadcast_to(idx, out_shape), back)
    return vals, permute(reshape(c.idx, out_shape), back)


# ------------------------------------------------------------------------------ the builtins


def sort(x, dim: int | None = -1, descending: bool = False, return_indices: bool = False):
    """`x` sorted along `dim` (None: the last), ascending (`descending=True`: largest first): Triton's
    `tl.sort` (a bitonic network; dim any axis, Triton's only the last). With `return_indices=True`,
    `(values, indices)`: indices is int32, each element's position along `dim` in x, ties broken
    by position (a stable sort: torch.sort(x, dim, descending, stable=True)). NaN sorts above every number.
    Integer (i1: False first) and float dtypes but fp8; the result has x's shape, in the network's layout
    (open: converted where it meets another)."""
    x = _operand(x, "sort")
    d = _dim(dim, x, "sort")
    descending = _flag(descending, "descending", "sort")
    want = _flag(return_indices, "return_indices", "sort")
    vals, idx = _network(x, d, x.shape[d], descending, want)
    return (vals, idx) if want else vals


def topk(x, k: int, dim: int | None = -1, return_indices: bool = False):
    """The `k` largest elements of `x` along `dim` (None: the last), largest first: Triton's `tl.topk`
    (bitonic top-k; k a power of two up to x's size along dim). The result is x's shape with dim k wide.
    With `return_indices=True`, `(values, indices)`: int32 positions along `dim` in x, equal values in
    position order (the earliest kept): MoE routing's expert ids. NaN counts as the largest value."""
    x = _operand(x, "topk")
    d = _dim(dim, x, "topk")
    want = _flag(return_indices, "return_indices", "topk")
    n = x.shape[d]
    if isinstance(k, Tensor) or isinstance(k, bool):
        raise ir.GluonError(f"topk: k must be a Python int (a compile-time size), got {k!r}", _user_loc())
    k = _static_int(k, "topk's k")
    if not 1 <= k <= n:
        raise ir.GluonError(f"topk: k={k} is outside 1..{n} (x has {n} elements along dim {d})", _user_loc())
    if k & (k - 1):
        up = 1 << k.bit_length()
        raise ir.GluonError(f"topk: k={k} must be a power of two (the result is a tile); take k={up} and use its "
                            f"first {k} (a store masked to columns < {k})", _user_loc())
    vals, idx = _network(x, d, k, True, want)
    return (vals, idx) if want else vals


__all__ = ["sort", "topk"]
