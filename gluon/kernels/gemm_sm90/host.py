"""The SM90 GEMM's host side: `launch` on torch tensors, its plan cache, its eager fast path, split-K.

A launch of a problem it has seen costs one dict lookup (the plan: resolved config, split count, grid,
the compiled specialization) and the compiled kernel's launcher; a call seen before (the shapes, strides,
dtypes, devices and arguments) its prepared launch with the new addresses. Inputs whose strides TMA
cannot describe are copied into zero-padded aligned buffers first (padding.py), such a C is stored by
address; a split-K launch writes fp32 partials into a per-(device, stream) workspace that `splitk_reduce`
sums into C (or, with SPLITK_FIXUP, the kernel's last K slice of each element, counting arrivals in a
per-(device, stream) int32 buffer; with SPLITK_GRID, the tile's slices, meeting at its counter in another).
`compile_variant` and `stand_ins` compile the kernel without tensors (no GPU needed).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

import gluon.language as gl
from gluon.dtypes import DType
from gluon.ir import GluonError
from gluon.jit import jit
from gluon.language.kernel import ScalarArg
from gluon.passes.common import kib
import gluon.runtime.cuda as _cuda
from gluon.runtime.cuda import sm_count
from gluon.types import SharedMemoryError, TensorRef

from ..config_checks import (NOT_KEYED, fast_config_key, in_config_terms, past_the_shared_memory, plan_config_key,
                             stage_bytes, stages_that_fit)
from ..tensor_checks import device_sms, interpreting, on_the_launch_device
from .block_scaled import block_scaled_overrides
from .config import (CLUSTER_K_SIZES, DEFAULT_CONFIG, SPLITK_GRID_SIZES, GemmConfig, by_address, stores_by_address,
                     to_config)
from .geometry import grid, num_warps, split_k, tiles, units
from .picks import resolve_config
from .kernel import gemm_sm90, gemm_sm90_copying
from .padding import PadPlan, kernel_copies, pad_plan, row_pitch, tma_ready

_WORKSPACE: dict[tuple, object] = {}    # (device, stream or None, "w" | "cnt") -> buffer
_PADS: dict[tuple, PadPlan] = {}       # a call's key (`_fast_key`) -> padded buffers of operands TMA cannot take
_PLANS: dict[tuple, "_Plan"] = {}
_FAST: dict[tuple, tuple] = {}          # a repeated call's key -> its prepared launches (see `_fast_key`)
_FAST_MAX = 256


@jit
def splitk_reduce(c_ptr, w_ptr, numel, SPLITS: gl.constexpr, XBLOCK: gl.constexpr, WAIT: gl.constexpr = False):
    """c = sum over the SPLITS fp32 partial products in w (split-major), cast to c's dtype. SPLITS a constant:
    the loop unrolled, so every slice's loads are in flight at once (a runtime count kept two). WAIT (the
    config's PDL): launched as a programmatic dependent of the GEMM, it waits there for the partials."""
    if WAIT:
        gl.griddep_wait()
    idx = gl.program_id(0) * XBLOCK + gl.thread_id(0)
    if idx < numel:
        acc = w_ptr[idx]
        for s in gl.static_range(1, SPLITS):
            acc = acc + w_ptr[s * numel + idx]
        c_ptr[idx] = acc


def _reduce_kw(splits: int, pdl: bool) -> dict:
    """splitk_reduce's constants for `splits` slices (1024 elements a program, 8 warps: 4 a thread), launched
    as a programmatic dependent with `pdl` (GemmConfig.PDL)."""
    return dict(SPLITS=splits, XBLOCK=1024, num_warps=8, WAIT=pdl)


@dataclass
class _Plan:
    """What a launch of one problem needs besides the operands (see `_plan`)."""
    bound: object                   # gemm_sm90[grid] (gemm_sm90_copying's where `copies`)
    dev: int
    splits: int
    kw: dict                        # the constexprs (CFG, B_KMAJOR, N_MULTIPLE_16) and num_warps
    fixup: bool = False             # split-K partials summed in the kernel (CFG.SPLITK_FIXUP), no second pass
    meet: int = 0                   # with CFG.SPLITK_GRID, the tiles whose slices meet at a counter each
    meet_asked: bool = False        # ... and the caller asked for it (else `_fit_grid` may fall back to two passes)
    reduce_kw: dict | None = None   # the second pass's constants (`_reduce_kw`); None where there is none (no
                                    # split, SPLITK_FIXUP, or the cluster's CTAs sum the slices: CFG.CLUSTER_K)
    ck: object = None               # the compiled specialization, after the first launch
    fitted: bool = False            # the grid checked against the clusters the device holds (`_fit_grid`)
    unused: tuple | None = None     # (W, CNT) stand-ins where the kernel reads neither (no split-K), once fetched
    copies: bool = False            # the kernel copies A or B into its padded buffer (COPY_A, COPY_B in kw)


