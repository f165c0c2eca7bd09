"""TMA descriptors on the host: what a global tensor must be for TMA, and a cache of filled CUtensorMaps.

A kernel parameter of kind `tensordesc` receives a CUtensorMap built from a tensor and the box its TMA
instructions move (`arch.tma_box_shape`, recorded in the kernel ABI). `make_tensor_descriptor` validates
a tensor ahead of the launch; the launcher validates plain tensors itself, and both share the LRU of
filled descriptors below.
"""
from __future__ import annotations

import collections
import threading
from typing import Any, Sequence

from ..arch import TMA_SWIZZLE_MODE, tma_box_problem, tma_box_shape
from ..dtypes import DType
from .errors import LaunchError


# Triton's device-side TMA element-type enum -> CUtensorMapDataType (the host enum that
# cuTensorMapEncodeTiled takes); copied from TMA_DTYPE_DEVICE_TO_HOST in triton 3.6's
# backends/nvidia/driver.py (only 8, 9, 10 differ).
TMA_DTYPE_DEVICE_TO_HOST = {i: i for i in range(16)}
TMA_DTYPE_DEVICE_TO_HOST.update({8: 10, 9: 8, 10: 9})


def check_tma_tensor(ptr: int, shape: Sequence[int], strides: Sequence[int], elem_size: int) -> str | None:
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
    """A small thread-safe cache of filled CUtensorMaps, bounded: past `maxsize` the oldest filled goes
    (first in, first out: a hit costs one dict read and no lock on the launch path; a hot descriptor
    pushed out is filled again once).

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
        v = self._d.get(key)             # one dict read: atomic under the GIL, no lock on the launch path
        if v is None:
            self.misses += 1
            return None
        self.hits += 1
        return v

    def put(self, key, value):
        with self._lock:
            self._d[key] = value
            while len(self._d) > self.maxsize:
                self._d.popitem(last=False)

    def clear(self):
        with self._lock:
            self._d.clear()
            self.hits = self.misses = 0

    def __len__(self):
        return len(self._d)


DESC_CACHE = _LRU(1024)


def clear_descriptor_cache() -> None:
    """Drop every cached CUtensorMap (tests; or after changing the device)."""
    DESC_CACHE.clear()


def descriptor_cache_info() -> dict:
    """Size and hit/miss counts of the descriptor cache."""
    return {"size": len(DESC_CACHE), "maxsize": DESC_CACHE.maxsize,
            "hits": DESC_CACHE.hits, "misses": DESC_CACHE.misses}


class TensorDescriptor:
    """A validated TMA descriptor request: a GPU tensor, the tile a kernel moves, its swizzle.

    Made by :func:`make_tensor_descriptor`. The CUtensorMap itself is filled lazily at the first
    launch (so creating one never touches the GPU) and shared through the descriptor LRU. Keeps a
    reference to the tensor so its memory stays alive while the descriptor does.
    """

    __slots__ = ("tensor", "ptr", "shape", "strides", "dtype", "elem_size", "block_shape",
                 "swizzle_bytes", "box", "padding", "device_index", "is_cuda")

    def __init__(self, tensor, ptr, shape, strides, dtype: DType, block_shape, swizzle_bytes, box,
                 padding, device_index, is_cuda):
        self.tensor = tensor
        self.ptr = ptr
        self.shape = shape
        self.strides = strides
        self.dtype = dtype
        self.elem_size = dtype.bytes
        self.block_shape = block_shape
        self.swizzle_bytes = swizzle_bytes
        self.box = box
        self.padding = padding
        self.device_index = device_index
        self.is_cuda = is_cuda

    def __repr__(self):
        return (f"TensorDescriptor(dtype={self.dtype.name}, shape={self.shape}, strides={self.strides}, "
                f"block_shape={self.block_shape}, box={self.box}, swizzle_bytes={self.swizzle_bytes})")


def make_tensor_descriptor(tensor: Any, block_shape: Sequence[int], swizzle_bytes: int,
                           *, padding: str = "zero") -> TensorDescriptor:
    """Describe ``tensor`` for a kernel that moves ``block_shape`` tiles with TMA.

    Shape and strides come from the tensor (a torch tensor: ``.shape``, ``.stride()``). Checks the
    TMA rules now (16-byte aligned base, unit last stride, other strides multiples of 16 bytes,
    legal box for the swizzle) and raises :class:`LaunchError` naming what is wrong. ``padding``
    is "zero" or "nan" (value of out-of-bounds elements on loads; "nan" for floats only).
    """
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is needed to launch anyway
        torch = None
    if torch is None or not isinstance(tensor, torch.Tensor):
        raise LaunchError(f"make_tensor_descriptor needs a torch tensor, got {type(tensor).__name__}")
    dtype = DType.from_torch(tensor.dtype)
    if dtype is None:
        raise LaunchError(f"make_tensor_descriptor: a TMA kernel cannot take a tensor of dtype {tensor.dtype}")
    block_shape = tuple(int(b) for b in block_shape)
    shape = tuple(tensor.shape)
    strides = tuple(tensor.stride())
    if swizzle_bytes not in TMA_SWIZZLE_MODE:
        raise LaunchError(f"swizzle_bytes must be 0, 32, 64 or 128, got {swizzle_bytes!r}")
    if len(block_shape) != len(shape):
        raise LaunchError(f"tensor of shape {shape} (rank {len(shape)}) cannot be tiled by "
                          f"block {block_shape} (rank {len(block_shape)})")
    if not 1 <= len(shape) <= 5:
        raise LaunchError(f"TMA supports tensors of rank 1..5, got shape {shape}")
    if padding not in ("zero", "nan"):
        raise LaunchError(f"padding must be 'zero' or 'nan', got {padding!r}")
    if padding == "nan" and not dtype.is_float:
        raise LaunchError(f"padding 'nan' needs a floating-point tensor, got {dtype.name}")
    try:
        box = tma_box_shape(block_shape, dtype.bytes, swizzle_bytes)
    except ValueError as e:
        raise LaunchError(f"tensor descriptor: {e}") from None
    problem = tma_box_problem(box, dtype.bytes, swizzle_bytes)
    if problem is None:
        problem = check_tma_tensor(tensor.data_ptr(), shape, strides, dtype.bytes)
    if problem is not None:
        raise LaunchError(f"tensor descriptor: the tensor {problem}")
    return TensorDescriptor(tensor, tensor.data_ptr(), shape, strides, dtype, block_shape,
                            swizzle_bytes, box, padding, tensor.get_device(), tensor.is_cuda)
