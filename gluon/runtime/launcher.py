"""Launch a compiled gluon kernel with torch tensors.

The runtime is the last stage of the pipeline (``binary + ABI --runtime--> launch``). It knows nothing
of the IR, the DSL, specs or the tuner: a :class:`Launcher` gets a compiled binary (its cubin and
Triton's metadata: launch warps, shared memory, CTAs per cluster, scratch sizes) and the kernel's ABI
(`gluon.abi.KernelABI`: one typed `KernelParam` per parameter, written by the lowering), and turns a
Python call into a CUDA launch.

Why our own launcher instead of ``triton.compiler.CompiledKernel.run``:

* Triton 3.6 compiling a ``.ttgir`` file leaves ``metadata.tensordesc_meta`` unset and keeps raw MLIR
  types in its signature, so its stock launcher fails on TMA descriptors. The ABI says what each
  parameter is; we build the TMA descriptors ourselves and pass each exactly as the kernel's parameter
  list spells it: ``[CUtensorMap, *shape (i32), *strides (i64)]``.
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
microseconds of Python; the common call (tensors, numbers, a tuple grid, the current device) takes a
straight-line entry written for this kernel once its binary is loaded (fast_call.py), about half that.
"""

from __future__ import annotations

import math
import operator
import threading
from types import SimpleNamespace
from typing import Any

from ..abi import KernelABI, KernelParam, ParamKind
from ..dtypes import DType
from . import cuda, fast_call
from ..arch import TMA_SWIZZLE_MODE
from .descriptors import (DESC_CACHE, TMA_DTYPE_DEVICE_TO_HOST, TensorDescriptor,
                          check_tma_tensor)
from .errors import LaunchError
from .prepared import PreparedLaunch

_GRID_MAX = cuda.GRID_MAX

_PTR, _INT, _FLOAT, _BOOL, _DESC = range(5)
_KINDS = (_PTR, _INT, _FLOAT, _BOOL, _DESC)      # in the order fast_call.build takes them


class _ArgPlan:
    """Everything about one parameter that does not depend on the call's value."""

    __slots__ = ("index", "param", "name", "kind", "dtype", "dname", "torch_dtype", "rank", "contig", "div16",
                 "lo", "hi", "fmax", "elem_size", "block", "box", "swizzle_bytes", "swizzle_mode",
                 "host_elem_type", "desc_kind", "where")


def _plan(i: int, param: KernelParam) -> _ArgPlan:
    p = _ArgPlan()
    dt: DType = param.dtype
    p.index, p.param, p.name, p.dtype, p.dname = i, param, param.name, dt, dt.name
    p.where = f" ({param.loc})" if param.loc else ""
    p.torch_dtype = dt.torch
    p.rank, p.contig = param.rank, param.needs_contiguous
    p.div16 = param.divisibility % 16 == 0
    p.elem_size = dt.bytes
    p.block = p.box = None
    p.swizzle_bytes = param.swizzle_bytes
    p.lo = p.hi = p.fmax = None
    if param.kind is ParamKind.POINTER:
        p.kind = _PTR
    elif param.kind is ParamKind.SCALAR:
        p.kind = _FLOAT if dt.is_float else _BOOL if dt.is_bool else _INT
        if p.kind == _FLOAT:
            p.fmax = dt.finite_max
        else:
            p.lo, p.hi = dt.int_range
        p.div16 = p.div16 and p.kind == _INT
    else:
        p.kind = _DESC
        p.block, p.box = param.block_shape, param.box
        p.swizzle_mode = TMA_SWIZZLE_MODE[param.swizzle_bytes]
        p.host_elem_type = TMA_DTYPE_DEVICE_TO_HOST[dt.tma_type]
        # the descriptor cache key's fixed part, of plain values (an enum hashes in Python, per launch)
        p.desc_kind = (dt.name, p.box, p.swizzle_mode, p.host_elem_type)
        p.div16 = False
    return p


