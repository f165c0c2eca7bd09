"""Checks of the torch tensors a kernel's host function is given, in one wording for every kernel, and what
a host function asks of the device (SM count, stream), answered on the CPU when the interpreter runs the
launches (GLUON_INTERPRET=1: the tensors are CPU tensors and no CUDA call may be made)."""
from __future__ import annotations

import gluon.runtime.cuda as _cuda
from gluon.ir import GluonError
from gluon.jit import _interpret_enabled

H200_SMS = 132      # the SM count a CPU launch plans with (the interpreter's stand-in for the GPU's)


def interpreting() -> bool:
    """Whether launches run in the CPU interpreter (GLUON_INTERPRET=1 / gluon.interpret.set_enabled)."""
    return _interpret_enabled()


def device_sms(device) -> int:
    """Streaming multiprocessors of `device` (a torch device or index): a CPU device's are an H200's."""
    index = getattr(device, "index", device)
    if getattr(device, "type", "cuda") == "cpu" or (index is not None and index < 0):
        return H200_SMS
    return _cuda.sm_count(index)


def stream_key(device):
    """The current stream of CUDA `device` (what per-stream buffers are kept by); None on the CPU."""
    if getattr(device, "type", "cuda") == "cpu":
        return None
    import torch
    return torch.cuda.current_stream(device).cuda_stream


def on_the_launch_device(kernel: str, **tensors) -> None:
    """One GluonError naming the first tensor that is not on the device type the runtime launches on (a CPU
    tensor, say: not torch's error from deep inside), or the tensors when they lie on different devices."""
    want = "cpu" if interpreting() else _cuda.DEFAULT_BACKEND.device_type
    for name, t in tensors.items():
        if t.device.type != want:
            if want == "cpu":
                raise GluonError(f"{kernel}: {name} is on {t.device}; with GLUON_INTERPRET=1 the kernel runs in "
                                 "the CPU interpreter, on CPU tensors (move it with .cpu())")
            raise GluonError(f"{kernel}: {name} is on {t.device}; the kernel runs on a {want.upper()} device "
                             "(move it with .cuda())")
    if len({t.device for t in tensors.values()}) > 1:
        *first, last = tensors
        raise GluonError(f"{kernel}: {', '.join(first)} and {last} must be on one device, got "
                         f"{', '.join(str(t.device) for t in tensors.values())}")
