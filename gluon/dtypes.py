"""Element types, and every other vocabulary's name for them, in one table.

`DType` is the project's element type. Each layer speaks another vocabulary (MLIR spells an f16 `f16`,
torch `float16`, Triton's launcher `fp16`, Triton's TMA code the enum value 6, a
`__cuda_array_interface__` `f2`, the tuner's specs `fp16`); all of them are read off `_INFO` below,
so adding a dtype or fixing a name is one row. Nothing here imports torch at module import: the torch
dtype objects are looked up on first use.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class _Names:
    """What one dtype is called elsewhere (None: that vocabulary has no such type)."""

    torch: str | None          # attribute of the torch module
    numpy: str | None          # numpy dtype name
    triton: str | None         # Triton's type string (signatures, `*fp16` pointers, launcher scalars)
    tma: int | None            # Triton's device-side TMA element-type enum (TMA_ELEMENT_TYPES)
    typestr: str | None        # __cuda_array_interface__ typestr without the byte-order character
    tuner: str | None          # the specs' and the tuner's name
    scalar: bool = True        # Triton's launcher can pass it as a scalar argument


class DType(enum.Enum):
    """Element types. The value is (name, bits, kind, mlir spelling)."""

    i1 = ("i1", 1, "int", "i1")
    i8 = ("i8", 8, "int", "i8")
    i16 = ("i16", 16, "int", "i16")
    i32 = ("i32", 32, "int", "i32")
    i64 = ("i64", 64, "int", "i64")
    u8 = ("u8", 8, "uint", "i8")
    u16 = ("u16", 16, "uint", "i16")
    u32 = ("u32", 32, "uint", "i32")
    u64 = ("u64", 64, "uint", "i64")
    f8e4m3 = ("f8e4m3", 8, "float", "f8E4M3FN")
    f8e5m2 = ("f8e5m2", 8, "float", "f8E5M2")
    f16 = ("f16", 16, "float", "f16")
    bf16 = ("bf16", 16, "float", "bf16")
    f32 = ("f32", 32, "float", "f32")
    f64 = ("f64", 64, "float", "f64")

    # -- the type itself
    @property
    def bits(self) -> int:
        return self.value[1]

    @property
    def bytes(self) -> int:
        return max(1, self.value[1] // 8)

    @property
    def is_float(self) -> bool:
        return self.value[2] == "float"

    @property
    def is_int(self) -> bool:
        return self.value[2] in ("int", "uint")

    @property
    def is_signed(self) -> bool:
        return self.value[2] == "int"

    @property
    def is_bool(self) -> bool:
        return self is DType.i1

    @property
    def mlir(self) -> str:
        return self.value[3]

    @property
    def int_range(self) -> tuple[int, int]:
        """Smallest and largest value of an integer type (i1: 0, 1)."""
        if self is DType.i1:
            return 0, 1
        if self.value[2] == "uint":
            return 0, 2 ** self.bits - 1
        return -(2 ** (self.bits - 1)), 2 ** (self.bits - 1) - 1

    @property
    def finite_max(self) -> float:
        """Largest finite magnitude of a float type (a larger Python float would overflow it)."""
        return _FLOAT_MAX[self]

    # -- other vocabularies
    @property
    def torch_name(self) -> str | None:
        return _INFO[self].torch

    @property
    def torch(self):
        """The torch dtype object, or None (no torch installed, or torch lacks the type)."""
        return _torch_dtypes().get(self)

    @property
    def numpy_name(self) -> str | None:
        return _INFO[self].numpy

    @property
    def triton(self) -> str | None:
        """Triton's name: `fp16`, `bf16`, `fp8e4nv`, `i32`, `u32`, ... (`*` + this is a pointer type)."""
        return _INFO[self].triton

    @property
    def launcher_scalar(self) -> str | None:
        """The type string Triton's C launcher takes this as a scalar argument with, or None."""
        info = _INFO[self]
        return info.triton if info.scalar else None

    @property
    def tma_type(self) -> int:
        """Triton's device-side TMA element-type enum (what its tensordesc metadata records)."""
        return _INFO[self].tma

    @property
    def typestr(self) -> str | None:
        return _INFO[self].typestr

    @property
    def tuner_name(self) -> str | None:
        return _INFO[self].tuner

    def __repr__(self) -> str:
        return f"DType.{self.name}"

    __str__ = __repr__

    # -- lookups
    @staticmethod
    def from_name(name) -> "DType":
        """Our dtype from any of its names: ours ('f16'), torch's or numpy's ('torch.float16', 'float32',
        'half'), Triton's ('fp16', 'fp8e4nv') or the tuner's ('fp16')."""
        key = str(name).replace("torch.", "").replace("numpy.", "")
        if key in DType.__members__:
            return DType[key]
        if key in DTYPE_ALIASES:
            return DTYPE_ALIASES[key]
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(DType.__members__)}")

    @staticmethod
    def from_torch(dtype) -> "DType | None":
        """Our dtype of a torch dtype object, or None for one we have no counterpart of."""
        return _from_torch().get(dtype)

    @staticmethod
    def from_typestr(typestr: str) -> "DType | None":
        """Our dtype of a `__cuda_array_interface__` typestr ('<f2', '|u1'), or None when the typestr cannot
        say (bf16 and fp8 are 'V2' / 'V1': raw bytes)."""
        return _BY_TYPESTR.get(str(typestr)[1:])