class Launcher:
    """Launch one compiled kernel with Python values.

    ``binary`` is the compile layer's ``Binary`` (``asm["cubin"]``, ``metadata`` with ``name``,
    ``num_warps``, ``shared``, ``num_ctas``, the scratch sizes, ``target``) and, unless ``abi`` is given,
    its ``abi`` (`gluon.abi.KernelABI`): one `KernelParam` per parameter, in order, which names the
    kernel and its source line in error messages. ``backend`` is for tests (a fake that launches
    nothing).

    Construction precomputes per-argument plans and never touches the GPU. The binary is loaded, and
    triton's C launcher built, lazily per device.
    """

    def __init__(self, binary: Any, abi: KernelABI | None = None, *, backend: Any = None):
        self.binary = binary
        self.abi = abi if abi is not None else getattr(binary, "abi", None)
        if self.abi is None:
            raise LaunchError(f"binary {getattr(binary, 'name', '?')} has no kernel ABI (raw TTGIR compiled without "
                              "one): pass Launcher(binary, abi)")
        self.kernel_name = self.abi.name
        self.source = self.abi.loc
        self._backend = backend if backend is not None else cuda.DEFAULT_BACKEND
        md = getattr(binary, "metadata", {}) or {}
        self.metadata = md
        target = getattr(binary, "target", None) or self.abi.target
        if target[0] != "cuda":
            raise LaunchError(f"{self._kname()}: the runtime launches CUDA binaries only; this one "
                              f"targets {target[0]}:{target[1]}")
        self.target = tuple(target)
        self.function_name = md.get("name") or self.kernel_name
        self.num_warps = int(getattr(binary, "num_warps", None) or md["num_warps"])
        shared = getattr(binary, "shared_bytes", None)
        self.shared_bytes = int(shared if shared is not None else md.get("shared", 0) or 0)
        self.num_ctas = int(md.get("num_ctas", self.abi.num_ctas) or 1)
        self.args = self.abi.runtime_params
        self._plans = [_plan(i, prm) for i, prm in enumerate(self.args)]
        self.launch_types = self.abi.launch_types
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
        self._direct = None           # backend.direct_launch: (C function, cooperative, pdl) without scratch
        self._fast = None             # fast_call.build's entry for the common call, once loaded
        self._clusters: dict[tuple[int, int], int | None] = {}      # resident_clusters, by (device, size)
        self._lock = threading.Lock()
        try:
            import torch
            self._Tensor = torch.Tensor
        except ImportError:  # pragma: no cover
            self._Tensor = _NoTensor
        self._want_cuda = self._backend.device_type == "cuda"

    def _kname(self) -> str:
        return f"{self.kernel_name} ({self.source})" if self.source else self.kernel_name

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
            raise self._fail(p, f"has dtype {v.dtype}, but the kernel needs {p.dname}"
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
        """Launch on ``grid`` with ``args`` (one per runtime parameter of the ABI, in order).

        ``grid`` is a tuple of 1-3 ints, or a callable taking a dict of the arguments by name
        (plus ``constexprs_for_grid_fn``) and returning such a tuple. ``stream`` is a raw
        ``CUstream`` int or a ``torch.cuda.Stream``; None means the current torch stream of the
        arguments' device. Every argument is validated before the GPU is touched.
        """
        fast = self._fast
        if fast is not None and not constexprs_for_grid_fn:
            return fast(grid, args, stream)
        return self._general_call(grid, args, stream, constexprs_for_grid_fn)

    def _general_call(self, grid, args, stream, constexprs_for_grid_fn=None) -> None:
        """Every call `fast` (gluon/runtime/fast_call.py) does not take, and every error."""
        flat, pending, dev, g = self._validate(grid, args, constexprs_for_grid_fn)
        if stream is not None and type(stream) is not int:
            stream = self._stream_slow(stream)
        dev = self._resolve(dev, pending, flat)
        self._issue(dev, g, flat, stream)

    def prepare(self, grid, args, addressed: tuple[int, ...], keep: tuple = ()):
        """This launch validated once (`PreparedLaunch`, gluon/runtime/prepared.py), to re-issue with new
        base addresses for the arguments at positions `addressed` (tensors or descriptors): a host
        function whose own key of a call covers everything else the checks read (dtypes, shapes,
        strides, devices, scalars) launches a repeat through it. `keep`: objects the launch reads but
        the caller does not pass again (workspaces), held alive with it. Nothing is launched."""
        flat, pending, dev, g = self._validate(grid, args, {})
        dev = self._resolve(dev, pending, flat)
        starts = self._flat_starts(args)
        slots = []
        for i in addressed:
            p, pos = self._plans[i], starts[i]
            if p.kind == _DESC:                 # the descriptor cache's key but for the address
                rank = len(args[i].shape)
                padding = 1 if getattr(args[i], "padding", "zero") == "nan" else 0
                tail = (tuple(flat[pos + 1: pos + 1 + rank]), tuple(flat[pos + 1 + rank: pos + 1 + 2 * rank]), padding,
                        p.desc_kind)
                slots.append((pos, True, p, tail))
            elif p.kind == _PTR:
                slots.append((pos, p.div16, p, None))
            else:
                raise ValueError(f"argument '{p.name}' is a scalar: only pointers and descriptors take addresses")
        return PreparedLaunch(self, g, dev, flat, tuple(slots), keep)

    def _flat_starts(self, args) -> list[int]:
        """Where each (validated) argument starts in the flat launch list: a descriptor takes its
        CUtensorMap, then the tensor's shape and strides."""
        pos, out = 0, []
        for p, v in zip(self._plans, args):
            out.append(pos)
            pos += 1 + 2 * len(v.shape) if p.kind == _DESC else 1
        return out

    def _validate(self, grid, args, constexprs_for_grid_fn):
        """(flat launch arguments, descriptors still to fill, device or None, grid as 3 ints): every
        check of a launch, nothing GPU-side."""
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
                    raise self._fail(p, f"is {v}, outside the range of {p.dname} [{p.lo}, {p.hi}]")
                if p.div16 and v % 16:
                    raise self._fail(p, f"is {v}, not a multiple of 16, but this binary was "
                                        f"specialized for a multiple of 16 (tt.divisibility = 16)")
                flat.append(v)
            elif kind == _FLOAT:
                if type(v) is not float:
                    v = self._float_slow(p, v)
                if abs(v) > p.fmax and v == v and not math.isinf(v):
                    raise self._fail(p, f"is {v!r}, beyond the largest finite {p.dname} "
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
                    pending.append((len(flat), key, p))
                flat.append(cumap)
                flat += shape
                flat += strides

        if callable(grid):
            meta = dict(zip(self._names, args))
            if constexprs_for_grid_fn:
                meta.update(constexprs_for_grid_fn)
            grid = grid(meta)
        return flat, pending, dev, self._grid(grid)

    # ---- validated: from here on the GPU is touched ----

    def _resolve(self, dev: int | None, pending, flat: list) -> int:
        """The launch's device (its function loaded there) and the descriptors of cache misses filled."""
        backend = self._backend
        if dev is None or dev < 0:
            if self._want_cuda:
                backend.check_available(self._kname())
            dev = backend.current_device()
        if dev not in self._functions:
            self._load(dev)
        if pending is not None:
            self._fill(pending, flat)
        return dev

    def _issue(self, dev: int, g: tuple, flat, stream) -> None:
        """Triton's C launch of validated flat arguments on `dev` (`stream` None: its current stream)."""
        backend = self._backend
        g0, g1, g2 = g
        function = self._functions[dev]
        if stream is None:
            stream = backend.current_stream(dev)
        if g0 * g1 * g2 == 0:
            return None
        enter, exit_ = backend.launch_hooks()
        launch_md = None
        if enter is not None:
            launch_md = self._launch_metadata(function, stream)
        direct = self._direct
        if dev != backend.current_device():
            with backend.device_context(dev):
                self._c_launcher(g0, g1, g2, stream, function, self._packed_metadata, launch_md,
                                 enter, exit_, *flat)
        elif direct is not None:                 # the C function itself: no scratch to allocate
            direct[0](g0, g1, g2, stream, function, direct[1], direct[2], None, None, self._packed_metadata,
                      launch_md, enter, exit_, *flat)
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
            got = DType.from_typestr(typestr)
            # kinds the typestr cannot spell (bf16, fp8 are 'V2'/'V1'): compare element sizes only
            size = int(typestr[2:]) if typestr[2:].isdigit() else None
            if (got is not None and got != p.dtype) or (got is None and size != p.elem_size):
                raise self._fail(p, f"has __cuda_array_interface__ typestr {typestr!r}, but the "
                                    f"kernel needs {p.dname}")
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
            got = _dtype_of(v)
            if got is not None and got != p.dtype:
                raise self._fail(p, f"has dtype {got.name}, but the kernel needs {p.dname}")
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
            raise self._fail(p, f"got float {v!r}, but the kernel needs an integer ({p.dname})")
        try:
            return operator.index(v)
        except TypeError:
            raise self._fail(p, f"got {self._describe(v)}, but the kernel needs an integer "
                                f"({p.dname})") from None

    def _float_slow(self, p: _ArgPlan, v: Any) -> float:
        v = self._scalar_value(p, v)
        if isinstance(v, (int, float)):
            return float(v)
        raise self._fail(p, f"got {self._describe(v)}, but the kernel needs a number ({p.dname})")

    def _bool_slow(self, p: _ArgPlan, v: Any) -> int:
        v = self._scalar_value(p, v)
        if isinstance(v, int) and v in (0, 1):
            return int(v)
        raise self._fail(p, f"got {self._describe(v)}, but the kernel needs a bool (i1)")

    def _descriptor(self, p: _ArgPlan, v: Any, dev: int | None):
        """(device, cached CUtensorMap or None, cache key, shape, strides) of a tensordesc
        argument; validated unless a cached descriptor already proves the key legal."""
        if isinstance(v, self._Tensor):     # the common case first
            d = self._check_tensor(p, v, dev)
            ptr, shape, strides, padding = v.data_ptr(), tuple(v.shape), tuple(v.stride()), 0
            validated = False
        elif isinstance(v, TensorDescriptor):
            if v.dtype != p.dtype:
                raise self._fail(p, f"is a descriptor of {v.dtype.name}, but the kernel needs {p.dname}")
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
        else:
            raise self._fail(p, f"got {self._describe(v)}; a tensor-descriptor argument needs a "
                                f"GPU tensor or a gluon.runtime.TensorDescriptor")
        key = (ptr, shape, strides, padding, p.desc_kind)
        cumap = DESC_CACHE.get(key)
        if cumap is None and not validated:
            problem = check_tma_tensor(ptr, shape, strides, p.elem_size)
            if problem is not None:
                raise self._fail(p, problem)
        return d, cumap, key, shape, strides

    def _fill(self, pending: list, flat: list) -> None:
        """Fill the CUtensorMaps of cache misses (after validation, so errors come first)."""
        backend = self._backend
        for pos, key, p in pending:
            ptr, shape, strides, padding, _kind = key
            cumap = backend.fill_tma_descriptor(ptr, p.swizzle_mode, p.elem_size, p.host_elem_type,
                                                p.box, shape, strides, padding)
            DESC_CACHE.put(key, cumap)
            flat[pos] = cumap

    def _grid(self, grid) -> tuple[int, int, int]:
        if type(grid) is tuple and len(grid) == 1 and type(grid[0]) is int:     # the common 1-D grid
            if 0 <= grid[0] <= _GRID_MAX[0]:
                return grid[0], 1, 1
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
            if self._want_cuda:
                major, minor = backend.capability(dev)
                cap, arch = major * 10 + minor, int(self.target[1])
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
                direct = getattr(backend, "direct_launch", None)
                self._direct = direct(self._c_launcher) if direct is not None else None
            self._functions[dev] = function
            if self._fast is None:
                self._fast = fast_call.build(self, _KINDS)
            return function

    def resident_clusters(self, dev: int, size: int) -> int | None:
        """How many clusters of `size` CTAs of this kernel device `dev` holds at once (the backend's
        occupancy query, asked once per device and size; the binary is loaded for it), or None where the
        backend cannot say. A persistent kernel sizes its grid by it: a cluster that finds no room starts
        only when another ends."""
        key = (dev, size)
        if key not in self._clusters:
            query = getattr(self._backend, "max_active_clusters", None)
            self._clusters[key] = None if query is None else query(self._load(dev), self.shared_bytes, size, dev)
        return self._clusters[key]

    @property
    def loaded(self) -> bool:
        """Whether the binary is loaded on a device yet (its first launch there loads it)."""
        return bool(self._functions)

    def exact_entry(self, keys: tuple, miss):
        """A straight-line entry like `_fast` that launches only calls whose arguments have the JIT's
        specialization keys `keys` (`jit.arg_key` per argument) and returns `miss` for any other (the JIT's
        lookup takes those): None before the binary is loaded or where no straight line applies."""
        if not self.loaded:
            return None
        return fast_call.build(self, _KINDS, keys, miss)

    # ---- introspection -----------------------------------------------------------------------

    def __repr__(self):
        return (f"Launcher({self.kernel_name}, args=[{', '.join(self._names)}], "
                f"num_warps={self.num_warps}, shared={self.shared_bytes})")


class _NoTensor:  # isinstance() target when torch is missing: matches nothing
    pass


def _dtype_of(t: Any) -> DType | None:
    """Our dtype of a tensor-like object's `dtype` attribute, or None if it has none we know."""
    dt = getattr(t, "dtype", None)
    if dt is None:
        return None
    got = DType.from_torch(dt)
    if got is None:
        try:
            got = DType.from_name(dt)
        except ValueError:
            return None
    return got
