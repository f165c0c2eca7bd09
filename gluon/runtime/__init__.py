"""Launching compiled kernels: the last stage of the pipeline (``binary + ABI -> launch``).

`Launcher` (launcher.py) turns a Python call into a CUDA launch from a binary and its `gluon.abi`
KernelABI; `Launcher.prepare` keeps a validated launch to re-issue with new addresses (prepared.py: the
host functions' eager fast path); `make_tensor_descriptor` / `TensorDescriptor` and the CUtensorMap cache
(descriptors.py) describe tensors for TMA; cuda.py is the only module that touches the driver. The runtime knows
nothing of the IR, the DSL, specs or the tuner.
"""
from ..arch import tma_box_shape
from .descriptors import TensorDescriptor, clear_descriptor_cache, descriptor_cache_info, make_tensor_descriptor
from .errors import LaunchError
from .launcher import Launcher

__all__ = [
    "Launcher",
    "LaunchError",
    "TensorDescriptor",
    "make_tensor_descriptor",
    "tma_box_shape",
    "clear_descriptor_cache",
    "descriptor_cache_info",
]
