"""The lowered kernel's ABI, read off its IR: one typed `KernelParam` per parameter, in TTGIR order.

The lowering prints the TTGIR signature from the same IR parameters (pointers, scalars, and each TMA
descriptor followed by its shape and strides), so the two agree by construction; the compile step checks
the TMA boxes against what Triton's TMA code assumes.
"""
from __future__ import annotations

from ...abi import KernelABI, KernelParam, ParamKind
from ...arch import tma_box_shape
from ...ir import DescType, GluonError, Kernel, PointerType, ScalarType
from ..ptx import OPT_IN as OPT_IN_PTX_PASSES     # the passes a kernel asks for with gl.set_<name>() (kernel attrs)
from ..sass_passes import OPT_IN as OPT_IN_SASS_PASSES


def kernel_abi(kernel: Kernel, multicast: set[int]) -> KernelABI:
    """The ABI of `kernel` (layouts assigned, passes run); `multicast`: the descriptor parameters (value ids)
    whose TMA loads multicast, as the lowering's tma_load rule found them."""
    row_major = set(kernel.attrs.get("row_major_params", ()))
    params = []
    for p in kernel.params:
        t = p.value.type
        loc = str(p.loc) if p.loc else None
        common = dict(name=p.name, dtype=t.dtype, source=p.source, loc=loc)
        if isinstance(t, PointerType):
            params.append(KernelParam(kind=ParamKind.POINTER, divisibility=p.divisibility,
                                      needs_contiguous=p.name in row_major, **common))
        elif isinstance(t, ScalarType):
            params.append(KernelParam(kind=ParamKind.SCALAR, divisibility=p.divisibility if t.dtype.is_int else 1,
                                      **common))
        elif isinstance(t, DescType):
            try:
                box = tma_box_shape(t.block_shape, t.dtype.bytes, t.swizzle.bytes)
            except ValueError as e:
                raise GluonError(f"parameter {p.name}: {e}", p.loc or kernel.loc) from None
            params.append(KernelParam(kind=ParamKind.TENSORDESC, block_shape=tuple(t.block_shape),
                                      swizzle_bytes=t.swizzle.bytes, box=box, multicast=p.value.id in multicast,
                                      **common))
        else:
            raise GluonError(f"parameter {p.name} has type {t}, which cannot be passed from the host", p.loc)
    for name, value in getattr(kernel, "constexprs", {}).items():
        params.append(KernelParam(name=name, kind=ParamKind.CONSTEXPR, value=value))
    return KernelABI(name=kernel.name, target=kernel.arch.target, params=tuple(params),
                     num_ctas=int(kernel.attrs.get("num_ctas", 1)),
                     ptx_passes=tuple(n for n in OPT_IN_PTX_PASSES if kernel.attrs.get(n)),
                     loc=str(kernel.loc) if kernel.loc else None,
                     launch_pdl=bool(kernel.attrs.get("launch_pdl", False)),
                     ctas_per_sm=int(kernel.attrs.get("ctas_per_sm", 1)),
                     sass_passes=tuple(n for n in OPT_IN_SASS_PASSES if kernel.attrs.get(n)))