#            torch            numpy      triton     tma   typestr tuner      scalar
_INFO = {
    DType.i1: _Names("bool", "bool", "i1", 0, "b1", None),
    DType.i8: _Names("int8", "int8", "i8", 0, "i1", None),
    DType.i16: _Names("int16", "int16", "i16", 1, "i2", None),
    DType.i32: _Names("int32", "int32", "i32", 2, "i4", None),
    DType.i64: _Names("int64", "int64", "i64", 4, "i8", None),
    DType.u8: _Names("uint8", "uint8", "u8", 0, "u1", None),
    DType.u16: _Names("uint16", "uint16", "u16", 1, "u2", None),
    DType.u32: _Names("uint32", "uint32", "u32", 2, "u4", None),
    DType.u64: _Names("uint64", "uint64", "u64", 4, "u8", None),
    DType.f8e4m3: _Names("float8_e4m3fn", None, "fp8e4nv", 0, None, "fp8e4m3", scalar=False),
    DType.f8e5m2: _Names("float8_e5m2", None, "fp8e5", 0, None, "fp8e5m2", scalar=False),
    DType.f16: _Names("float16", "float16", "fp16", 6, "f2", "fp16"),
    DType.bf16: _Names("bfloat16", None, "bf16", 10, None, "bf16"),
    DType.f32: _Names("float32", "float32", "fp32", 7, "f4", "fp32"),
    DType.f64: _Names("float64", "float64", "fp64", 9, "f8", None),
}

_FLOAT_MAX = {DType.f8e4m3: 448.0, DType.f8e5m2: 57344.0, DType.f16: 65504.0,
              DType.bf16: 3.3895313892515355e38, DType.f32: 3.4028234663852886e38, DType.f64: math.inf}

#: Other names of our dtypes (torch, numpy, Triton, the tuner's, C-style), for DType.from_name.
DTYPE_ALIASES: dict[str, DType] = {
    "half": DType.f16, "float": DType.f32, "double": DType.f64, "int": DType.i32, "long": DType.i64,
    "int1": DType.i1, "f8e4m3fn": DType.f8e4m3,
}
for _dt, _n in _INFO.items():
    for _alias in (_n.torch, _n.numpy, _n.triton, _n.tuner):
        if _alias is not None:
            DTYPE_ALIASES.setdefault(_alias, _dt)
_BY_TYPESTR = {n.typestr: dt for dt, n in _INFO.items() if n.typestr is not None}

_TORCH: dict = {}
_FROM_TORCH: dict = {}


def _torch_dtypes() -> dict:
    if not _TORCH:
        try:
            import torch
        except ImportError:
            return {}
        for dt, n in _INFO.items():
            obj = getattr(torch, n.torch, None) if n.torch else None
            if obj is not None:
                _TORCH[dt] = obj
                _FROM_TORCH[obj] = dt
    return _TORCH


def _from_torch() -> dict:
    _torch_dtypes()
    return _FROM_TORCH


#: The dtypes the specs and the tuner name, by those names ("fp16", "bf16", "fp32", "fp8e4m3", "fp8e5m2").
TUNER_DTYPES: dict[str, DType] = {dt.tuner_name: dt for dt in (DType.f16, DType.bf16, DType.f32, DType.f8e4m3,
                                                                 DType.f8e5m2)}