def launch(a, b, c, config: GemmConfig | Mapping | None = None, b_kmajor: bool = False, splits: int | None = None,
           compiled=None, scale_a=None, scale_b=None):
    """c = a @ b with the persistent kernel (b is [K, N], or [N, K] when b_kmajor). `choose_config` picks
    the tiles by problem size; `config` is a dict overriding any of its fields, or a whole GemmConfig.
    `splits` overrides the split-K heuristic (1 disables it). `compiled`: the kernel already compiled for
    this config (a gluon.jit.CompiledKernel, e.g. the one the tuner's pool built), launched instead of
    specializing here.

    An input whose strides TMA cannot describe (a row of K or N elements that is not a multiple of
    16 bytes, or a misaligned base) is copied into a zero-padded aligned buffer first (padding.py; kept
    per device, stream and shape, so repeated calls allocate nothing; the others are used as given):
    exact, but it costs a copy, so aligned inputs are the fast path. A contiguous C with such rows is
    stored by address (a "coalesced" or "direct" epilogue) without a copy, unless `config` names a TMA
    epilogue ("tma", "tma2", "ring"): then it is padded too, as is a strided one.

    fp8 inputs (float8_e4m3fn / float8_e5m2, one for both) take B K-major (`b_kmajor`: the tensor cores
    read 8-bit operands only so) and fp32 dequantization scales `scale_a`, `scale_b`: one element each
    (per tensor), M and N elements (per row of A, per column of B), as torch._scaled_mm takes them, or
    per block as DeepSeek's DeepGEMM: scale_a [M, ceil(K/128)] (a row of A per 128 of K; contiguous, or
    M-major as torch._scaled_mm's blockwise scaling and DeepGEMM take it), scale_b [ceil(N/128),
    ceil(K/128)] (128 x 128 blocks of B), each block's product summed in fp32;
    C = (scale_a * A) @ (scale_b * B) accumulated in fp32, rounded once to C's dtype."""
    fast_key = _fast_key(a, b, c, config, b_kmajor, splits, compiled, scale_a, scale_b)
    if fast_key is not None:
        if _launched_fast(fast_key, a, b, c, scale_a, scale_b):
            return c
        pad = _PADS.get(fast_key)
        if pad is not None:         # a call padded before (checked then): the copies, then the padded launch
            return pad.launch(_launch_padded, a, b, c, scale_b, config=config, b_kmajor=b_kmajor, splits=splits,
                              compiled=compiled, scale_a=scale_a)
    _check_call(a, b, c, b_kmajor, config, splits)
    return _launch(a, b, c, config, b_kmajor, splits, compiled, scale_a, scale_b, fast_key)


def _launch_padded(a, b, c, config=None, b_kmajor=False, splits=None, compiled=None, scale_a=None, scale_b=None,
                   key=None):
    """`launch` of a PadPlan's operands, whose extents may run past each other (the kernel takes K from A
    and N from C; TMA reads zeros past an operand's own): as `launch`, but for its check of the shapes. `key`:
    these operands' `_fast_key`, where the PadPlan keeps it."""
    fast_key = key if key is not None else _fast_key(a, b, c, config, b_kmajor, splits, compiled, scale_a, scale_b)
    if fast_key is not None and _launched_fast(fast_key, a, b, c, scale_a, scale_b):
        return c
    return _launch(a, b, c, config, b_kmajor, splits, compiled, scale_a, scale_b, fast_key)


def _kernel_may_copy(a, compiled) -> bool:
    """Whether this call's unaligned operands may be copied by the GEMM kernel itself (one launch): not by a caller's
    `compiled` gemm_sm90 (which takes no copy arguments), in the interpreter or off the GPU, nor in a launch first
    planned while its stream is captured into a CUDA graph: replays pay no host time, and there the driver's copy
    (a memcpy node) costs less GPU time than the kernel's loads and grid meeting; nor is a meeting counter then made
    inside a capture (zeroed only by the graph's replays). Asked once per call key (the stream is in it)."""
    return (compiled is None and not interpreting() and a.get_device() >= 0
            and not _cuda.DEFAULT_BACKEND.capturing())


def _copied_first(pad: PadPlan, a, b, c, config, b_kmajor, splits, compiled, scale_a, scale_b, fast_key):
    """The caller's operands copied into `pad`'s buffers (C out of its own after), then the padded launch; the
    PadPlan kept by the call's key, so a repeat goes from launch's lookup straight to it."""
    if fast_key is not None:
        pa, pb, pc, psb = pad.operands(a, b, c, scale_b)
        pad = replace(pad, launch_key=_fast_key(pa, pb, pc, config, b_kmajor, splits, compiled, scale_a, psb))
        _keep(_PADS, fast_key, pad)
    return pad.launch(_launch_padded, a, b, c, scale_b, config=config, b_kmajor=b_kmajor, splits=splits,
                      compiled=compiled, scale_a=scale_a)


