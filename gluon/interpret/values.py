"""The interpreter's value model: how each IR dtype is held in registers and in global memory.

A register value (a scalar or a tile) is a numpy array of the tile's shape (0-d for a scalar). Layouts
play no part: every element is there, in row-major order.

    dtype          register (numpy)            global memory (numpy view of the tensor's bytes)
    i1             bool                        bool (torch.bool: one byte)
    i8..i64        int8..int64 (wraparound)    the same
    u8..u64        uint8..uint64               the same
    f16 / f32/f64  float16 / float32 / float64 the same
    bf16           float32 holding bf16 values uint16 bits (rounded to nearest even on the way in)
    f8e4m3/f8e5m2  float32 holding fp8 values  uint8 codes (rounded to nearest even, saturated to the
                                               largest finite value, as PTX cvt.rn.satfinite)

Every op that produces a bf16 or fp8 value rounds its float32 result back to the format (`round_to`), so a
chain of bf16 ops rounds after each op, as the hardware does. Integer arithmetic stays in its numpy type,
which wraps as int32/int64 do on the GPU (the driver runs under `np.errstate(all="ignore")`).
"""
from __future__ import annotations

import numpy as np

from ..types import DType

_NATIVE = {
    DType.i1: np.bool_, DType.i8: np.int8, DType.i16: np.int16, DType.i32: np.int32, DType.i64: np.int64,
    DType.u8: np.uint8, DType.u16: np.uint16, DType.u32: np.uint32, DType.u64: np.uint64,
    DType.f16: np.float16, DType.f32: np.float32, DType.f64: np.float64,
}
FP8 = (DType.f8e4m3, DType.f8e5m2)


def reg_dtype(dt: DType) -> type:
    """The numpy type a register of `dt` is held in."""
    return _NATIVE.get(dt, np.float32)


def mem_dtype(dt: DType) -> type:
    """The numpy type of `dt`'s elements in global memory (bf16: uint16 bits, fp8: uint8 codes)."""
    if dt == DType.bf16:
        return np.uint16
    if dt in FP8:
        return np.uint8
    return _NATIVE[dt]


# ------------------------------------------------------------------------------ bf16


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values -> bf16 bits (uint16), round to nearest even; NaN stays a quiet NaN."""
    x = np.asarray(x, np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), r).astype(np.uint16)


def bf16_bits_rtz(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32)
    r = (x.view(np.uint32) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), r).astype(np.uint16)


def bf16_value(bits: np.ndarray) -> np.ndarray:
    """bf16 bits (uint16) -> float32 values."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


# ------------------------------------------------------------------------------ fp8


def _fp8_table(dt: DType) -> np.ndarray:
    """The float32 value of each of the 256 codes (NaN where the code is a NaN)."""
    ebits, mbits, bias = (4, 3, 7) if dt == DType.f8e4m3 else (5, 2, 15)
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    e = (codes >> mbits) & ((1 << ebits) - 1)
    m = codes & ((1 << mbits) - 1)
    val = np.where(e == 0, m / (1 << mbits) * 2.0 ** (1 - bias), (1 + m / (1 << mbits)) * 2.0 ** (e - bias))
    val = sign * val
    if dt == DType.f8e4m3:                     # e4m3fn: no infinities, S.1111.111 is NaN
        val[(codes & 0x7F) == 0x7F] = np.nan
    else:                                      # e5m2: IEEE-like
        top = e == (1 << ebits) - 1
        val[top & (m == 0)] = sign[top & (m == 0)] * np.inf
        val[top & (m != 0)] = np.nan
    return val.astype(np.float32)


_FP8 = {dt: _fp8_table(dt) for dt in FP8}
# the non-negative finite values in code order (increasing), for encoding
_FP8_POS = {dt: t[:128][np.isfinite(t[:128])] for dt, t in _FP8.items()}


def fp8_codes(x: np.ndarray, dt: DType, rounding: str = "rtne") -> np.ndarray:
    """float values -> fp8 codes (uint8): nearest (ties to the even code) or toward zero, saturated to the
    largest finite value (infinities too: .satfinite); NaN -> a NaN code."""
    x = np.asarray(x, np.float64)
    pos = _FP8_POS[dt]
    a = np.abs(x)
    a_ok = np.where(np.isnan(a), 0.0, np.minimum(a, pos[-1]))
    hi = np.clip(np.searchsorted(pos, a_ok, side="left"), 0, len(pos) - 1)   # first >= a
    lo = np.maximum(hi - 1, 0)
    if rounding == "rtz":
        code = np.where(pos[hi] == a_ok, hi, lo)
    else:
        dlo, dhi = a_ok - pos[lo], pos[hi] - a_ok
        code = np.where(dhi < dlo, hi, np.where(dlo < dhi, lo, np.where(hi % 2 == 0, hi, lo)))
    code = code.astype(np.uint8) | np.where(np.signbit(x), np.uint8(0x80), np.uint8(0))
    return np.where(np.isnan(x), np.uint8(0x7F), code).astype(np.uint8)


def fp8_value(codes: np.ndarray, dt: DType) -> np.ndarray:
    return _FP8[dt][np.asarray(codes, np.uint8)]


