"""Datasheet peaks of the GPUs the report knows, by the device name a results row carries.

`gluon report` judges each best row against the peaks of the GPU that measured it (a row timed on an H100 is
not a fraction of the H200's 4.8 TB/s). The numbers are NVIDIA's dense tensor-core rates (no sparsity) and HBM
bandwidths; fp8 inputs get twice the 16-bit rate. A device the table does not know, and the dry run's model
rows, use the H200 SXM's (what the model assumes); the report says which sheet each row used.
"""
from __future__ import annotations

from dataclasses import dataclass

from .template import H200_PEAK_BW, H200_PEAK_FLOPS


@dataclass(frozen=True)
class Datasheet:
    """One GPU's peaks: dense 16-bit tensor-core flop/s and memory bytes/s."""
    name: str
    flops_16bit: float
    bytes_per_s: float

    def flops(self, dtype: str | None) -> float:
        """The tensor-core peak for inputs of `dtype` (a tuner name: fp8 kinds twice the 16-bit rate)."""
        return self.flops_16bit * (2 if str(dtype).startswith("fp8") else 1)

    def balance(self, dtype: str | None) -> float:
        """Flop per byte where the compute and bandwidth limits meet."""
        return self.flops(dtype) / self.bytes_per_s


H200_SXM = Datasheet("H200 SXM", H200_PEAK_FLOPS, H200_PEAK_BW)
# (a substring of torch's device name, its sheet), the more specific names first
_SHEETS = (
    ("H200 NVL", Datasheet("H200 NVL", 835e12, 4.8e12)),
    ("H200", H200_SXM),
    ("H100 NVL", Datasheet("H100 NVL", 835e12, 3.9e12)),
    ("H100 PCIe", Datasheet("H100 PCIe", 756e12, 2.0e12)),
    ("H100", Datasheet("H100 SXM", 989e12, 3.35e12)),
)


#: every sheet by its name (the report's `datasheet` field)
BY_NAME = {sheet.name: sheet for _, sheet in _SHEETS}


def datasheet(device: str | None) -> Datasheet:
    """The sheet for a row's `device` name ("NVIDIA H100 80GB HBM3", ...); the H200 SXM's for one the table does
    not know."""
    name = str(device or "")
    return next((sheet for key, sheet in _SHEETS if key in name), H200_SXM)
