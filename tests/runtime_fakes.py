"""Fakes for the runtime's tests that need no GPU: a backend that records what the Launcher would do on a GPU
(`FakeBackend`, `DirectBackend`, `NoGPU`), CPU tensors that say they live on a GPU (`cuda_like`), and the ABIs and
binaries of two sample kernels. Shared by tests/test_runtime.py and the launch-path tests beside it."""
from __future__ import annotations

import contextlib
import pathlib
from types import SimpleNamespace

import pytest
import torch

from gluon.abi import KernelABI, KernelParam, ParamKind
from gluon.dtypes import DType
from gluon.runtime import Launcher, tma_box_shape

SHARED = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "ttgir"
DATA = pathlib.Path(__file__).resolve().parent / "data" / "ttgir"


def ttgir_path(name: str) -> pathlib.Path:
    for d in (DATA, SHARED):
        if (d / name).exists():
            return d / name
    pytest.skip(f"{name} not found in tests/data/ttgir or shared/ttgir")


class FakeBackend:
    """Records what the Launcher would do on a GPU."""

    def __init__(self, device_type="cpu", max_threads=1024, capability=(9, 0), max_shared=232448,
                 current=0):
        self.device_type = device_type
        self.calls = []
        self.fills = []
        self.loads = []
        self.launcher_types = None
        self.launcher_meta = None
        self.max_threads = max_threads
        self.cap = capability
        self.max_shared_mem = max_shared
        self.current = current
        self.contexts = []
        self.hooks = (None, None)

    def check_available(self, kernel):
        pass

    def current_device(self):
        return self.current

    def device_context(self, device):
        self.contexts.append(device)
        return contextlib.nullcontext()

    def current_stream(self, device):
        return 1000 + max(device, 0)

    def capturing(self):
        return False

    def capability(self, device):
        return self.cap

    def max_shared(self, device):
        return self.max_shared_mem

    def load(self, name, cubin, shared, device):
        self.loads.append((name, shared, device))
        return 0xF00 + max(device, 0), self.max_threads

    def make_launcher(self, launch_types, meta):
        self.launcher_types = list(launch_types)
        self.launcher_meta = meta

        def launch(*a):
            self.calls.append(a)
        return launch

    def fill_tma_descriptor(self, *a):
        self.fills.append(a)
        return ("CUtensorMap", a)

    def launch_hooks(self):
        return self.hooks


class NoGPU:
    """A backend that fails the test if anything GPU-side is reached."""

    device_type = "cuda"

    def __getattr__(self, name):
        raise AssertionError(f"touched the GPU backend ({name}) before validation finished")


class _CudaLike(torch.Tensor):
    """A CPU tensor that says it lives on cuda:<_dev> (slices and views keep the class)."""

    _dev = 0

    @property
    def is_cuda(self):
        return True

    @property
    def device(self):
        return torch.device("cuda", self._dev)

    def get_device(self):
        return self._dev


def cuda_like(t, dev=0):
    cls = _CudaLike if dev == 0 else type(f"_CudaLike{dev}", (_CudaLike,), {"_dev": dev})
    return t.as_subclass(cls)


def param(name, kind, dtype, *, block_shape=None, swizzle_bytes=0, source=None, **kw):
    """A KernelParam the way the lowering writes one (descriptors get their TMA box by the one rule)."""
    dt = DType.from_name(dtype)
    box = tma_box_shape(block_shape, dt.bytes, swizzle_bytes) if block_shape is not None else None
    return KernelParam(name, ParamKind(kind), dt, block_shape=block_shape, swizzle_bytes=swizzle_bytes, box=box,
                       loc=source, **kw)


def abi(params, name="k", source=None, target=("cuda", 90, 32)):
    return KernelABI(name, target, tuple(params), loc=source)


def fake_binary(*, num_warps=4, shared=1024, name="k", target=("cuda", 90, 32)):
    md = {"name": name, "num_warps": num_warps, "num_ctas": 1, "shared": shared,
          "global_scratch_size": 0, "global_scratch_align": 1, "profile_scratch_size": 0,
          "profile_scratch_align": 1, "launch_cooperative_grid": False, "launch_pdl": False}
    return SimpleNamespace(name=name, target=target, key="k", path=None, asm={"cubin": b"\0"}, metadata=md,
                           num_warps=num_warps, shared_bytes=shared)


COPY_ARGS = [param("src", "pointer", "f16", rank=1, source="copy.py:3"),
             param("dst", "pointer", "f16", rank=1, needs_contiguous=True, source="copy.py:3"),
             param("n", "scalar", "i32", source="copy.py:3")]
COPY_ABI = abi(COPY_ARGS, "copy_kernel", "copy.py:2")

TMA_ARGS = [param("a_desc", "tensordesc", "f16", block_shape=(128, 64), swizzle_bytes=128),
            param("b_desc", "tensordesc", "f16", block_shape=(64, 128), swizzle_bytes=128),
            param("c_desc", "tensordesc", "f16", block_shape=(128, 128), swizzle_bytes=128),
            param("K", "scalar", "i32")]
TMA_ABI = abi(TMA_ARGS, "tma_wgmma_kernel")


def copy_launcher(backend=None, params=COPY_ARGS, **kw):
    return Launcher(fake_binary(**kw), abi(params, "copy_kernel", "copy.py:2"), backend=backend or FakeBackend())


def tma_inputs(M=256, N=256, K=512):
    return (torch.randn(M, K).half(), torch.randn(K, N).half(), torch.empty(M, N).half())


class DirectBackend(FakeBackend):
    """A backend whose launcher has no scratch: the Launcher calls the 'C function' itself."""

    def direct_launch(self, launcher):
        def c_fn(*a):
            self.calls.append(("direct",) + a)
        return c_fn, False, False
