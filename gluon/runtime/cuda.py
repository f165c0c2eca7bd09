"""The only part of the runtime that touches CUDA: Triton 3.6's driver, behind a small interface.

Tests substitute an object with the same methods (``device_type = "cpu"``) to exercise the whole
launch path without a GPU.
"""
from __future__ import annotations

from types import SimpleNamespace

from .errors import LaunchError

GRID_MAX = (2**31 - 1, 65535, 65535)    # CUDA's launch grid limits (x, y, z)


def _torch():
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is needed to launch anyway
        return None
    return torch


class CudaBackend:
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

    _get_device = None

    def current_device(self) -> int:
        get = self._get_device
        if get is not None:
            return get()
        torch = _torch()
        dev = torch.cuda.current_device()              # initializes CUDA; from then on its C getter
        self._get_device = getattr(torch._C, "_cuda_getDevice", None)   # (less its lazy-init check)
        return dev

    def device_context(self, device: int):
        return _torch().cuda.device(device)

    _get_stream = None

    def current_stream(self, device: int) -> int:
        get = self._get_stream
        if get is not None:
            return get(device)
        torch = _torch()
        get = getattr(torch._C, "_cuda_getCurrentRawStream", None)     # torch's C getter, looked up once
        if get is None:  # pragma: no cover
            return torch.cuda.current_stream(device).cuda_stream
        self._get_stream = get
        return get(device)

    def capturing(self) -> bool:
        """Whether the current stream is being captured into a CUDA graph (asked when a launch is first planned,
        not per call)."""
        return bool(_torch().cuda.is_current_stream_capturing())

    def raw_getters(self):
        """(current device, current raw stream of a device): torch's C getters themselves, for the launch
        entries of fast_call.py (a Python frame less each per call), once `current_device` / `current_stream`
        have looked them up (done here: a launch entry is built after its binary is loaded, so CUDA is up);
        else these methods."""
        if self._get_stream is None:
            self.current_stream(self.current_device())
        return (self._get_device or self.current_device, self._get_stream or self.current_stream)

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

    def max_active_clusters(self, function: int, shared: int, size: int, device: int) -> int | None:
        """How many clusters of `size` CTAs of the loaded `function` (`shared` bytes of shared memory a CTA)
        `device` holds at once: cuOccupancyMaxActiveClusters through Triton's driver, which asks it for
        128-thread CTAs (so it can only overstate a larger kernel's count). None where the driver cannot say."""
        import triton
        query = getattr(triton.runtime.driver.active.utils, "cuOccupancyMaxActiveClusters", None)
        if query is None:  # pragma: no cover - a Triton without it
            return None
        try:
            with self.device_context(device):
                n = int(query(function, shared, size))
        except Exception:  # noqa: BLE001 - a driver that cannot answer: the caller keeps its own count
            return None
        return n if n > 0 else None

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

    def direct_launch(self, launcher):
        """(the C launch function, cooperative-grid flag, PDL flag) of a `make_launcher` result whose
        kernel needs no global or profile scratch, else None: the Launcher then calls the C function
        itself, skipping CudaLauncher.__call__'s per-launch scratch bookkeeping (about 1.5 us)."""
        if getattr(launcher, "global_scratch_size", 1) or getattr(launcher, "profile_scratch_size", 1):
            return None
        fn = getattr(launcher, "launch", None)
        if fn is None:
            return None
        return fn, launcher.launch_cooperative_grid, launcher.launch_pdl

    def launch_hooks(self):
        """triton's launch enter/exit hooks (profilers such as proton set them), or (None, None) while
        neither has a hook: Triton 3.6's are HookChain objects even when empty, and passing those makes
        every launch build its metadata and call into Python twice."""
        rt = self._knobs_runtime
        if rt is None:
            from triton import knobs
            rt = self._knobs_runtime = knobs.runtime
        enter, exit_ = rt.launch_enter_hook, rt.launch_exit_hook
        if not getattr(enter, "calls", True) and not getattr(exit_, "calls", True):
            return None, None
        return enter, exit_

    _memcpy2d = None

    def row_copy(self, width: int, height: int, src_pitch: int, dst_pitch: int, stream: int):
        """A prepared device-to-device copy of `height` rows of `width` bytes, `src_pitch` / `dst_pitch` bytes
        apart, on `stream`: a function of (source address, destination address) that enqueues it by the driver's
        cuMemcpy2DAsync (cuda-python), its descriptor built here once, so a call costs two field writes and the
        driver's enqueue, where torch's `copy_` of the same rows builds a TensorIterator and launches a kernel.
        None where cuda-python's driver bindings are not installed (the caller copies with torch)."""
        drv = self._memcpy2d
        if drv is None:
            try:
                from cuda.bindings import driver as drv
            except ImportError:
                drv = False
            self._memcpy2d = drv
        if drv is False:
            return None
        desc = drv.CUDA_MEMCPY2D()
        desc.srcMemoryType = desc.dstMemoryType = drv.CUmemorytype.CU_MEMORYTYPE_DEVICE
        desc.srcPitch, desc.dstPitch, desc.WidthInBytes, desc.Height = src_pitch, dst_pitch, width, height
        enqueue, ok = drv.cuMemcpy2DAsync, drv.CUresult.CUDA_SUCCESS

        def copy(src: int, dst: int) -> None:
            desc.srcDevice = src
            desc.dstDevice = dst
            err, = enqueue(desc, stream)
            if err != ok:
                raise LaunchError(f"cuMemcpy2DAsync of {height} rows of {width} bytes (pitches {src_pitch} and "
                                  f"{dst_pitch}) failed: {err.name}")
        return copy


DEFAULT_BACKEND = CudaBackend()


_SM_COUNTS: dict[int, int] = {}


def sm_count(device: int | None) -> int:
    """Streaming multiprocessors of CUDA device `device` (None: the current one), asked once: persistent
    kernels launch one program per SM."""
    torch = _torch()
    dev = torch.cuda.current_device() if device is None else device
    n = _SM_COUNTS.get(dev)
    if n is None:
        n = _SM_COUNTS[dev] = int(torch.cuda.get_device_properties(dev).multi_processor_count)
    return n