def _launched_fast(fast_key, a, b, c, scale_a, scale_b) -> bool:
    """Whether the call went out by the launch kept for its key (a call checked and planned before). One made
    on the GPU is not taken once the interpreter is on."""
    fast = _FAST.get(fast_key)
    return fast is not None and not interpreting() and _fast_launch(fast, a, b, c, scale_a, scale_b, fast_key[-1])


def _launch(a, b, c, config, b_kmajor: bool, splits, compiled, scale_a, scale_b, fast_key, copies=None):
    """`launch` past its fast path, for a checked call (`_check_call`): padding, the plan, the launch. `copies`:
    (PadPlan, the caller's a or None, its b or None) where a and b are padded buffers the kernel copies those
    into (`kernel_copies`); the host copies them instead where the plan's kernel cannot (`_Plan.copies`)."""
    scale = "none" if scale_a is None and scale_b is None else _scale_mode(a, b, c, scale_a, scale_b)
    if not c.numel():               # nothing to write (M or N is 0)
        return c
    if not a.shape[1]:              # K = 0: an empty sum
        return c.zero_()
    if a.element_size() == 1 and not b_kmajor:
        raise GluonError("gemm: 8-bit inputs need B K-major: pass b as [N, K] rows (nn.Linear's weight) with "
                         "b_kmajor=True; WGMMA reads 8-bit operands K-major only")
    sa, sb = a.stride(), b.stride()
    c_tma = tma_ready(c)
    # a C TMA cannot store (rows off 16 bytes) but plain stores can: the kernel stores it by address
    c_addr = not c_tma and c.is_contiguous() and stores_by_address(config)
    if not (tma_ready(a, sa) and tma_ready(b, sb) and (c_tma or c_addr)):
        stream = fast_key[-1] if fast_key is not None else _stream_of(a)
        pad = pad_plan(a, b, c, scale_b, stream, pad_c=not c_addr, row_copy=_row_copy_on(a, stream))
        srcs = kernel_copies(pad, a, b) if _kernel_may_copy(a, compiled) else None
        if srcs is not None:        # (its prepared launch kept by fast_key)
            pa, pb = pad.operands(a, b, c, scale_b)[:2]
            return _launch(pa, pb, c, config, b_kmajor, splits, compiled, scale_a, scale_b, fast_key, (pad, *srcs))
        return _copied_first(pad, a, b, c, config, b_kmajor, splits, compiled, scale_a, scale_b, fast_key)
    M, N = c.shape
    K = a.shape[1]
    es = a.element_size()
    aligned = sa[0] * es % 128 == 0 and sb[0] * es % 128 == 0
    # everything the plan and the kernel's specialization depend on (the operands are TMA-ready, so
    # 16-byte aligned): repeated launches of one problem take the cached compiled kernel directly
    # (the device, not its index: a CPU and a meta tensor share -1; and whether the interpreter runs it: a plan made
    # there holds its binary, and a cached plan skips the device check)
    # (a launch whose kernel copies an operand: which, and what its specialization assumes of the sources)
    ck_key = None if copies is None else tuple(None if t is None else (t.data_ptr() % 16 == 0, row_pitch(t) % 16 == 0)
                                               for t in copies[1:])
    plan_key = (a.device, M, N, K, a.dtype, b.dtype, c.dtype, b_kmajor, splits, aligned, scale, c_addr,
                plan_config_key(config, DEFAULT_CONFIG),
                interpreting(), ck_key)
    plan = _PLANS.get(plan_key)
    if plan is None:
        on_the_launch_device("gemm", a=a, b=b, c=c)     # when a problem is first seen: no per-call cost
        plan = _PLANS[plan_key] = _plan(a, c, M, N, K, config, b_kmajor, splits, aligned, scale, c_addr,
                                        ck_key is not None and ck_key[0] is not None,
                                        ck_key is not None and ck_key[1] is not None)
    if copies is not None and not plan.copies:      # this config's kernel cannot copy them: copied first
        pad, a_src, b_src = copies
        return _copied_first(pad, a if a_src is None else a_src, b if b_src is None else b_src, c, config, b_kmajor,
                             splits, compiled, scale_a, scale_b, fast_key)
    S = plan.splits
    if S > 1:                       # one fp32 workspace per (device, stream): same-stream launches run in order
        stream = _stream_of(a)
        w = _workspace((plan.dev, stream), S * M * N, a.device)
        if plan.meet:               # counters that grow by a whole unit a launch: never shared with the fixup's
            cnt = _workspace((plan.dev, stream, "meet"), max(plan.meet, 16), a.device, counters=True)
        else:
            cnt = _workspace((plan.dev, stream if plan.fixup else None), M * N if plan.fixup else 16, a.device,
                             counters=True)
    else:                           # unused by the kernel when S == 1: fetched once per plan
        if plan.unused is None:
            plan.unused = (_workspace((plan.dev, None), 16, a.device),
                           _workspace((plan.dev, None), 16, a.device, counters=True))
        w, cnt = plan.unused
    if scale == "none":             # unused by the kernel: any fp32 buffer
        scale_a = scale_b = w
    elif scale == "block_m":        # M-major: its transpose is contiguous, [KB, M], at the same address
        scale_a = scale_a.t()
    ck = compiled
    if ck is not None and N % 16 and ck.abi.constexprs.get("N_MULTIPLE_16"):
        raise GluonError(f"gemm: the compiled kernel passed was compiled with N_MULTIPLE_16=True (rows of C a multiple "
                         f"of 16 elements), but C is {M}x{N}; compile it for this N (N_MULTIPLE_16=False)")
    if copies is None:
        args = (a, b, c, w, cnt, scale_a, scale_b, S)
    else:                           # gemm_sm90_copying: the sources, their pitches, the padded buffers again, and a
        a_src, b_src = copies[1:]   # counter the programs meet at
        cnt = _workspace((plan.dev, _stream_of(a), "copy"), 16, a.device, counters=True)
        args = (a, b, c, w, cnt, scale_a, scale_b, S, a if a_src is None else a_src,
                0 if a_src is None else row_pitch(a_src), a, b if b_src is None else b_src,
                0 if b_src is None else row_pitch(b_src), b)
    # a config past the shared memory: one line in its fields (the interpreter runs the passes at its launch; a
    # plain try, not `in_config_terms`: calls with a dict config come here every time, and it costs them nothing)
    try:
        if ck is None:
            if plan.ck is None:
                plan.ck = plan.bound.compiled(*args, **plan.kw)
            ck = plan.ck
        if not plan.fitted and _fit_grid(plan, ck) and compiled is None:
            ck = plan.ck = plan.bound.compiled(*args, **plan.kw)
        la = ck.launch_args(args, {})
        ck.launcher(plan.bound.grid, *la)
    except SharedMemoryError as e:
        raise GluonError(_past_the_shared_memory(plan.kw["CFG"], e)) from None
    second = None
    if plan.reduce_kw is not None:
        reduce = splitk_reduce[(gl.cdiv(M * N, 1024),), (1024,)]
        reduce(c, w, M * N, **plan.reduce_kw)
        second = (reduce, (c, w, M * N), plan.reduce_kw)
    if fast_key is not None and not interpreting():
        _remember(fast_key, ck, plan.bound.grid, la, second, args, compiled, copies is not None)
    return c


