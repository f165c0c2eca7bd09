"""The GEMM's operands TMA cannot describe: each copied into a cached zero-padded buffer it can, alone.

TMA needs a 16-byte aligned base, a unit last stride and 16-byte multiple row pitches. An input that is
not so (a row of K or N elements off 16 bytes, a view at an odd offset) is copied into the top-left of a
buffer that is, kept per (role, device, stream, shape), so repeated calls allocate nothing; an operand
that is TMA-ready is used as it is, even when another one is padded: the kernel's K comes from A and its
N from C, and TMA reads the columns or rows past an operand's own extent as zeros, which is what the
padding would hold. C is padded (and copied out after) only where the launch cannot store it by address:
a strided C, or a TMA epilogue the caller asked for by name. A call's `PadPlan` (the buffers and the views
to copy through) is kept by the caller's key of the call, so a repeat costs the copies and the launch.
"""
from __future__ import annotations

from dataclasses import dataclass

SCRATCH_MAX = 32
COPY_IN_KERNEL_BYTES = 4 << 20     # the most the GEMM kernel copies into padded buffers itself (`kernel_copies`)
_SCRATCH: dict[tuple, object] = {}      # (role, device, stream, rows, cols, source shape, dtype) -> buffer


def tma_ready(t, strides: tuple | None = None) -> bool:
    """TMA needs a 16-byte aligned base, unit last stride and 16-byte multiple other strides."""
    es = t.element_size()
    st = t.stride() if strides is None else strides
    if len(st) == 2:                 # the GEMM's operands: no generator on the launch path
        return st[1] == 1 and t.data_ptr() % 16 == 0 and st[0] * es % 16 == 0
    return st[-1] == 1 and t.data_ptr() % 16 == 0 and all(x * es % 16 == 0 for x in st[:-1])


