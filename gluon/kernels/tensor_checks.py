"""Checks of the torch tensors a kernel's host function is given, in one wording for every kernel."""
from __future__ import annotations

import gluon.runtime.cuda as _cuda
from gluon.ir import GluonError


def on_the_launch_device(kernel: str, **tensors) -> None:
    """One GluonError naming the first tensor that is not on the device type the runtime launches on (a CPU
    tensor, say: not torch's error from deep inside), or the tensors when they lie on different devices."""
    want = _cuda.DEFAULT_BACKEND.device_type
    for name, t in tensors.items():
        if t.device.type != want:
            raise GluonError(f"{kernel}: {name} is on {t.device}; the kernel runs on a {want.upper()} device "
                             "(move it with .cuda())")
    if len({t.device for t in tensors.values()}) > 1:
        *first, last = tensors
        raise GluonError(f"{kernel}: {', '.join(first)} and {last} must be on one device, got "
                         f"{', '.join(str(t.device) for t in tensors.values())}")