def promises_n16(cfg: GemmConfig, splits: int, N: int) -> bool:
    """Whether a launch promises the kernel N_MULTIPLE_16: vector stores / loads by address need rows of
    16-element multiples, and the coalesced epilogue's, the split-K partials' (8-byte stores of the accumulator's
    pairs, else 4-byte ones) and the in-kernel sums' (16 bytes) use them."""
    return (cfg.EPILOGUE == "coalesced" or splits > 1) and N % 16 == 0


def _fit_grid(plan: _Plan, ck) -> bool:
    """With clusters, no more of them in the persistent grid than the device holds at once (sm_count /
    cluster size assumes every SM takes part, but a cluster must fit in one GPC, so clusters of 4 or 8 can
    leave SMs over): a cluster that finds no room would start only when another ends, and its units would
    run after all the others. Asked once per plan, of the binary it launches. A pick whose K slices meet
    (SPLITK_GRID) needs every cluster at once: where the device holds fewer, it falls back to the same config
    summed by `splitk_reduce` (True: the plan's kernel changed); asked for, it is refused."""
    plan.fitted = True
    size = plan.kw["CFG"].cluster_size
    if size == 1 or plan.dev < 0 or getattr(ck, "abi", None) is None:
        return False
    n = ck.launcher.resident_clusters(plan.dev, size)
    if n is None or n >= plan.bound.grid[0]:
        return False
    changed = False
    if plan.meet:                   # every unit must run at once: a smaller grid would wait forever
        if plan.meet_asked:
            raise GluonError(f"gemm: SPLITK_GRID needs all {plan.bound.grid[0]} clusters of {size} CTAs resident at "
                             f"once, but the device holds {n}; use CLUSTER_M=1 or fewer K slices")
        cfg = plan.kw["CFG"].replace(SPLITK_GRID=1)
        plan.kw, plan.meet, plan.ck, changed = dict(plan.kw, CFG=cfg), 0, None, True
        plan.reduce_kw = _reduce_kw(plan.splits, cfg.PDL)
    plan.bound = (gemm_sm90_copying if plan.copies else gemm_sm90)[(n,)]
    return changed


def _row_copy_on(t, stream):
    """The backend's prepared copy of rows on `stream` (`CudaBackend.row_copy`) as `pad_plan` takes it, for a
    tensor on the current GPU (whose context and stream the driver's copy runs in) while the interpreter is off;
    else None (torch copies)."""
    backend = _cuda.DEFAULT_BACKEND
    make = getattr(backend, "row_copy", None)
    if (make is None or backend.device_type != "cuda" or interpreting() or t.get_device() < 0
            or t.get_device() != backend.current_device()):
        return None
    return lambda width, height, src_pitch, dst_pitch: make(width, height, src_pitch, dst_pitch, stream)


