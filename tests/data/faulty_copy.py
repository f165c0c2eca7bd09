"""A copy template with injected faults, for the tuner's GPU fault tests (tests/test_gpu_tuning.py,
spec tests/data/faulty_copy.toml).

It is the real copy template of examples/copy_kernel.py (same inputs, reference, check, baseline and
models) with one more parameter, FAULT:

* "none":  the real SIMT copy kernel of examples/copy_kernel.py, untouched: an exact copy.
* "wrong": `faulty_copy_kernel` writes src + 1 into every 97th element and src elsewhere: every element
           is written (no NaN left), but the error is far above rtol * max|src| -> wrong_result.
* "oob":   `faulty_copy_kernel` stores every element OOB_BYTES = 2**47 bytes past its place. A CUDA
           device pointer is a UVA address inside the host's 47-bit user address space, so base + 2**47
           lies in [2**47, 2**48): above every user-space mapping of the process (so not even HMM/ATS
           can resolve it to host memory) and still inside the GPU's 49-bit virtual address space, where
           nothing is mapped: the store faults (cudaErrorIllegalAddress), the worker's synchronize raises
           or the process dies -> runtime_error.

The template's seed config (measured first by a fresh study) is an "oob" one, so the study meets the
fault at trial 0 and every later trial shows that it went on.
"""
from pathlib import Path

import gluon
import gluon.language as gl
from gluon.tuning.template import dtype_name, element_size, gluon_dtype, import_file

# the real copy template, loaded the way spec resolution loads it (one module per file)
_copy = import_file(Path(__file__).resolve().parents[2] / "examples" / "copy_kernel.py")

FAULTS = ("none", "oob", "wrong")
OOB_BYTES = 1 << 47


@gluon.jit
def faulty_copy_kernel(dst_ptr, src_ptr, n_elements, XBLOCK: gl.constexpr, FAULT: gl.constexpr,
                       OOB: gl.constexpr):
    """The SIMT copy of examples/copy_kernel.py with a fault: "wrong" adds 1 to every 97th element;
    "oob" stores every element OOB elements (OOB_BYTES bytes) past where it belongs."""
    idx = gl.program_id(0) * XBLOCK + gl.thread_id(0)
    if idx < n_elements:
        x = src_ptr[idx]
        if FAULT == "oob":
            dst_ptr[idx.to(gl.int64) + OOB] = x
        else:
            dst_ptr[idx] = gl.where(idx % 97 == 0, x + 1.0, x)


class _FaultyCopyTuning(_copy._CopyTuning):
    """`faulty_copy`: XBLOCK, NUM_WARPS (the SIMT copy's) and FAULT (none | oob | wrong)."""

    name = "faulty_copy"
    params = ("XBLOCK", "NUM_WARPS", "FAULT")

    @staticmethod
    def _fault(config) -> str:
        fault = config.get("FAULT", "none")
        if fault not in FAULTS:
            raise gluon.GluonError(f"FAULT must be one of {', '.join(FAULTS)}, not {fault!r}")
        return fault

    @staticmethod
    def _oob_elements(dtype) -> int:
        return OOB_BYTES // element_size(dtype)

    def trace(self, config, shape, dtype, arch):
        fault = self._fault(config)
        if fault == "none":
            return super().trace(config, shape, dtype, arch)
        from gluon.language import PointerArg, ScalarArg
        xblock, nw = self._settings(config)[:2]
        (n,) = shape
        dt = gluon_dtype(dtype)
        # the stand-ins the launch makes (as in the copy template), so the launch hits the disk cache
        args = (PointerArg(dt, 16), PointerArg(dt, 16),
                ScalarArg(gl.int32 if -2**31 <= n < 2**31 else gl.int64, 16 if n % 16 == 0 else 1))
        return faulty_copy_kernel.trace(*args, arch=arch, num_warps=nw, block=(xblock,), XBLOCK=xblock, FAULT=fault,
                                        OOB=self._oob_elements(dtype))

    def run(self, inputs, config):
        fault = self._fault(config)
        if fault == "none":
            return super().run(inputs, config)
        xblock, nw = self._settings(config)[:2]
        src, out = inputs["src"], inputs["out"]
        n = src.numel()
        faulty_copy_kernel[(gl.cdiv(n, xblock),), (xblock,)](out, src, n, XBLOCK=xblock, FAULT=fault,
                                                             OOB=self._oob_elements(dtype_name(src.dtype)),
                                                             num_warps=nw)

    def seed_configs(self):
        """The fault first: a fresh study measures this before anything else."""
        return [{"XBLOCK": 1024, "NUM_WARPS": 4, "FAULT": "oob"}]


TUNING = _FaultyCopyTuning()