# ------------------------------------------------------------------------------ rounding and conversion


def _rtz(x: np.ndarray, t: type) -> np.ndarray:
    """`x` in numpy float type `t`, rounded toward zero."""
    r = np.asarray(x.astype(t))
    over = np.abs(r.astype(np.float64)) > np.abs(x.astype(np.float64))
    if over.any():
        r = r.copy()
        r[over] = np.nextafter(r[over], t(0))
    return r


def round_to(dt: DType, x, rounding: str = "rtne") -> np.ndarray:
    """Float values `x` (any numpy float) as registers of float type `dt`, rounded once."""
    x = np.asarray(x)
    if dt == DType.bf16:
        x32 = x.astype(np.float32) if x.dtype != np.float64 or rounding != "rtz" else _rtz(x, np.float32)
        bits = bf16_bits_rtz(x32) if rounding == "rtz" else bf16_bits(x32)
        return bf16_value(bits)
    if dt in FP8:
        return fp8_value(fp8_codes(x, dt, rounding), dt)
    t = _NATIVE[dt]
    if x.dtype == t:
        return x
    if rounding == "rtz" and np.dtype(t).itemsize < x.dtype.itemsize:
        return _rtz(x, t)
    return np.asarray(x.astype(t))


def from_memory(raw: np.ndarray, dt: DType) -> np.ndarray:
    """Elements read from global memory (mem_dtype) as registers (reg_dtype)."""
    if dt == DType.bf16:
        return bf16_value(raw)
    if dt in FP8:
        return fp8_value(raw, dt)
    return raw


def to_memory(val: np.ndarray, dt: DType) -> np.ndarray:
    """Registers (already of `dt`'s values) as elements to write to global memory."""
    if dt == DType.bf16:
        return bf16_bits(val)
    if dt in FP8:
        return fp8_codes(val, dt)
    return np.asarray(val, _NATIVE[dt])


def scalar(value, dt: DType) -> np.ndarray:
    """A Python number as a 0-d register of `dt` (ints wrap into the type's range)."""
    if dt.is_float:
        return round_to(dt, np.array(float(value), np.float64))
    if dt == DType.i1:
        return np.array(bool(value))
    bits = dt.bits
    v = int(value) & ((1 << bits) - 1)
    if dt.is_signed and v >= 1 << (bits - 1):
        v -= 1 << bits
    return np.array(v, _NATIVE[dt])


def full(shape: tuple, value, dt: DType) -> np.ndarray:
    s = scalar(value, dt)
    return np.broadcast_to(s, shape) if shape else s


# ------------------------------------------------------------------------------ pointers and memory


class Buffer:
    """A global-memory allocation: a 1-D numpy view (mem_dtype) of the tensor's bytes, from its first
    element to the end of its storage; writes land in the caller's tensor. `slack`: elements past that end a
    read may still touch on the GPU, the rest of the 16-byte segment holding the last element (a 16-byte
    vector load there cannot fault: allocations are at least 16-byte granular, and kernels that load rows
    through 16-byte windows rely on it)."""

    __slots__ = ("name", "dtype", "data", "slack")

    def __init__(self, name: str, dtype: DType, data: np.ndarray):
        self.name, self.dtype, self.data = name, dtype, data
        n, itemsize = data.shape[0], data.itemsize
        self.slack = (-(data.ctypes.data + n * itemsize) % 16) // itemsize if n else 0

    def __len__(self) -> int:
        return self.data.shape[0]


class Ptr:
    """A pointer value: a buffer and an element offset into it."""

    __slots__ = ("buf", "offset")

    def __init__(self, buf: Buffer, offset: int = 0):
        self.buf, self.offset = buf, offset

    def __repr__(self) -> str:
        return f"<ptr {self.buf.name}+{self.offset}>"


def buffer_of(name: str, dtype: DType, arg) -> Buffer:
    """The Buffer a CPU torch tensor or a numpy array passed for pointer parameter `name` is."""
    import torch
    if isinstance(arg, np.ndarray):
        if not arg.flags.c_contiguous:
            raise ValueError(f"argument '{name}': a numpy array must be C-contiguous to be global memory")
        arg = torch.from_numpy(arg)
    if not isinstance(arg, torch.Tensor):
        raise ValueError(f"argument '{name}': the interpreter takes CPU torch tensors or numpy arrays as global "
                         f"memory, not {type(arg).__name__}")
    if arg.device.type != "cpu":
        raise ValueError(f"argument '{name}' is on {arg.device}; the interpreter runs on CPU tensors (.cpu())")
    storage_elems = arg.untyped_storage().nbytes() // arg.element_size()
    flat = torch.as_strided(arg, (max(0, storage_elems - arg.storage_offset()),), (1,))
    tt = {DType.bf16: torch.int16, DType.f8e4m3: torch.uint8, DType.f8e5m2: torch.uint8}.get(dtype)
    if tt is not None:
        flat = flat.view(tt)
    data = flat.numpy()
    if dtype == DType.bf16:
        data = data.view(np.uint16)
    return Buffer(name, dtype, data)