def _stream_of(t):
    """The current stream of t's device (what per-stream buffers are kept by); None for a CPU tensor."""
    dev = t.get_device()
    return _cuda.DEFAULT_BACKEND.current_stream(dev) if dev >= 0 else None


def _fast_key(a, b, c, config, b_kmajor, splits, compiled, scale_a, scale_b) -> tuple | None:
    """What a call's launch depends on besides its operands' addresses (dtypes, shapes, strides, devices,
    the arguments, the current stream: the split-K workspace is the stream's), or None where the full
    path must look (a config of another type or with unhashable values, something that is not a tensor). Its
    last item is the stream."""
    import torch
    T = torch.Tensor
    if type(a) is not T or type(b) is not T or type(c) is not T:
        return None
    if config is not None and type(config) is not GemmConfig:
        config = fast_config_key(config, GemmConfig)
        if config is NOT_KEYED:
            return None
    if scale_a is not None or scale_b is not None:
        if type(scale_a) is not T or type(scale_b) is not T:
            return None
        scales = (scale_a.dtype, scale_a.shape, scale_a.stride(), scale_a.get_device(),
                  scale_b.dtype, scale_b.shape, scale_b.stride(), scale_b.get_device())
    else:
        scales = None
    return (a.shape, a.stride(), b.shape, b.stride(), c.shape, c.stride(), a.dtype, b.dtype, c.dtype, a.get_device(),
            b.get_device(), c.get_device(), b_kmajor, splits, config, id(compiled), scales, _stream_of(a))


def _fast_launch(fast: tuple, a, b, c, scale_a, scale_b, stream) -> bool:
    """A repeat of a call `_remember` kept: its launches with the new addresses (False, nothing launched,
    if the GEMM's cannot take them: an operand off the 16-byte alignment TMA needs, which the full path
    pads, or a scale off the 16-byte alignment the binary assumes, which the full path reports)."""
    main, reduce, _compiled = fast
    ptrs = (a.data_ptr(), b.data_ptr(), c.data_ptr()) if scale_a is None else \
        (a.data_ptr(), b.data_ptr(), c.data_ptr(), scale_a.data_ptr(), scale_b.data_ptr())
    if not main(ptrs, stream):          # an address off the alignment the launch relies on: nothing ran
        return False
    if reduce is not None:
        reduce((ptrs[2],), stream)
    return True


def _remember(key: tuple, ck, grid, la, reduce, args, compiled, copied: bool = False) -> None:
    """Keep a first call's launches, prepared (gluon/runtime/prepared.py), for `_fast_launch`: A, B, C (and
    the scales when given) take new addresses, the workspaces are held; the split-K reduction's C too. A
    caller's `compiled` kernel is held with them (the key has its id). `copied`: the kernel copies A or B into a
    padded buffer; the caller's operand is then its source (AS, BS), the buffer held."""
    if ck.abi is None:                      # no binary of ours to launch directly
        return
    scaled = key[-2] is not None
    a_at = 8 if copied and args[8] is not args[0] else 0       # gemm_sm90_copying's AS and BS
    b_at = 11 if copied and args[11] is not args[1] else 1
    moved = (a_at, b_at, 2, 5, 6) if scaled else (a_at, b_at, 2)
    keep = (args[3], args[4]) if scaled else (args[3], args[4], args[5], args[6])
    keep += tuple(args[i] for i in (0, 1) if i not in moved)    # the padded buffers (not the caller's tensors)
    main = ck.launcher.prepare(grid, la, moved, keep)
    second = None
    if reduce is not None:
        bound, rargs, rkw = reduce
        rck = bound.compiled(*rargs, **rkw)
        if not rck.takes_args_as_given(len(rargs)):
            return
        second = rck.launcher.prepare(bound.grid, rargs, (0,), (rargs[1],))
    _keep(_FAST, key, (main, second, compiled))


def _past_the_shared_memory(cfg: GemmConfig, e: SharedMemoryError) -> str:
    """One line naming the config's fields: the STAGES that fit beside the rest, or else what to lower."""
    head = past_the_shared_memory("gemm", f"BLOCK_M={cfg.BLOCK_M}, BLOCK_N={cfg.BLOCK_N}, BLOCK_K={cfg.BLOCK_K}, "
                                          f"STAGES={cfg.STAGES}, EPILOGUE={cfg.EPILOGUE!r}", e)
    fit = stages_that_fit(e, cfg.STAGES, _RINGS)
    if fit >= 2:
        rings = "A, B and scales" if cfg.SCALES_IN_RING else "A and B"
        return f"{head}; STAGES={fit} fits ({kib(stage_bytes(e, cfg.STAGES, _RINGS))} of {rings} a stage)"
    c_tiles = sum(size for name, size in e.regions if name.startswith("c_tile"))
    direct = stages_that_fit(e, cfg.STAGES, _RINGS, freed=c_tiles) if c_tiles else 0
    if direct >= 2:
        return (f"{head}; EPILOGUE='direct' (C stored from registers, no {kib(c_tiles)} C tile) fits with "
                f"STAGES={direct}")
    return f"{head}; use a smaller BLOCK_M, BLOCK_N or BLOCK_K"


