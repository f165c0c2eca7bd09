"""Launch a compiled gluon kernel with torch tensors.

The runtime is the last stage of the pipeline (``binary + metadata --runtime--> launch``). It knows
nothing of the IR, the DSL, specs or the tuner: a :class:`Launcher` gets a compiled binary (the
compile layer's ``Binary``: cubin, triton's metadata json, the kernel's MLIR signature) and one
:class:`ArgSpec` per kernel parameter, and turns a Python call into a CUDA launch.

Why our own launcher instead of ``triton.compiler.CompiledKernel.run``:

* Triton 3.6 compiling a ``.ttgir`` file leaves ``metadata.tensordesc_meta`` unset and keeps the
  raw MLIR types (``!tt.tensordesc<...>``, ``!tt.ptr<f16>``, ``f32``) in the signature, so its
  stock launcher fails on them. We map the signature to the launcher's type strings ourselves
  (``!tt.tensordesc<..>`` -> ``nvTmaDesc``, ``!tt.ptr<f16>`` -> ``*fp16``, ``f32`` -> ``fp32``) and
  build the TMA descriptors ourselves, so every descriptor is passed exactly as the kernel's
  parameter list spells it: ``[CUtensorMap, *shape (i32), *strides (i64)]``.
* Errors must name the kernel, the argument, its source line, what was passed and what is needed,
  and must be raised before anything touches the GPU (so they are testable on a CPU machine).
  Triton's C launcher only says "Pointer argument (at 3) cannot be accessed from Triton".
* The binary is loaded per device (triton's ``CompiledKernel`` loads it once, on whichever device
  was current at the first call), and the grid is launched with ``metadata["num_warps"]`` (a
  warp-specialized kernel launches more warps than its ``ttg.num-warps`` attribute says).

The launch itself goes through triton's generated C launcher (``CudaLauncher`` from
``triton/backends/nvidia/driver.py``), whose calling convention in 3.6 is::

    CudaLauncher(src, metadata)            # src.signature: {index: type string}, src.constants: {}
    launcher(gridX, gridY, gridZ, stream, function,
             (num_warps, num_ctas, shared), launch_metadata, enter_hook, exit_hook, *kernel_args)

with one kernel argument per (expanded) signature entry: an int (device address) for ``*T``, a
``PyCUtensorMap`` for ``nvTmaDesc``, a Python number for scalars. Global/profile scratch buffers
are allocated by that launcher through triton's allocator when the kernel needs them.

Everything that does not depend on a call's values (types, ranges, TMA boxes, torch dtypes, the
expanded signature) is computed once per Launcher, so a launch on a cache hit costs a few
microseconds of Python.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import operator
import re
import threading
from types import SimpleNamespace
from typing import Any, Sequence

__all__ = [
    "ArgSpec",
    "Launcher",
    "LaunchError",
    "TensorDescriptor",
    "make_tensor_descriptor",
    "specialization_key",
    "tma_box_shape",
    "clear_descriptor_cache",
    "descriptor_cache_info",
    "SPEC_DIV16",
    "SPEC_ONE",
]


class LaunchError(ValueError):
    """A kernel launch (or a launcher's construction) was refused.

    Raised before the GPU is touched; the message names the kernel, the argument and its source
    line (when known), what was passed and what the kernel needs.
    """


# --------------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------------

# name -> (bytes, class, torch attribute name, triton launcher scalar type, TMA element type as
# triton's device-side enum TMA_ELEMENT_TYPES in TMAUtilities.cpp)
_DTYPES: dict[str, tuple[int, str, str, str | None, int]] = {
    "i1": (1, "bool", "bool", "i1", 0),
    "i8": (1, "int", "int8", "i8", 0),
    "i16": (2, "int", "int16", "i16", 1),
    "i32": (4, "int", "int32", "i32", 2),
    "i64": (8, "int", "int64", "i64", 4),
    "u8": (1, "uint", "uint8", "u8", 0),
    "u16": (2, "uint", "uint16", "u16", 1),
    "u32": (4, "uint", "uint32", "u32", 2),
    "u64": (8, "uint", "uint64", "u64", 4),
    "f8e4m3": (1, "float", "float8_e4m3fn", None, 0),
    "f8e5m2": (1, "float", "float8_e5m2", None, 0),
    "f8e4m3fnuz": (1, "float", "float8_e4m3fnuz", None, 0),
    "f8e5m2fnuz": (1, "float", "float8_e5m2fnuz", None, 0),
    "f16": (2, "float", "float16", "fp16", 6),
    "bf16": (2, "float", "bfloat16", "bf16", 10),
    "f32": (4, "float", "float32", "fp32", 7),
    "f64": (8, "float", "float64", "fp64", 9),
}

_DTYPE_ALIASES = {
    "bool": "i1", "int1": "i1",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "fp16": "f16", "float16": "f16", "half": "f16",
    "bfloat16": "bf16",
    "fp32": "f32", "float32": "f32", "float": "f32",
    "fp64": "f64", "float64": "f64", "double": "f64",
    "fp8e4nv": "f8e4m3", "float8_e4m3fn": "f8e4m3", "f8e4m3fn": "f8e4m3",
    "fp8e5": "f8e5m2", "float8_e5m2": "f8e5m2",
    "float8_e4m3fnuz": "f8e4m3fnuz", "float8_e5m2fnuz": "f8e5m2fnuz",
}

# MLIR element spellings (signless integers) -> our names.
_MLIR_ELEM = {
    "i1": "i1", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64",
    "f16": "f16", "bf16": "bf16", "f32": "f32", "f64": "f64",
    "f8E4M3FN": "f8e4m3", "f8E5M2": "f8e5m2", "f8E4M3FNUZ": "f8e4m3fnuz", "f8E5M2FNUZ": "f8e5m2fnuz",
}

# Largest finite magnitude of each float scalar type (a larger Python float would overflow).
_FLOAT_MAX = {"f16": 65504.0, "bf16": 3.3895313892515355e38, "f32": 3.4028234663852886e38,
              "f64": math.inf}

# Triton's device-side TMA element-type enum -> CUtensorMapDataType (the host enum that
# cuTensorMapEncodeTiled takes); copied from TMA_DTYPE_DEVICE_TO_HOST in triton 3.6's
# backends/nvidia/driver.py (only 8, 9, 10 differ).
_TMA_DTYPE_DEVICE_TO_HOST = {i: i for i in range(16)}
_TMA_DTYPE_DEVICE_TO_HOST.update({8: 10, 9: 8, 10: 9})

_SWIZZLE_MODE = {0: 0, 32: 1, 64: 2, 128: 3}          # bytes -> CUtensorMapSwizzle
_SWIZZLE_BYTES = {v: k for k, v in _SWIZZLE_MODE.items()}

# __cuda_array_interface__ typestr (without byte order) -> our dtype
_TYPESTR = {"b1": "i1", "i1": "i8", "i2": "i16", "i4": "i32", "i8": "i64", "u1": "u8",
            "u2": "u16", "u4": "u32", "u8": "u64", "f2": "f16", "f4": "f32", "f8": "f64"}

# Launch grid limits of CUDA (x, y, z).
_GRID_MAX = (2**31 - 1, 65535, 65535)

SPEC_DIV16 = "D"   #: specialization_key entry: pointer 16-byte aligned / integer divisible by 16
SPEC_ONE = "1"     #: specialization_key entry: integer equal to 1


def _canon_dtype(name: Any) -> str:
    """Our dtype name for ``name`` (ours, an alias like 'fp16', or a torch dtype's str)."""
    key = str(name)
    if key.startswith("torch."):
        key = key[6:]
    if key in _DTYPES:
        return key
    if key in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[key]
    raise ValueError(f"unknown dtype {name!r}; known: {', '.join(_DTYPES)}")


def _int_range(dtype: str) -> tuple[int, int]:
    size, cls = _DTYPES[dtype][0], _DTYPES[dtype][1]
    if cls == "bool":
        return 0, 1
    bits = 8 * size
    if cls == "uint":
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def _torch():
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is needed to launch anyway
        return None
    return torch


def _torch_dtype(dtype: str):
    torch = _torch()
    return getattr(torch, _DTYPES[dtype][2], None) if torch is not None else None


# --------------------------------------------------------------------------------------------
# ArgSpec
# --------------------------------------------------------------------------------------------

_KINDS = ("pointer", "scalar", "tensordesc")


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    """One kernel parameter as the runtime sees it.

    ``kind`` is "pointer" (a global tensor passed by address), "scalar" (a Python number) or
    "tensordesc" (a TMA descriptor built from a tensor, or a prebuilt :class:`TensorDescriptor`).
    ``dtype`` uses our names ("f16", "bf16", "f32", "i32", "u32", "f8e4m3", ...; aliases such as
    "fp16" or "float16" are normalised). ``rank`` is the tensor rank the kernel expects (None:
    any). ``block_shape`` and ``swizzle_bytes`` describe a tensordesc's tile and its shared-memory
    swizzle. ``needs_contiguous`` marks pointer args whose kernel indexes a dense row-major
    layout. ``source`` is "file.py:LINE" of the parameter, used in error messages.
    """

    name: str
    kind: str
    dtype: str
    rank: int | None = None
    block_shape: tuple[int, ...] | None = None
    swizzle_bytes: int = 0
    needs_contiguous: bool = False
    source: str | None = None

    def __post_init__(self):
        if self.kind not in _KINDS:
            raise ValueError(f"ArgSpec {self.name!r}: kind must be one of {_KINDS}, got {self.kind!r}")
        object.__setattr__(self, "dtype", _canon_dtype(self.dtype))
        if self.block_shape is not None:
            object.__setattr__(self, "block_shape", tuple(int(b) for b in self.block_shape))
        if self.swizzle_bytes not in _SWIZZLE_MODE:
            raise ValueError(f"ArgSpec {self.name!r}: swizzle_bytes must be 0, 32, 64 or 128, "
                             f"got {self.swizzle_bytes!r}")
        if self.kind == "tensordesc" and self.block_shape is not None:
            if self.rank is not None and self.rank != len(self.block_shape):
                raise ValueError(f"ArgSpec {self.name!r}: rank {self.rank} does not match "
                                 f"block_shape {self.block_shape}")
            if not 1 <= len(self.block_shape) <= 5:
                raise ValueError(f"ArgSpec {self.name!r}: TMA supports rank 1..5, got "
                                 f"block_shape {self.block_shape}")
        if self.kind == "scalar" and _DTYPES[self.dtype][3] is None:
            raise ValueError(f"ArgSpec {self.name!r}: a scalar of dtype {self.dtype} cannot be "
                             f"passed to a kernel (triton's launcher has no such scalar type)")


# --------------------------------------------------------------------------------------------
# specialization
# --------------------------------------------------------------------------------------------

def _address(v: Any) -> int | None:
    """Device address of a pointer-like value, or None when it has none we can read cheaply."""
    dp = getattr(v, "data_ptr", None)
    if dp is not None:
        return dp()
    if isinstance(v, int):
        return v
    cai = getattr(v, "__cuda_array_interface__", None)
    if cai is not None:
        return cai["data"][0]
    return None


def specialization_key(args: Sequence[ArgSpec], values: Sequence[Any]) -> tuple:
    """Per-argument facts a kernel may be specialized on, the way triton's JIT does it.

    One entry per ArgSpec, in order:

    * pointer: ``SPEC_DIV16`` ("D") when the address is 16-byte aligned (a null pointer too), else "";
    * integer scalar (not i1): "D" when ``value % 16 == 0``, ``SPEC_ONE`` ("1") when
      ``value == 1``, else "";
    * float/bool scalars and tensordescs: "" (TMA requires 16-byte alignment anyway).

    The JIT puts this tuple in its cache key and marks the "D" parameters with
    ``{tt.divisibility = 16 : i32}``: on sm_90 a copy kernel issues ``ld.global.v4`` only with it.
    The Launcher then checks, per call, that the values still satisfy what its binary assumed.
    Cheap on purpose (a few hundred ns per argument): it runs on every launch.
    """
    key = []
    for spec, v in zip(args, values):
        kind = spec.kind
        if kind == "pointer":
            if v is None:
                key.append(SPEC_DIV16)
                continue
            addr = _address(v)
            key.append(SPEC_DIV16 if addr is not None and addr % 16 == 0 else "")
        elif kind == "scalar" and _DTYPES[spec.dtype][1] in ("int", "uint"):
            try:
                x = operator.index(v)
            except TypeError:
                key.append("")
                continue
            key.append(SPEC_DIV16 if x % 16 == 0 else SPEC_ONE if x == 1 else "")
        else:
            key.append("")
    return tuple(key)


# --------------------------------------------------------------------------------------------
# TMA descriptors
# --------------------------------------------------------------------------------------------

def tma_box_shape(block_shape: Sequence[int], elem_size: int, swizzle_bytes: int) -> tuple[int, ...]:
    """The TMA box a kernel uses to move a ``block_shape`` tile, as triton 3.6 computes it.

    Mirrors ``getTMABlockShape`` (TMAUtilities.cpp): every box dimension is clamped to 256, and
    with a swizzle the contiguous (last) dimension is exactly the swizzle width in elements (a
    64x128 fp16 tile with 128-byte swizzle loads as 64x64 boxes). Raises ValueError when the tile
    is narrower than the swizzle, or (no swizzle) its inner bytes are not a multiple of 16.
    """
    box = [min(int(b), 256) for b in block_shape]
    if swizzle_bytes:
        contig = swizzle_bytes // elem_size
        if box[-1] < contig:
            raise ValueError(f"block {tuple(block_shape)} is {block_shape[-1] * elem_size} bytes wide, "
                             f"narrower than its {swizzle_bytes}-byte swizzle")
        box[-1] = contig
    elif (box[-1] * elem_size) % 16:
        raise ValueError(f"block {tuple(block_shape)}: the inner box dimension is "
                         f"{box[-1] * elem_size} bytes; TMA needs a multiple of 16 bytes")
    return tuple(box)


def _check_box(box: Sequence[int], elem_size: int, swizzle_bytes: int) -> str | None:
    """Why a TMA box is illegal, or None. Rules of cuTensorMapEncodeTiled."""
    for b in box:
        if not 1 <= b <= 256:
            return f"box dimensions must be in 1..256, got box {tuple(box)}"
    inner = box[-1] * elem_size
    if swizzle_bytes and inner > swizzle_bytes:
        return (f"the inner box dimension is {inner} bytes, more than the {swizzle_bytes}-byte "
                f"swizzle width (box {tuple(box)})")
    if inner % 16:
        return f"the inner box dimension is {inner} bytes; TMA needs a multiple of 16 (box {tuple(box)})"
    return None


def _check_tma_tensor(ptr: int, shape: Sequence[int], strides: Sequence[int], elem_size: int) -> str | None:
    """Why a global tensor cannot be described by a TMA descriptor, or None.

    cuTensorMapEncodeTiled needs a 16-byte aligned base, a unit last stride, every other stride a
    multiple of 16 bytes (and < 2**40 bytes), and each dimension in 1..2**32; our kernels also
    take each dimension as an i32 parameter.
    """
    if ptr % 16:
        return (f"has base address {ptr:#x}, not 16-byte aligned (TMA needs a 16-byte aligned base; "
                f"a view with a storage offset? pass .contiguous() or an aligned slice)")
    if strides[-1] != 1:
        return (f"has last stride {strides[-1]} (shape {tuple(shape)}, strides {tuple(strides)}); "
                f"TMA needs the last dimension contiguous (stride 1)")
    for i, s in enumerate(strides[:-1]):
        nbytes = s * elem_size
        if nbytes % 16 or nbytes <= 0:
            return (f"has stride {s} elements = {nbytes} bytes in dimension {i} (shape {tuple(shape)}, "
                    f"strides {tuple(strides)}); TMA needs every stride but the last to be a "
                    f"positive multiple of 16 bytes")
        if nbytes >= 2**40:
            return f"has stride {nbytes} bytes in dimension {i}; TMA needs strides below 2**40 bytes"
    for i, d in enumerate(shape):
        if not 1 <= d < 2**31:
            return (f"has size {d} in dimension {i} (shape {tuple(shape)}); a TMA descriptor needs "
                    f"every dimension in 1..2**31-1")
    return None


class _LRU:
    """A small thread-safe LRU of filled CUtensorMaps.

    A CUtensorMap encodes only (address, shape, strides, dtype, box, swizzle, padding), so a
    cached one is valid for any later tensor with the same key, even after the original was freed
    and its memory reused.
    """

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._d: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key):
        with self._lock:
            v = self._d.get(key)
            if v is None:
                self.misses += 1
                return None
            self._d.move_to_end(key)
            self.hits += 1
            return v

    def put(self, key, value):
        with self._lock:
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > self.maxsize:
                self._d.popitem(last=False)

    def clear(self):
        with self._lock:
            self._d.clear()
            self.hits = self.misses = 0

    def __len__(self):
        return len(self._d)


_DESC_CACHE = _LRU(1024)


def clear_descriptor_cache() -> None:
    """Drop every cached CUtensorMap (tests; or after changing the device)."""
    _DESC_CACHE.clear()


def descriptor_cache_info() -> dict:
    """Size and hit/miss counts of the descriptor cache."""
    return {"size": len(_DESC_CACHE), "maxsize": _DESC_CACHE.maxsize,
            "hits": _DESC_CACHE.hits, "misses": _DESC_CACHE.misses}


def _tensor_dtype_name(t: Any) -> str | None:
    """Our dtype name of a tensor-like object, or None if it does not say."""
    dt = getattr(t, "dtype", None)
    if dt is None:
        return None
    try:
        return _canon_dtype(dt)
    except ValueError:
        return None


class TensorDescriptor:
    """A validated TMA descriptor request: a GPU tensor, the tile a kernel moves, its swizzle.

    Made by :func:`make_tensor_descriptor`. The CUtensorMap itself is filled lazily at the first
    launch (so creating one never touches the GPU) and shared through the descriptor LRU. Keeps a
    reference to the tensor so its memory stays alive while the descriptor does.
    """

    __slots__ = ("tensor", "ptr", "shape", "strides", "dtype", "elem_size", "block_shape",
                 "swizzle_bytes", "box", "padding", "device_index", "is_cuda")

    def __init__(self, tensor, ptr, shape, strides, dtype, block_shape, swizzle_bytes, box,
                 padding, device_index, is_cuda):
        self.tensor = tensor
        self.ptr = ptr
        self.shape = shape
        self.strides = strides
        self.dtype = dtype
        self.elem_size = _DTYPES[dtype][0]
        self.block_shape = block_shape
        self.swizzle_bytes = swizzle_bytes
        self.box = box
        self.padding = padding
        self.device_index = device_index
        self.is_cuda = is_cuda

    def __repr__(self):
        return (f"TensorDescriptor(dtype={self.dtype}, shape={self.shape}, strides={self.strides}, "
                f"block_shape={self.block_shape}, box={self.box}, swizzle_bytes={self.swizzle_bytes})")


def make_tensor_descriptor(tensor: Any, block_shape: Sequence[int], swizzle_bytes: int,
                           *, padding: str = "zero") -> TensorDescriptor:
    """Describe ``tensor`` for a kernel that moves ``block_shape`` tiles with TMA.

    Shape and strides come from the tensor (a torch tensor: ``.shape``, ``.stride()``). Checks the
    TMA rules now (16-byte aligned base, unit last stride, other strides multiples of 16 bytes,
    legal box for the swizzle) and raises :class:`LaunchError` naming what is wrong. ``padding``
    is "zero" or "nan" (value of out-of-bounds elements on loads; "nan" for floats only).
    """
    torch = _torch()
    if torch is None or not isinstance(tensor, torch.Tensor):
        raise LaunchError(f"make_tensor_descriptor needs a torch tensor, got {type(tensor).__name__}")
    dtype = _canon_dtype(tensor.dtype)
    elem_size = _DTYPES[dtype][0]
    block_shape = tuple(int(b) for b in block_shape)
    shape = tuple(tensor.shape)
    strides = tuple(tensor.stride())
    if swizzle_bytes not in _SWIZZLE_MODE:
        raise LaunchError(f"swizzle_bytes must be 0, 32, 64 or 128, got {swizzle_bytes!r}")
    if len(block_shape) != len(shape):
        raise LaunchError(f"tensor of shape {shape} (rank {len(shape)}) cannot be tiled by "
                          f"block {block_shape} (rank {len(block_shape)})")
    if not 1 <= len(shape) <= 5:
        raise LaunchError(f"TMA supports tensors of rank 1..5, got shape {shape}")
    if padding not in ("zero", "nan"):
        raise LaunchError(f"padding must be 'zero' or 'nan', got {padding!r}")
    if padding == "nan" and _DTYPES[dtype][1] != "float":
        raise LaunchError(f"padding 'nan' needs a floating-point tensor, got {dtype}")
    try:
        box = tma_box_shape(block_shape, elem_size, swizzle_bytes)
    except ValueError as e:
        raise LaunchError(f"tensor descriptor: {e}") from None
    problem = _check_box(box, elem_size, swizzle_bytes)
    if problem is None:
        problem = _check_tma_tensor(tensor.data_ptr(), shape, strides, elem_size)
    if problem is not None:
        raise LaunchError(f"tensor descriptor: the tensor {problem}")
    return TensorDescriptor(tensor, tensor.data_ptr(), shape, strides, dtype, block_shape,
                            swizzle_bytes, box, padding, tensor.get_device(), tensor.is_cuda)


# --------------------------------------------------------------------------------------------
# signature parsing
# --------------------------------------------------------------------------------------------

def parse_ttgir_signature(ttgir: str) -> list[tuple[str, str, int]]:
    """``[(name, mlir_type, divisibility), ...]`` of the entry function of a TTGIR text.

    ``divisibility`` is the ``tt.divisibility`` the kernel was compiled to assume (1 if none):
    the launcher refuses values that break it, which would otherwise give silently wrong results.
    """
    from .backend.triton_compile import ttgir_arguments
    return [(name, ty, int(attrs.get("tt.divisibility", 1)))
            for name, ty, attrs in (ttgir_arguments(ttgir) or [])]


_TENSORDESC_RE = re.compile(r"!tt\.tensordesc<\s*tensor<([0-9x]+)x([A-Za-z0-9]+)")
_PTR_RE = re.compile(r"!tt\.ptr<\s*([A-Za-z0-9]+)")


def _parse_mlir_type(ty: str):
    """('pointer', elem) | ('tensordesc', (block, elem)) | ('scalar', name) | (None, ty)."""
    ty = ty.strip()
    m = _TENSORDESC_RE.match(ty)
    if m:
        return "tensordesc", (tuple(int(x) for x in m.group(1).split("x")), _MLIR_ELEM.get(m.group(2)))
    m = _PTR_RE.match(ty)
    if m:
        return "pointer", _MLIR_ELEM.get(m.group(1))
    if ty.startswith("*"):   # triton's IRSource spelling: *f16, *fp16, *bf16, ...
        elem = ty[1:]
        if elem in _MLIR_ELEM:
            return "pointer", _MLIR_ELEM[elem]
        try:
            return "pointer", _canon_dtype(elem)
        except ValueError:
            return "pointer", None
    if ty in _MLIR_ELEM:
        return "scalar", _MLIR_ELEM[ty]
    return None, ty


def _compatible(ours: str, theirs: str | None) -> bool:
    """Is our dtype carried by the binary's (signless MLIR) type? i32 carries i32 and u32."""
    if theirs is None:
        return False
    if ours == theirs:
        return True
    a, b = _DTYPES[ours], _DTYPES[theirs]
    return a[0] == b[0] and a[1] in ("int", "uint") and b[1] in ("int", "uint")


# --------------------------------------------------------------------------------------------
# GPU backend (the only part that touches CUDA)
# --------------------------------------------------------------------------------------------

class _CudaBackend:
    """Launches through triton 3.6's driver; everything GPU-side lives here.

    Tests substitute an object with the same methods (``device_type = "cpu"``) to exercise the
    whole launch path without a GPU.
    """

    device_type = "cuda"

    def check_available(self, kernel: str) -> None:
        torch = _torch()
        if torch is None:
            raise LaunchError(f"cannot launch {kernel}: torch is not installed")
        if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
            raise LaunchError(f"cannot launch {kernel}: no CUDA device is available "
                              f"(torch.cuda.is_available() is False; torch {torch.__version__})")

    def current_device(self) -> int:
        return _torch().cuda.current_device()

    def device_context(self, device: int):
        return _torch().cuda.device(device)

    def current_stream(self, device: int) -> int:
        torch = _torch()
        try:
            return torch._C._cuda_getCurrentRawStream(device)
        except AttributeError:  # pragma: no cover
            return torch.cuda.current_stream(device).cuda_stream

    def capability(self, device: int) -> tuple[int, int]:
        return _torch().cuda.get_device_capability(device)

    def max_shared(self, device: int) -> int:
        import triton
        return triton.runtime.driver.active.utils.get_device_properties(device)["max_shared_mem"]

    def load(self, name: str, cubin: bytes, shared: int, device: int):
        """(function handle, max threads per block) of the cubin loaded on ``device``."""
        import triton
        with self.device_context(device):
            _mod, function, _n_regs, _n_spills, max_threads = \
                triton.runtime.driver.active.utils.load_binary(name, cubin, shared, device)
        return function, max_threads

    def make_launcher(self, launch_types: list[str], meta: SimpleNamespace):
        """Triton's generated C launcher for our expanded signature (compiled once, cached)."""
        import triton  # noqa: F401  (initialises the active driver)
        from triton.backends.nvidia.driver import CudaLauncher
        src = SimpleNamespace(signature={i: t for i, t in enumerate(launch_types)}, constants={})
        return CudaLauncher(src, meta)

    def fill_tma_descriptor(self, ptr, swizzle_mode, elem_size, host_elem_type, box, shape,
                            strides, padding):
        import triton
        return triton.runtime.driver.active.utils.fill_tma_descriptor(
            ptr, swizzle_mode, elem_size, host_elem_type, list(box), list(shape), list(strides), padding)

    _knobs_runtime = None

    def launch_hooks(self):
        """triton's launch enter/exit hooks (profilers such as proton set them)."""
        rt = self._knobs_runtime
        if rt is None:
            from triton import knobs
            rt = self._knobs_runtime = knobs.runtime
        return rt.launch_enter_hook, rt.launch_exit_hook


_DEFAULT_BACKEND = _CudaBackend()


# --------------------------------------------------------------------------------------------
# Launcher
# --------------------------------------------------------------------------------------------

_PTR, _INT, _FLOAT, _BOOL, _DESC = range(5)


class _ArgPlan:
    """Everything about one parameter that does not depend on the call's value."""

    __slots__ = ("index", "spec", "name", "kind", "dtype", "torch_dtype", "rank", "contig", "div16",
                 "lo", "hi", "fmax", "elem_size", "block", "box", "swizzle_bytes", "swizzle_mode",
                 "host_elem_type", "fp4_padded", "where")


class Launcher:
    """Launch one compiled kernel with Python values.

    ``binary`` is the compile layer's ``Binary`` (``asm["cubin"]``, ``metadata`` with
    ``gluon_signature``, ``num_warps``, ``shared``, optional ``tensordesc_meta``); ``args`` one
    :class:`ArgSpec` per kernel parameter, in order; ``kernel_name`` and ``source`` name the
    kernel in error messages. ``backend`` is for tests (a fake that launches nothing).

    Construction checks the ArgSpecs against the binary's signature (a mismatch is a bug in the
    caller, better found before the first launch) and precomputes per-argument plans; it never
    touches the GPU. The binary is loaded, and triton's C launcher built, lazily per device.
    """

    def __init__(self, binary: Any, args: Sequence[ArgSpec], *, kernel_name: str,
                 source: str | None = None, backend: Any = None):
        self.binary = binary
        self.args = list(args)
        self.kernel_name = kernel_name
        self.source = source
        self._backend = backend if backend is not None else _DEFAULT_BACKEND
        md = getattr(binary, "metadata", {}) or {}
        if hasattr(md, "_asdict"):
            md = md._asdict()
        self.metadata = md
        target = getattr(binary, "target", None) or md.get("target")
        backend_name = target[0] if isinstance(target, (tuple, list)) else getattr(target, "backend", "cuda")
        if isinstance(target, dict):
            backend_name = target.get("backend", "cuda")
        if backend_name != "cuda":
            raise LaunchError(f"{self._kname()}: the runtime launches CUDA binaries only; this one "
                              f"targets {target}")
        self.function_name = md.get("name") or getattr(binary, "name", kernel_name)
        self.num_warps = int(getattr(binary, "num_warps", None) or md["num_warps"])
        shared = getattr(binary, "shared_bytes", None)
        self.shared_bytes = int(shared if shared is not None else md.get("shared", 0) or 0)
        self.num_ctas = int(md.get("num_ctas", 1) or 1)
        self._plans, self.launch_types = self._build_plans(md)
        self._nargs = len(self._plans)
        self._names = tuple(p.name for p in self._plans)
        self._packed_metadata = (self.num_warps, self.num_ctas, self.shared_bytes)
        self._launch_meta_ns = SimpleNamespace(
            num_ctas=self.num_ctas, tensordesc_meta=None,
            global_scratch_size=md.get("global_scratch_size") or 0,
            global_scratch_align=md.get("global_scratch_align") or 1,
            profile_scratch_size=md.get("profile_scratch_size") or 0,
            profile_scratch_align=md.get("profile_scratch_align") or 1,
            launch_cooperative_grid=bool(md.get("launch_cooperative_grid", False)),
            launch_pdl=bool(md.get("launch_pdl", False)))
        self._functions: dict[int, int] = {}
        self._c_launcher = None
        self._lock = threading.Lock()
        torch = _torch()
        self._Tensor = torch.Tensor if torch is not None else _NoTensor
        self._want_cuda = self._backend.device_type == "cuda"

    # ---- construction helpers ----------------------------------------------------------------

    def _kname(self) -> str:
        return f"{self.kernel_name} ({self.source})" if self.source else self.kernel_name

    def _signature(self, md: dict) -> list[tuple[str, str, int]] | None:
        """The binary's parameters as (name, type, divisibility), or None if unknown.

        From ``metadata["gluon_signature"]`` (the compile layer writes ``[{"name", "type",
        "attrs"}]``; ``[[name, type], ...]`` is accepted too), else from the binary's TTGIR text.
        The divisibility comes from ``attrs["tt.divisibility"]``, or the TTGIR text.
        """
        asm = getattr(self.binary, "asm", None) or {}
        ttgir = asm.get("ttgir") if hasattr(asm, "get") else None
        parsed = parse_ttgir_signature(ttgir) if isinstance(ttgir, str) else []
        sig = md.get("gluon_signature")
        if not sig:
            return parsed or None
        out = []
        for i, entry in enumerate(sig):
            if isinstance(entry, dict):
                name, ty = entry.get("name", f"arg{i}"), entry["type"]
                div = (entry.get("attrs") or {}).get("tt.divisibility")
            else:
                name, ty = entry[0], entry[1]
                div = None
            if div is None:
                div = parsed[i][2] if len(parsed) == len(sig) else 1
            out.append((str(name), str(ty), int(div)))
        return out

    def _build_plans(self, md: dict):
        sig = self._signature(md)
        td_meta = md.get("tensordesc_meta") or None
        plans: list[_ArgPlan] = []
        launch_types: list[str] = []
        pos = 0
        n_desc = 0
        for i, spec in enumerate(self.args):
            p = _ArgPlan()
            p.index, p.spec, p.name, p.dtype = i, spec, spec.name, spec.dtype
            p.where = f" ({spec.source})" if spec.source else ""
            p.torch_dtype = _torch_dtype(spec.dtype)
            p.rank, p.contig, p.div16 = spec.rank, spec.needs_contiguous, False
            p.elem_size = _DTYPES[spec.dtype][0]
            p.block = p.box = None
            p.swizzle_bytes = spec.swizzle_bytes
            entry = None
            if sig is not None:
                if pos >= len(sig):
                    raise LaunchError(f"{self._kname()}: the binary has {len(sig)} parameters, fewer "
                                      f"than the ArgSpecs need (at argument '{spec.name}')")
                entry = sig[pos]
                skind, sval = _parse_mlir_type(entry[1])
                if skind != spec.kind:
                    raise LaunchError(f"{self._kname()}: argument '{spec.name}' is declared {spec.kind} "
                                      f"{spec.dtype}, but the binary's parameter {pos} "
                                      f"('{entry[0]}') has type {entry[1]}")
            if spec.kind == "pointer":
                p.kind = _PTR
                if entry is not None:
                    if not _compatible(spec.dtype, sval):
                        raise LaunchError(f"{self._kname()}: argument '{spec.name}' is declared a "
                                          f"pointer to {spec.dtype}, but the binary's parameter is "
                                          f"{entry[1]}")
                    p.div16 = entry[2] % 16 == 0
                launch_types.append("*" + (_DTYPES[spec.dtype][3] or "i8"))
                pos += 1
            elif spec.kind == "scalar":
                cls = _DTYPES[spec.dtype][1]
                p.kind = _FLOAT if cls == "float" else _BOOL if cls == "bool" else _INT
                if entry is not None:
                    if not _compatible(spec.dtype, sval):
                        raise LaunchError(f"{self._kname()}: argument '{spec.name}' is declared a "
                                          f"{spec.dtype} scalar, but the binary's parameter is {entry[1]}")
                    p.div16 = p.kind == _INT and entry[2] % 16 == 0
                if p.kind == _FLOAT:
                    p.fmax = _FLOAT_MAX[spec.dtype]
                    p.lo = p.hi = None
                else:
                    p.lo, p.hi = _int_range(spec.dtype)
                    p.fmax = None
                launch_types.append(_DTYPES[spec.dtype][3])
                pos += 1
            else:
                p.kind = _DESC
                block = spec.block_shape
                if entry is not None:
                    sblock, selem = sval
                    if not _compatible(spec.dtype, selem):
                        raise LaunchError(f"{self._kname()}: argument '{spec.name}' is declared a "
                                          f"{spec.dtype} tensor descriptor, but the binary's "
                                          f"parameter is {entry[1]}")
                    if block is not None and tuple(block) != sblock:
                        raise LaunchError(f"{self._kname()}: argument '{spec.name}' is declared with "
                                          f"block_shape {tuple(block)}, but the binary's descriptor "
                                          f"moves {sblock} tiles")
                    block = sblock
                if block is None:
                    raise LaunchError(f"{self._kname()}: tensordesc argument '{spec.name}' needs a "
                                      f"block_shape (the tile the kernel loads/stores)")
                rank = len(block)
                if spec.rank is not None and spec.rank != rank:
                    raise LaunchError(f"{self._kname()}: argument '{spec.name}' has rank {spec.rank} "
                                      f"but block_shape {tuple(block)}")
                p.block, p.rank = tuple(block), rank
                meta = td_meta[n_desc] if td_meta and n_desc < len(td_meta) else None
                n_desc += 1
                self._plan_tma(p, spec, meta)
                if entry is not None:
                    tail = [t for (_, t, _) in sig[pos + 1: pos + 1 + 2 * rank]]
                    if tail != ["i32"] * rank + ["i64"] * rank:
                        raise LaunchError(f"{self._kname()}: tensor descriptor '{spec.name}' must be "
                                          f"followed in the binary's signature by {rank} i32 (shape) "
                                          f"and {rank} i64 (strides) parameters, found {tail}")
                launch_types += ["nvTmaDesc"] + ["i32"] * rank + ["i64"] * rank
                pos += 1 + 2 * rank
            plans.append(p)
        if sig is not None and pos != len(sig):
            extra = ", ".join(f"{n}: {t}" for (n, t, _) in sig[pos:])
            raise LaunchError(f"{self._kname()}: the binary has {len(sig)} parameters but the "
                              f"ArgSpecs cover {pos}; unmatched: {extra}")
        return plans, launch_types

    def _plan_tma(self, p: _ArgPlan, spec: ArgSpec, meta: dict | None) -> None:
        """Swizzle, element type and box of a descriptor: the binary's metadata when it has them
        (it knows what the kernel's TMA instructions assume), else triton's rule from the spec."""
        dev_elem = _DTYPES[spec.dtype][4]
        p.fp4_padded = False
        if meta is not None:
            mode = int(meta["swizzle"])
            if mode not in _SWIZZLE_BYTES:
                raise LaunchError(f"{self._kname()}: argument '{spec.name}': unknown TMA swizzle "
                                  f"mode {mode} in the binary's metadata")
            if _SWIZZLE_BYTES[mode] != spec.swizzle_bytes:
                raise LaunchError(f"{self._kname()}: argument '{spec.name}' is declared with "
                                  f"{spec.swizzle_bytes}-byte swizzle, but the binary's descriptor "
                                  f"uses {_SWIZZLE_BYTES[mode]}-byte swizzle")
            if int(meta["elem_size"]) != p.elem_size:
                raise LaunchError(f"{self._kname()}: argument '{spec.name}' ({spec.dtype}, "
                                  f"{p.elem_size} bytes) but the binary's descriptor has "
                                  f"{meta['elem_size']}-byte elements")
            p.box = tuple(int(b) for b in meta["block_size"])
            dev_elem = int(meta["elem_type"])
            p.fp4_padded = bool(meta.get("fp4_padded", False))
        else:
            try:
                p.box = tma_box_shape(p.block, p.elem_size, spec.swizzle_bytes)
            except ValueError as e:
                raise LaunchError(f"argument '{spec.name}' of {self._kname()}{p.where}: {e}") from None
        if len(p.box) != len(p.block):
            raise LaunchError(f"{self._kname()}: argument '{spec.name}': box {p.box} and block "
                              f"{p.block} differ in rank")
        problem = _check_box(p.box, p.elem_size, spec.swizzle_bytes)
        if problem is not None:
            raise LaunchError(f"argument '{spec.name}' of {self._kname()}{p.where}: {problem}")
        p.swizzle_mode = _SWIZZLE_MODE[spec.swizzle_bytes]
        p.host_elem_type = _TMA_DTYPE_DEVICE_TO_HOST[dev_elem]

    # ---- errors ------------------------------------------------------------------------------

    def _fail(self, p: _ArgPlan, problem: str) -> LaunchError:
        return LaunchError(f"argument '{p.name}'{p.where} of {self._kname()} {problem}")

    def _describe(self, v: Any) -> str:
        if isinstance(v, self._Tensor):
            return f"a tensor of dtype {v.dtype} and shape {tuple(v.shape)} on {v.device}"
        r = repr(v)
        return f"{type(v).__name__} {r if len(r) < 60 else r[:57] + '...'}"

    def _device_problem(self, p: _ArgPlan, v: Any) -> LaunchError:
        dev = v.device
        if dev.type == "cpu":
            return self._fail(p, f"is a CPU tensor; move it to the GPU: {p.name}.cuda()")
        return self._fail(p, f"is a tensor on {dev}; the kernel runs on a {self._backend.device_type} "
                             f"device: {p.name}.to('{self._backend.device_type}')")

    def _check_tensor(self, p: _ArgPlan, v: Any, dev: int | None) -> int:
        """Validate a torch tensor argument; return its device index."""
        if v.is_cuda is not self._want_cuda:
            if self._want_cuda or v.device.type != self._backend.device_type:
                raise self._device_problem(p, v)
        if v.dtype is not p.torch_dtype:
            raise self._fail(p, f"has dtype {v.dtype}, but the kernel needs {p.dtype}"
                                f"{f' ({p.torch_dtype})' if p.torch_dtype is not None else ''}")
        if p.rank is not None and v.dim() != p.rank:
            raise self._fail(p, f"has rank {v.dim()} (shape {tuple(v.shape)}), but the kernel "
                                f"needs rank {p.rank}")
        d = v.get_device()
        if dev is not None and d != dev:
            raise self._fail(p, f"is on {v.device}, but an earlier argument is on "
                                f"{self._backend.device_type}:{dev}; all tensors of one launch "
                                f"must be on one device")
        return d

    # ---- the call ----------------------------------------------------------------------------

    def __call__(self, grid, *args, stream=None, **constexprs_for_grid_fn):
        """Launch on ``grid`` with ``args`` (one per ArgSpec, in order).

        ``grid`` is a tuple of 1-3 ints, or a callable taking a dict of the arguments by name
        (plus ``constexprs_for_grid_fn``) and returning such a tuple. ``stream`` is a raw
        ``CUstream`` int or a ``torch.cuda.Stream``; None means the current torch stream of the
        arguments' device. Every argument is validated before the GPU is touched.
        """
        plans = self._plans
        if len(args) != self._nargs:
            raise LaunchError(f"{self._kname()} takes {self._nargs} arguments "
                              f"({', '.join(self._names)}), got {len(args)}")
        flat: list = []
        pending = None   # descriptors to fill once everything is validated
        dev = None
        Tensor = self._Tensor
        for p, v in zip(plans, args):
            kind = p.kind
            if kind == _PTR:
                if isinstance(v, Tensor):
                    dev = self._check_tensor(p, v, dev)
                    if p.contig and not v.is_contiguous():
                        raise self._fail(p, f"is not contiguous (shape {tuple(v.shape)}, strides "
                                            f"{tuple(v.stride())}), but the kernel assumes a dense "
                                            f"row-major layout; pass {p.name}.contiguous()")
                    ptr = v.data_ptr()
                else:
                    ptr = self._pointer_slow(p, v)
                if p.div16 and ptr & 15:
                    raise self._fail(p, f"has address {ptr:#x}, not 16-byte aligned, but this binary "
                                        f"was specialized for a 16-byte aligned pointer "
                                        f"(tt.divisibility = 16); recompile for this alignment")
                flat.append(ptr)
            elif kind == _INT:
                if type(v) is not int:
                    v = self._int_slow(p, v)
                if v < p.lo or v > p.hi:
                    raise self._fail(p, f"is {v}, outside the range of {p.dtype} [{p.lo}, {p.hi}]")
                if p.div16 and v % 16:
                    raise self._fail(p, f"is {v}, not a multiple of 16, but this binary was "
                                        f"specialized for a multiple of 16 (tt.divisibility = 16)")
                flat.append(v)
            elif kind == _FLOAT:
                if type(v) is not float:
                    v = self._float_slow(p, v)
                if abs(v) > p.fmax and v == v and not math.isinf(v):
                    raise self._fail(p, f"is {v!r}, beyond the largest finite {p.dtype} "
                                        f"({p.fmax!r})")
                flat.append(v)
            elif kind == _BOOL:
                if v is True or v is False:
                    flat.append(int(v))
                else:
                    flat.append(self._bool_slow(p, v))
            else:
                dev, cumap, key, shape, strides = self._descriptor(p, v, dev)
                if cumap is None:
                    if pending is None:
                        pending = []
                    pending.append((len(flat), key))
                flat.append(cumap)
                flat += shape
                flat += strides

        if callable(grid):
            meta = dict(zip(self._names, args))
            if constexprs_for_grid_fn:
                meta.update(constexprs_for_grid_fn)
            grid = grid(meta)
        g0, g1, g2 = self._grid(grid)
        if stream is not None and type(stream) is not int:
            stream = self._stream_slow(stream)

        # ---- validated: from here on the GPU is touched ----
        backend = self._backend
        if dev is None or dev < 0:
            if self._want_cuda:
                backend.check_available(self._kname())
            dev = backend.current_device()
        function = self._functions.get(dev)
        if function is None:
            function = self._load(dev)
        if pending is not None:
            self._fill(pending, flat)
        if stream is None:
            stream = backend.current_stream(dev)
        if g0 * g1 * g2 == 0:
            return None
        enter, exit_ = backend.launch_hooks()
        launch_md = None
        if enter is not None:
            launch_md = self._launch_metadata(function, stream)
        if dev != backend.current_device():
            with backend.device_context(dev):
                self._c_launcher(g0, g1, g2, stream, function, self._packed_metadata, launch_md,
                                 enter, exit_, *flat)
        else:
            self._c_launcher(g0, g1, g2, stream, function, self._packed_metadata, launch_md,
                             enter, exit_, *flat)
        return None

    # ---- slow paths (rare types, errors) -----------------------------------------------------

    def _pointer_slow(self, p: _ArgPlan, v: Any) -> int:
        """Pointer args that are not torch tensors: raw ints, None, __cuda_array_interface__
        objects (numba, cupy), or any object with data_ptr() (and optionally dtype/shape)."""
        if v is None:
            return 0
        if isinstance(v, int) and not isinstance(v, bool):
            if v < 0 or v >= 2**64:
                raise self._fail(p, f"is {v}, not a valid device address")
            return v
        cai = getattr(v, "__cuda_array_interface__", None)
        if cai is not None:
            typestr = str(cai.get("typestr", ""))
            got = _TYPESTR.get(typestr[1:])
            # kinds the typestr cannot spell (bf16, fp8 are 'V2'/'V1'): compare element sizes only
            size = int(typestr[2:]) if typestr[2:].isdigit() else None
            if (got is not None and got != p.dtype) or (got is None and size != p.elem_size):
                raise self._fail(p, f"has __cuda_array_interface__ typestr {typestr!r}, but the "
                                    f"kernel needs {p.dtype}")
            shape = tuple(cai.get("shape", ()))
            if p.rank is not None and len(shape) != p.rank:
                raise self._fail(p, f"has rank {len(shape)} (shape {shape}), but the kernel needs "
                                    f"rank {p.rank}")
            strides = cai.get("strides")
            if p.contig and strides is not None:
                expect, acc = [], p.elem_size
                for d in reversed(shape):
                    expect.append(acc)
                    acc *= d
                if tuple(strides) != tuple(reversed(expect)) and math.prod(shape) > 1:
                    raise self._fail(p, f"is not contiguous (shape {shape}, byte strides "
                                        f"{tuple(strides)}), but the kernel assumes a dense "
                                        f"row-major layout")
            return int(cai["data"][0])
        dp = getattr(v, "data_ptr", None)
        if dp is not None:
            dev = getattr(v, "device", None)
            dtype = getattr(dev, "type", dev)
            if isinstance(dtype, str) and dtype == "cpu" and self._want_cuda:
                raise self._fail(p, f"is on the CPU; move it to the GPU: {p.name}.cuda()")
            got = _tensor_dtype_name(v)
            if got is not None and got != p.dtype:
                raise self._fail(p, f"has dtype {got}, but the kernel needs {p.dtype}")
            shape = getattr(v, "shape", None)
            if p.rank is not None and shape is not None and len(shape) != p.rank:
                raise self._fail(p, f"has rank {len(shape)}, but the kernel needs rank {p.rank}")
            return int(dp())
        raise self._fail(p, f"got {self._describe(v)}; a pointer argument needs a GPU tensor "
                            f"(torch.Tensor, an object with data_ptr() or __cuda_array_interface__)")

    def _scalar_value(self, p: _ArgPlan, v: Any):
        if isinstance(v, self._Tensor):
            raise self._fail(p, f"got {self._describe(v)}; a scalar argument needs a Python number "
                                f"(use {p.name}.item(), which synchronizes)")
        item = getattr(v, "item", None)  # numpy scalars
        if item is not None and not isinstance(v, (int, float)):
            try:
                v = item()
            except (TypeError, ValueError):
                pass
        return v

    def _int_slow(self, p: _ArgPlan, v: Any) -> int:
        v = self._scalar_value(p, v)
        if isinstance(v, float):
            raise self._fail(p, f"got float {v!r}, but the kernel needs an integer ({p.dtype})")
        try:
            return operator.index(v)
        except TypeError:
            raise self._fail(p, f"got {self._describe(v)}, but the kernel needs an integer "
                                f"({p.dtype})") from None

    def _float_slow(self, p: _ArgPlan, v: Any) -> float:
        v = self._scalar_value(p, v)
        if isinstance(v, (int, float)):
            return float(v)
        raise self._fail(p, f"got {self._describe(v)}, but the kernel needs a number ({p.dtype})")

    def _bool_slow(self, p: _ArgPlan, v: Any) -> int:
        v = self._scalar_value(p, v)
        if isinstance(v, int) and v in (0, 1):
            return int(v)
        raise self._fail(p, f"got {self._describe(v)}, but the kernel needs a bool (i1)")

    def _descriptor(self, p: _ArgPlan, v: Any, dev: int | None):
        """(device, cached CUtensorMap or None, cache key, shape, strides) of a tensordesc
        argument; validated unless a cached descriptor already proves the key legal."""
        if isinstance(v, TensorDescriptor):
            if v.dtype != p.dtype:
                raise self._fail(p, f"is a descriptor of {v.dtype}, but the kernel needs {p.dtype}")
            if v.block_shape != p.block or v.swizzle_bytes != p.swizzle_bytes:
                raise self._fail(p, f"is a descriptor for block {v.block_shape} with "
                                    f"{v.swizzle_bytes}-byte swizzle, but the kernel moves "
                                    f"{p.block} tiles with {p.swizzle_bytes}-byte swizzle")
            if v.is_cuda is not self._want_cuda and self._want_cuda:
                raise self._fail(p, f"is a descriptor of a CPU tensor; build it from "
                                    f"{p.name}.cuda()")
            d = v.device_index
            if dev is not None and d != dev:
                raise self._fail(p, f"describes a tensor on device {d}, but an earlier argument is "
                                    f"on device {dev}")
            ptr, shape, strides, padding = v.ptr, v.shape, v.strides, 1 if v.padding == "nan" else 0
            validated = True
        elif isinstance(v, self._Tensor):
            d = self._check_tensor(p, v, dev)
            ptr, shape, strides, padding = v.data_ptr(), tuple(v.shape), tuple(v.stride()), 0
            validated = False
        else:
            raise self._fail(p, f"got {self._describe(v)}; a tensor-descriptor argument needs a "
                                f"GPU tensor or a gluon.runtime.TensorDescriptor")
        if p.fp4_padded:
            shape = shape[:-1] + (shape[-1] * 2,)
        key = (ptr, shape, strides, p.dtype, p.box, p.swizzle_mode, padding, p.host_elem_type)
        cumap = _DESC_CACHE.get(key)
        if cumap is None and not validated:
            problem = _check_tma_tensor(ptr, shape, strides, p.elem_size)
            if problem is not None:
                raise self._fail(p, problem)
        return d, cumap, key, shape, strides

    def _fill(self, pending: list, flat: list) -> None:
        """Fill the CUtensorMaps of cache misses (after validation, so errors come first)."""
        backend = self._backend
        for pos, key in pending:
            ptr, shape, strides, _dtype, box, swizzle_mode, padding, host_elem = key
            cumap = backend.fill_tma_descriptor(ptr, swizzle_mode, _DTYPES[_dtype][0], host_elem,
                                                box, shape, strides, padding)
            _DESC_CACHE.put(key, cumap)
            flat[pos] = cumap

    def _grid(self, grid) -> tuple[int, int, int]:
        if type(grid) is tuple and len(grid) == 3 and type(grid[0]) is int and type(grid[1]) is int \
                and type(grid[2]) is int:
            g = grid
        else:
            if isinstance(grid, int):
                grid = (grid,)
            try:
                g = tuple(operator.index(x) for x in grid)
            except TypeError:
                raise LaunchError(f"{self._kname()}: grid must be a tuple of 1-3 ints (or a callable "
                                  f"returning one), got {grid!r}") from None
            if not 1 <= len(g) <= 3:
                raise LaunchError(f"{self._kname()}: grid must have 1-3 dimensions, got {grid!r}")
            g = g + (1,) * (3 - len(g))
        for i in range(3):
            if not 0 <= g[i] <= _GRID_MAX[i]:
                raise LaunchError(f"{self._kname()}: grid {g} is out of range: dimension {'xyz'[i]} "
                                  f"must be in 0..{_GRID_MAX[i]}")
        return g

    def _stream_slow(self, stream) -> int:
        s = getattr(stream, "cuda_stream", None)
        if s is None:
            try:
                return operator.index(stream)
            except TypeError:
                raise LaunchError(f"{self._kname()}: stream must be a CUstream int or a "
                                  f"torch.cuda.Stream, got {stream!r}") from None
        return int(s)

    def _launch_metadata(self, function, stream):
        from triton.compiler.compiler import LazyDict
        return LazyDict({"name": self.function_name, "function": function, "stream": stream})

    def _load(self, dev: int):
        """Load the cubin on ``dev`` (first launch there), with clear errors for mismatches."""
        backend = self._backend
        with self._lock:
            if dev in self._functions:
                return self._functions[dev]
            if self._want_cuda:
                backend.check_available(self._kname())
            target = getattr(self.binary, "target", None) or self.metadata.get("target")
            arch = target[1] if isinstance(target, (tuple, list)) else getattr(target, "arch", None)
            if isinstance(target, dict):
                arch = target.get("arch")
            if arch is not None and self._want_cuda:
                major, minor = backend.capability(dev)
                cap, arch = major * 10 + minor, int(arch)
                ok = cap == arch if arch >= 90 else (cap // 10 == arch // 10 and cap >= arch)
                if not ok:
                    raise LaunchError(f"{self._kname()} was compiled for sm_{arch}, but device {dev} "
                                      f"is sm_{cap}; compile it for this GPU")
                max_shared = backend.max_shared(dev)
                if self.shared_bytes > max_shared:
                    raise LaunchError(f"{self._kname()} needs {self.shared_bytes} bytes of shared "
                                      f"memory; device {dev} allows {max_shared}")
            cubin = self.binary.asm["cubin"]
            function, max_threads = backend.load(self.function_name, cubin, self.shared_bytes, dev)
            if max_threads and self.num_warps * 32 > max_threads:
                raise LaunchError(f"{self._kname()} launches {self.num_warps} warps "
                                  f"({self.num_warps * 32} threads), but the loaded function allows "
                                  f"{max_threads} threads per block (too many registers per thread?)")
            if self._c_launcher is None:
                self._c_launcher = backend.make_launcher(self.launch_types, self._launch_meta_ns)
            self._functions[dev] = function
            return function

    # ---- introspection -----------------------------------------------------------------------

    def specialization_key(self, *values) -> tuple:
        """:func:`specialization_key` of this launcher's ArgSpecs."""
        return specialization_key(self.args, values)

    def __repr__(self):
        return (f"Launcher({self.kernel_name}, args=[{', '.join(self._names)}], "
                f"num_warps={self.num_warps}, shared={self.shared_bytes})")


class _NoTensor:  # isinstance() target when torch is missing: matches nothing
    pass