def _roundup(n: int, to: int) -> int:
    return -(-n // to) * to


def _scratch(role: str, t, rows: int, cols: int, zeroed: bool, stream):
    """A rows x cols buffer of t's dtype for `role`, kept per (device, stream, t's shape). `zeroed` buffers
    are zero when made and only ever written at t's extent, so their padding stays zero; same-stream reuse
    is ordered by torch."""
    import torch
    key = (role, t.get_device(), stream, rows, cols, tuple(t.shape), t.dtype)
    buf = _SCRATCH.get(key)
    if buf is None:
        if len(_SCRATCH) >= SCRATCH_MAX:    # the oldest goes (a PadPlan holding it keeps it alive)
            _SCRATCH.pop(next(iter(_SCRATCH)))
        buf = _SCRATCH[key] = (torch.zeros if zeroed else torch.empty)(rows, cols, device=t.device, dtype=t.dtype)
    return buf


@dataclass(frozen=True)
class PadPlan:
    """The padded buffers of a call's operands TMA cannot take (None: the caller's operand, as given) and
    the views to copy through: `*_in` views of a padded buffer to copy the caller's operand into before the
    launch, `c_out` the view of C's buffer to copy into the caller's C after it; `*_copy` the same copies
    prepared for the driver (`row_copy`: a function of the source and destination addresses), where the backend
    offers them. It holds no tensor of the caller's, so a repeat with other tensors of the same shapes and
    strides takes it; `launch_key` is the caller's key of the padded launch (opaque here), kept so a repeat need
    not derive it again."""
    a: object = None
    b: object = None
    c: object = None
    scale_b: object = None
    a_in: object = None
    b_in: object = None
    c_out: object = None
    scale_b_in: object = None
    a_copy: object = None
    b_copy: object = None
    c_copy: object = None
    launch_key: object = None

    def operands(self, a, b, c, scale_b) -> tuple:
        """The tensors the padded launch takes in place of (a, b, c, scale_b)."""
        return (a if self.a is None else self.a, b if self.b is None else self.b, c if self.c is None else self.c,
                scale_b if self.scale_b is None else self.scale_b)

    def launch(self, launch, a, b, c, scale_b, **kw):
        """Copy in, `launch(A, B, C, scale_b=..., key=launch_key)` on the padded operands (the others as given),
        copy C out."""
        if self.a is not None:
            _copy(self.a_copy, a, self.a_in)
            a = self.a
        if self.b is not None:
            _copy(self.b_copy, b, self.b_in)
            b = self.b
        if self.scale_b is not None:
            self.scale_b_in.copy_(scale_b)
            scale_b = self.scale_b
        launch(a, b, c if self.c is None else self.c, scale_b=scale_b, key=self.launch_key, **kw)
        if self.c is not None:
            _copy(self.c_copy, self.c_out, c)
        return c


def _copy(prepared, src, dst) -> None:
    """src's rows into dst's: by the driver's `prepared` copy (`_row_copy`'s, of these shapes and strides), else
    torch's copy_."""
    if prepared is not None:
        prepared(src.data_ptr(), dst.data_ptr())
    else:
        dst.copy_(src)


def _row_copy(row_copy, src, dst):
    """`row_copy`'s copy of `src`'s rows into `dst`'s (same shape), or None where there is none or the rows of
    either are not contiguous and apart (`row_pitch`; torch copies those)."""
    pitches = (row_pitch(src), row_pitch(dst))
    if row_copy is None or None in pitches:
        return None
    es = src.element_size()
    return row_copy(src.shape[1] * es, src.shape[0], pitches[0] * es, pitches[1] * es)


def pad_plan(a, b, c, scale_b, stream, pad_c: bool = True, row_copy=None) -> PadPlan:
    """The PadPlan of a call whose operands are not all TMA-ready (C only with `pad_c`: the launch stores a
    contiguous C by address instead unless a TMA epilogue is asked for). A row of a padded operand is rounded
    up to 16 bytes; a per-column scale_b is padded (with zeros) to a padded C's columns, so the kernel reads
    none past its end. `row_copy(width, height, src_pitch, dst_pitch)`, where given, prepares the driver's copy
    of rows (bytes) on the call's stream, or says None."""
    kw = {}
    M, N = c.shape
    if not tma_ready(a):
        kw["a"] = _scratch("a", a, a.shape[0], _roundup(a.shape[1], 16 // a.element_size()), True, stream)
        kw["a_in"] = kw["a"][:, : a.shape[1]]
        kw["a_copy"] = _row_copy(row_copy, a, kw["a_in"])
    if not tma_ready(b):
        kw["b"] = _scratch("b", b, b.shape[0], _roundup(b.shape[1], 16 // b.element_size()), True, stream)
        kw["b_in"] = kw["b"][:, : b.shape[1]]
        kw["b_copy"] = _row_copy(row_copy, b, kw["b_in"])
    if pad_c and not tma_ready(c):
        kw["c"] = _scratch("c", c, M, _roundup(N, 16 // c.element_size()), False, stream)
        kw["c_out"] = kw["c"][:, :N]
        kw["c_copy"] = _row_copy(row_copy, kw["c_out"], c)
        if scale_b is not None and scale_b.numel() == N and N > 1:
            kw["scale_b"] = _scratch("sb", scale_b.reshape(1, N), 1, kw["c"].shape[1], True, stream).reshape(-1)
            kw["scale_b_in"] = kw["scale_b"][:N]
    return PadPlan(**kw)


def kernel_copies(pad: PadPlan, a, b) -> tuple | None:
    """(a or None, b or None): the padded operands the GEMM kernel can copy into their buffers itself (COPY_A,
    COPY_B: one launch, where the driver's copy before it costs about a launch of host time), or None where it
    cannot: C or a scale padded too, an operand whose rows are not contiguous or overlap or span 2**31 elements
    (the kernel's offsets are 32-bit), or more than COPY_IN_KERNEL_BYTES to copy (the kernel's copy goes element by
    element: above that a copy of its own is faster on the GPU, and the host's share matters less). A config whose
    kernel cannot copy (host.py's `_copies_in_kernel`) has them copied first all the same."""
    if pad.c is not None or pad.scale_b is not None:
        return None
    srcs = (a if pad.a is not None else None, b if pad.b is not None else None)
    total = 0
    for t in srcs:
        if t is None:
            continue
        pitch = row_pitch(t)
        if pitch is None or (t.shape[0] - 1) * pitch + t.shape[1] >= 2**31:     # the kernel's offsets are 32-bit
            return None
        total += t.numel() * t.element_size()
    return srcs if total <= COPY_IN_KERNEL_BYTES else None


def row_pitch(t) -> int | None:
    """Elements from one row of a 2D tensor to the next (one row: its width), as a 2D copy of rows takes it (the
    driver's, the kernel's); None where its rows are not contiguous, overlap (a broadcast) or it is empty."""
    if t.dim() != 2 or t.stride(1) != 1 or not t.numel():
        return None
    pitch = t.stride(0) if t.shape[0] > 1 else t.shape[1]
    return pitch if pitch >= t.shape[1] else None


def clear() -> None:
    """Drop every padded buffer (tests)."""
    _SCRATCH.clear()