_RINGS = ("a_ring", "b_ring", "scale_ring")      # the kernel's rings, STAGES deep


def _keep(cache: dict, key, value) -> None:
    """cache[key] = value, the oldest entry going past _FAST_MAX."""
    if len(cache) >= _FAST_MAX:
        cache.pop(next(iter(cache)))
    cache[key] = value


def _check_call(a, b, c, b_kmajor: bool, config, splits) -> None:
    """One GluonError naming the operand that is not a 2-D tensor of a dtype the GEMM takes, or whose shape
    does not fit the others' (A [M, K], B [K, N] or with b_kmajor [N, K], C [M, N]): what the kernel would
    otherwise read past or leave short without a word; or a config or splits of the wrong kind."""
    import torch
    if config is not None and not isinstance(config, (GemmConfig, Mapping)):
        raise GluonError(f"gemm: config is a GemmConfig or a dict of its fields, not {type(config).__name__}")
    if splits is not None and (type(splits) is not int or splits < 1):
        raise GluonError(f"gemm: splits={splits!r}: the number of K slices, a positive int (or None: the split-K "
                         "heuristic)")
    ins = (torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)
    outs = (torch.float16, torch.bfloat16, torch.float32)
    for name, t in (("a", a), ("b", b), ("c", c)):
        if not isinstance(t, torch.Tensor):
            raise GluonError(f"gemm: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise GluonError(f"gemm: {name} must be a 2-D tensor, got shape {list(t.shape)}")
    if a.dtype not in ins or b.dtype != a.dtype:
        raise GluonError(f"gemm: a and b take one dtype of {', '.join(map(str, ins))}, got a {a.dtype} and b "
                         f"{b.dtype}")
    if c.dtype not in outs:
        raise GluonError(f"gemm: c takes {', '.join(map(str, outs))}, got {c.dtype}")
    (M, N), K = c.shape, a.shape[1]
    if a.shape[0] != M:
        raise GluonError(f"gemm: a is {list(a.shape)} and c {list(c.shape)}: a must have c's {M} rows")
    bK, bN = (b.shape[1], b.shape[0]) if b_kmajor else (b.shape[0], b.shape[1])
    form = "[N, K] (b_kmajor=True)" if b_kmajor else "[K, N] ([N, K] rows with b_kmajor=True)"
    if bK != K:
        raise GluonError(f"gemm: a is {list(a.shape)} (K = {K}) and b {list(b.shape)}, read as {form}, has K = {bK}")
    if bN != N:
        raise GluonError(f"gemm: b is {list(b.shape)}, read as {form}: N = {bN}, but c {list(c.shape)} has {N} columns")


def _scale_mode(a, b, c, scale_a, scale_b) -> str:
    """"tensor", "rowcol", "block" or "block_m" (block scales with scale_a M-major) for the scales of an fp8
    GEMM, or a GluonError naming what is wrong."""
    import torch
    if a.element_size() != 1 or b.dtype != a.dtype:
        raise GluonError(f"gemm: scales are for fp8 inputs (one of torch.float8_e4m3fn, torch.float8_e5m2 for both a "
                         f"and b), got a {a.dtype} and b {b.dtype}")
    if scale_a is None or scale_b is None:
        raise GluonError("gemm: give both scale_a and scale_b (fp32; one element each, or M and N elements)")
    M, N = c.shape
    KB, NB = -(-a.shape[1] // 128), -(-N // 128)
    # block scales of A M-major ([M, KB] with strides (1, M)): what torch._scaled_mm's blockwise scaling and
    # DeepGEMM take, read as they are
    m_major = (isinstance(scale_a, torch.Tensor) and tuple(scale_a.shape) == (M, KB) and not scale_a.is_contiguous()
               and scale_a.stride() == (1, M))
    for name, t in (("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or not (t.is_contiguous() or
                                                                               t is scale_a and m_major):
            raise GluonError(f"gemm: {name} must be a contiguous torch.float32 tensor (block scale_a may also be "
                             f"M-major: strides (1, M)), got {getattr(t, 'dtype', type(t).__name__)}"
                             + (f" of strides {t.stride()}" if isinstance(t, torch.Tensor) else ""))
        if t.device != a.device:
            raise GluonError(f"gemm: {name} is on {t.device}, a on {a.device}")
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        return "tensor"
    if scale_a.numel() == M and scale_b.numel() == N and not m_major:
        return "rowcol"
    if tuple(scale_a.shape) == (M, KB) and tuple(scale_b.shape) == (NB, KB):
        return "block_m" if m_major else "block"
    raise GluonError(f"gemm: scale_a is {tuple(scale_a.shape)} and scale_b {tuple(scale_b.shape)}; per tensor they "
                     f"have 1 element each, per row and column {M} (A's rows) and {N} (B's columns), per block "
                     f"[{M}, {KB}] (a row of A per 128 of K) and [{NB}, {KB}] (128 x 128 blocks of B)")


def _plan(a, c, M: int, N: int, K: int, config: GemmConfig | Mapping | None, b_kmajor: bool, splits: int | None,
          pitch_aligned: bool = True, scale: str = "none", c_addr: bool = False, copy_a: bool = False,
          copy_b: bool = False):
    """What a launch of this problem needs besides the operands: resolved config, split count, grid,
    fp32 workspace. Computed once per (device, sizes, output width, config) and kept in _PLANS, so a
    repeated launch costs a dict lookup here. `c_addr`: C's rows are off 16 bytes, so the config stores C by
    address (`by_address`). `copy_a` / `copy_b`: the kernel is to copy A / B into their padded buffers (COPY_A,
    COPY_B), where its config lets it (`_copies_in_kernel`)."""
    import torch
    interp = interpreting()
    if interp:                      # the CPU interpreter (GLUON_INTERPRET=1): planned as for an H200
        dev, sms = -1, device_sms(a.device)
    else:
        dev = a.device.index if a.device.index is not None else torch.cuda.current_device()
        sms = sm_count(dev)
    if scale in ("block", "block_m") and not isinstance(config, GemmConfig):
        config = block_scaled_overrides(M, N, K, sms, c.element_size(), pitch_aligned, config)
    cfg = resolve_config(M, N, K, sms, c.element_size(), pitch_aligned, config, a.element_size(), b_kmajor)
    if c_addr:
        cfg = by_address(cfg)
    if interp and cfg.cluster_size > 1 and not (_asks_for(config, "CLUSTER_M") or _asks_for(config, "CLUSTER_K")):
        # the interpreter runs one CTA at a time; the pick's clusters only move data (multicast B) or sum K
        # slices (which splitk_reduce sums the same way), so the same config without them computes the same
        # values (clusters the caller asks for stay, and are refused)
        if cfg.CLUSTER_K > 1 and splits is None:
            splits = cfg.CLUSTER_K
        cfg = cfg.replace(CLUSTER_M=1, CLUSTER_K=1)
    if interp and cfg.SPLITK_GRID > 1 and not _asks_for(config, "SPLITK_GRID"):
        # nor the programs of a launch at once: the slices' meeting would wait forever; splitk_reduce sums
        # them the same way
        splits = cfg.SPLITK_GRID if splits is None else splits
        cfg = cfg.replace(SPLITK_GRID=1)
    # CLUSTER_K and SPLITK_GRID sum a fixed number of slices in the kernel: the split count is theirs
    field, sizes = ("CLUSTER_K", CLUSTER_K_SIZES) if cfg.CLUSTER_K > 1 else ("SPLITK_GRID", SPLITK_GRID_SIZES)
    fixed = getattr(cfg, field) if getattr(cfg, field) > 1 else 0
    if fixed and splits not in (None, fixed):
        raise GluonError(f"gemm: splits={splits} with {field}={fixed}: the kernel sums exactly that many K slices, "
                         f"so the split count is {field}; leave splits unset")
    S = split_k(M, N, K, cfg, sms) if splits is None else splits
    # no empty K slice: the kernel's consumers release a stage after every unit, so a unit without
    # k-steps would release one it never took (e.g. splits=5 over 16 k-steps: 4, 4, 4, 4, 0)
    k_tiles = gl.cdiv(K, cfg.BLOCK_K)
    S = max(1, gl.cdiv(k_tiles, gl.cdiv(k_tiles, max(S, 1))))
    if fixed and S != fixed:                        # the kernel takes that many slices, none of them empty
        raise GluonError(f"gemm: {field}={fixed} splits K={K} into {fixed} slices of whole {cfg.BLOCK_K}-deep k-steps, "
                         f"but {k_tiles} k-steps make at most {S} non-empty ones; use "
                         f"{field}={max(d for d in sizes if d <= S)} or a smaller BLOCK_K")
    bound = gemm_sm90[grid(M, N, cfg, sms, S)]
    if cfg.SPLITK_GRID > 1 and units(M, N, cfg, S) > bound.grid[0]:
        raise GluonError(f"gemm: SPLITK_GRID={S} needs every unit resident at once (its slices wait for each "
                         f"other), but {M}x{N} in {cfg.BLOCK_M}x{cfg.BLOCK_N} tiles makes {units(M, N, cfg, S)} "
                         f"units of {cfg.cluster_size} CTA(s) for {sms} SMs; use fewer K slices, larger tiles or "
                         "SPLITK_GRID=1")
    kw = dict(CFG=cfg, B_KMAJOR=b_kmajor, num_warps=num_warps(cfg))
    if scale != "none":
        kw["SCALE"] = "block" if scale == "block_m" else scale
    if scale == "block_m":                                  # scale_a passed as its [KB, M] transpose
        kw["SA_M_MAJOR"] = True
    if promises_n16(cfg, S, N):
        kw["N_MULTIPLE_16"] = True
    second_pass = S > 1 and not cfg.SPLITK_FIXUP and cfg.CLUSTER_K == 1 and cfg.SPLITK_GRID == 1
    meet = tiles(M, N, cfg) if cfg.SPLITK_GRID > 1 else 0
    copies = (copy_a or copy_b) and _copies_in_kernel(cfg, S, bound.grid[0], (copy_a * M + copy_b * N) * K)
    if copies:
        kw.update(COPY_A=copy_a, COPY_B=copy_b)
        bound = gemm_sm90_copying[bound.grid]
    return _Plan(bound, dev, S, kw, copies=copies, fixup=S > 1 and cfg.SPLITK_FIXUP, meet=meet,
                 meet_asked=bool(meet) and _asks_for(config, "SPLITK_GRID"),
                 reduce_kw=_reduce_kw(S, cfg.PDL) if second_pass else None)


COPY_ROUNDS = 4         # the most blocks of 32 elements a thread (`_copy_rows`' loads in flight) a kernel copies


def _copies_in_kernel(cfg: GemmConfig, splits: int, programs: int, elements: int) -> bool:
    """Whether the kernel under `cfg`, in `programs` programs, copies `elements` into padded buffers (COPY_A /
    COPY_B): its programs meet at a counter of their own (not while the split-K fixup's or SPLITK_GRID's counters
    are in use), the default warps that copy are a power of two (`grid_meet_all`), and at most COPY_ROUNDS rounds of
    their loads do it (a grid of few programs copying much is slower than a copy of its own before the launch)."""
    warps = 4 * cfg.CONSUMER_WGS // cfg.consumer_roles
    return (not (splits > 1 and cfg.SPLITK_FIXUP) and cfg.SPLITK_GRID == 1 and warps & (warps - 1) == 0
            and elements <= COPY_ROUNDS * programs * warps * 32 * 32)


def _asks_for(config, field: str) -> bool:
    """Whether the caller's config sets `field` itself: a GemmConfig away from the default, or a dict naming it."""
    if isinstance(config, GemmConfig):
        return getattr(config, field) != getattr(DEFAULT_CONFIG, field)
    return bool(config) and field in config


def _workspace(key: tuple, numel: int, device, counters: bool = False):
    """The split-K fp32 workspace of a (device, stream), or with `counters` its int32 arrival counters
    (zero when made; the kernel's last slice of each element resets its counter): one buffer each, grown
    to the largest request."""
    full = key + ("cnt" if counters else "w",)
    w = _WORKSPACE.get(full)
    if w is None or w.numel() < numel:
        import torch
        if w is not None:                   # the prepared launches hold the old one: let it go
            _FAST.clear()
        make = torch.zeros if counters else torch.empty
        w = _WORKSPACE[full] = make(numel, device=device, dtype=torch.int32 if counters else torch.float32)
    return w


def compile_variant(dtype=None, out_dtype=None, B_KMAJOR: bool = False, **overrides):
    """DEFAULT_CONFIG with `overrides` (GemmConfig fields), its "auto" values resolved as `launch`
    resolves them for the output type, compiled without tensors (`stand_ins`, no GPU needed; fp16
    inputs unless `dtype`): a variant's machine code, registers and shared memory."""
    dtype = dtype or DType.f16
    cfg = to_config(overrides, DEFAULT_CONFIG).resolve((out_dtype or dtype).bits // 8)
    return compile_config(cfg, dtype, out_dtype, B_KMAJOR)


def compile_config(cfg: GemmConfig, dtype, out_dtype=None, B_KMAJOR: bool = False):
    """A resolved `cfg` compiled without tensors (`stand_ins`, no GPU needed); one that does not fit the shared
    memory is refused in one line naming its fields and the stages that would fit."""
    with in_config_terms(lambda e: _past_the_shared_memory(cfg, e)):
        return gemm_sm90.compile(*stand_ins(dtype, out_dtype), num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=B_KMAJOR)


def stand_ins(dtype, out_dtype=None, splits: int = 1) -> tuple:
    """What `gemm_sm90.trace` / `.compile` take for (A, B, C, W, CNT, SA, SB, SPLITS) without tensors: A, B
    and C of `dtype` (C of `out_dtype` if given; B [K, N] or [N, K] alike, its sizes are symbols), the fp32
    split-K workspace and its int32 counters, the fp32 scales, and SPLITS with the divisibility a launch
    with `splits` K slices specializes on.
    The symbols are named as JITFunction.specialize names a launch's, so the TTGIR is what `launch`
    compiles (the tuner's traces hit the cache at launch)."""
    refs = [TensorRef(n, d, shape=tuple(f"{n}_shape{i}" for i in range(r)))
            for n, d, r in (("A", dtype, 2), ("B", dtype, 2), ("C", out_dtype or dtype, 2), ("W", DType.f32, 1),
                            ("CNT", DType.i32, 1), ("SA", DType.f32, 1), ("SB", DType.f32, 1))]
    return (*refs, ScalarArg(DType.i32, 16 if splits % 16 == 0 else 1))
