"""The SM90 attention's host side: `attention(q, k, v, ...)` on torch tensors, its checks, its views.

Inputs are [B, H, S, D] as torch SDPA takes them (or [B, S, H, D] with `layout="bshd"`, as
FlashAttention takes them), in any strides TMA can describe as a 2-D view: [B, H, S, D] rows
(`x.contiguous()`), [B, S, H, D] rows (`x.transpose(1, 2)` of a contiguous [B, S, H, D] tensor, or a
slice of packed QKV): those run without a copy. Anything else is copied once. A launch of a problem
it has seen costs a dict lookup (the plan: config, grid, constexprs, the compiled specialization)
and the launcher.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from gluon.dtypes import DType
from gluon.ir import GluonError
from gluon.language.kernel import ScalarArg
from gluon.passes.common import kib
from gluon.runtime.cuda import sm_count
from gluon.types import SharedMemoryError, TensorRef

from ..config_checks import (NOT_KEYED, fast_config_key, in_config_terms, past_the_shared_memory, plan_config_key,
                             stage_bytes, stages_that_fit)
from ..tensor_checks import device_sms, interpreting, on_the_launch_device
from .config import HEAD_DIMS, AttentionConfig, choose_config, default_config, gpu_problem, grid, num_warps, to_config
from .kernel import attention_sm90

_LOG2E = 1.4426950408889634
_PLANS: dict[tuple, "_Plan"] = {}
_FAST: dict[tuple, "_FastPlan"] = {}
_LSE_DUMMY: dict[int, object] = {}


@dataclass
class _Plan:
    bound: object                   # attention_sm90[grid]
    kw: dict                        # constexprs and num_warps
    ck: object = None               # the compiled specialization, after the first launch


@dataclass
class _FastPlan:
    """A call seen before, to the inputs' shapes, strides, dtypes and devices: its checks and the 2-D views
    derived from them hold for a repeat, which costs the output's allocation and the prepared launch (q, k,
    v, the output and the log-sum-exp take their new addresses). Inputs TMA reads without a copy only."""
    launch: object                  # gluon.runtime.prepared.PreparedLaunch
    alloc: tuple                    # the output's allocation shape: [B, S, H, D] or [B, H, S, D] rows
    transpose_out: bool             # the result is the allocation transposed (1, 2)
    lse_shape: tuple | None         # [B, H, Sq] when the call returns the log-sum-exp


def _fast_key(q, k, v, causal, scale, config, return_lse, layout):
    """The key of `_FAST` for a call of plain torch tensors, else None (the full path checks the rest)."""
    import torch
    T = torch.Tensor
    if type(q) is not T or type(k) is not T or type(v) is not T:
        return None
    if config is not None and type(config) is not AttentionConfig:
        config = fast_config_key(config, AttentionConfig)
        if config is NOT_KEYED:
            return None
    return (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, k.dtype, v.dtype, q.device,
            k.device, v.device, causal, scale, return_lse, layout, config)


def _fast_call(fp: _FastPlan, q, k, v):
    """The launch of a call `_FAST` has seen, or None when a base address lost its 16-byte alignment
    (the full path copies such an input)."""
    import torch
    base = torch.empty(fp.alloc, device=q.device, dtype=q.dtype)
    if fp.lse_shape is None:
        lse = None
        launched = fp.launch((q.data_ptr(), k.data_ptr(), v.data_ptr(), base.data_ptr()))
    else:
        lse = torch.empty(fp.lse_shape, device=q.device, dtype=torch.float32)
        launched = fp.launch((q.data_ptr(), k.data_ptr(), v.data_ptr(), base.data_ptr(), lse.data_ptr()))
    if not launched:
        return None
    o = base.transpose(1, 2) if fp.transpose_out else base
    return (o, lse) if lse is not None else o


def _fast_plan(ck, plan: _Plan, la, views: tuple, o_work, q, layout: str, return_lse: bool, lse):
    """The `_FastPlan` of a first call whose inputs were TMA-ready as given, or None where the call's
    launch arguments cannot be matched to its inputs (then every call takes the full path)."""
    if ck.abi is None:                          # interpreted (GLUON_INTERPRET=1): no binary to call directly
        return None
    addressed = []
    for t in (*views, lse) if return_lse else views:      # q, k, v, o (and the log-sum-exp): by identity
        i = next((i for i, a in enumerate(la) if a is t), None)
        if i is None:
            return None
        addressed.append(i)
    B, H, Sq, D = q.shape
    rows_bshd = o_work.stride(2) != D          # [B, S, H, D] rows: the allocation is [B, S, H, D]
    alloc = (B, Sq, H, D) if rows_bshd else (B, H, Sq, D)
    prepared = ck.launcher.prepare(plan.bound.grid, la, tuple(addressed), keep=() if return_lse else (lse,))
    return _FastPlan(prepared, alloc, rows_bshd != (layout == "bshd"), (B, H, Sq) if return_lse else None)


def _fail(msg: str) -> None:
    raise GluonError(f"attention: {msg}")


def _check(q, k, v) -> None:
    """One clear line for each input the kernel cannot take (the device last, so that the other
    mistakes are named on any machine)."""
    import torch
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            _fail(f"{name} must be a torch tensor, got {type(t).__name__}")
        if t.dim() != 4:
            _fail(f"{name} must be 4-D [batch, heads, seq, head_dim], got shape {tuple(t.shape)}")
        if t.dtype not in (torch.float16, torch.bfloat16):
            _fail(f"{name} is {t.dtype}; the kernel takes torch.float16 or torch.bfloat16")
    if not (q.dtype == k.dtype == v.dtype):
        _fail(f"q, k and v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    B, H, _, D = q.shape
    if D not in HEAD_DIMS:
        _fail(f"head_dim {D} is not supported; the kernel takes {' or '.join(map(str, HEAD_DIMS))}")
    if tuple(k.shape) != tuple(v.shape):
        _fail(f"k {tuple(k.shape)} and v {tuple(v.shape)} must have one shape")
    if k.shape[0] != B or k.shape[3] != D:
        _fail(f"k {tuple(k.shape)} does not match q {tuple(q.shape)} in batch or head_dim")
    if (k.shape[1] == 0 and H) or (k.shape[1] and H % k.shape[1]):
        _fail(f"q has {H} heads and k/v {k.shape[1]}: grouped-query attention needs the k/v heads to divide the q "
              "heads")
    if k.shape[2] == 0 and q.shape[2]:
        _fail("k and v have no keys (seq length 0) for q's queries")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(-1) != 1:
            _fail(f"{name}'s last dimension is not contiguous (stride {t.stride(-1)}); TMA reads rows of head_dim "
                  "contiguous elements: pass x.contiguous()")
    on_the_launch_device("attention", q=q, k=k, v=v)


def _view2d(t):
    """(2-D view, bshd) of [B, H, S, D] tensor `t` without a copy, or None when TMA cannot describe it.
    [B, H, S, D] rows: [B*H*S, D] with the row pitch of S; [B, S, H, D] rows (heads adjacent): [B*S, H*D]."""
    import torch
    B, H, S, D = t.shape
    sb, sh, ss, _ = t.stride()
    es = t.element_size()
    if t.data_ptr() % 16 or ss * es % 16:
        return None
    if (H == 1 or sh == S * ss) and (B == 1 or sb == H * S * ss):
        return torch.as_strided(t, (B * H * S, D), (ss, 1), t.storage_offset()), False
    if (H == 1 or sh == D) and (B == 1 or sb == S * ss) and ss >= H * D:
        return torch.as_strided(t, (B * S, H * D), (ss, 1), t.storage_offset()), True
    return None


def _as_view(t):
    """(2-D view, bshd, copied): the view of `t` itself, or of a contiguous copy where TMA cannot read `t`."""
    got = _view2d(t)
    if got is not None:
        return got + (False,)
    dense = t.contiguous()
    if dense.data_ptr() == t.data_ptr():        # contiguous already, at a base TMA cannot take: a fresh copy
        dense = t.clone()
    return _view2d(dense) + (True,)


def attention(q, k, v, causal: bool = False, scale: float | None = None,
              config: AttentionConfig | Mapping | None = None, return_lse: bool = False, layout: str = "bhsd", out=None,
              compiled=None):
    """softmax(q k^T * scale [+ causal mask]) v, as `torch.nn.functional.scaled_dot_product_attention`.

    q [B, Hq, Sq, D], k and v [B, Hkv, Skv, D] with Hkv dividing Hq (grouped-query / multi-query
    attention: query head h reads k/v head h // (Hq // Hkv)); fp16 or bf16; D 64, 128 or 256. `scale`
    defaults to 1/sqrt(D). `causal` aligns the mask bottom-right (FlashAttention's convention: query i
    sees key j iff j <= i + Skv - Sq; with Sq == Skv that is torch's `is_causal`); a query that sees no
    key gets zeros. `layout="bshd"` takes and returns [B, S, H, D] tensors instead. `return_lse`
    also returns the [B, Hq, Sq] fp32 log-sum-exp of the scaled scores (natural log), what a backward
    pass needs. `out` (the output's shape and dtype) is written instead of a new tensor. `config`
    overrides fields of the chosen config (`choose_config`; a dict) or gives a whole AttentionConfig.
    `compiled`: the kernel already compiled for this config and these inputs (a gluon.jit.CompiledKernel, e.g.
    the one the tuner's pool built from `stand_ins`), launched instead of specializing here."""
    import torch
    fast_key = _fast_key(q, k, v, causal, scale, config, return_lse, layout) if out is None and compiled is None \
        else None
    if fast_key is not None:
        fp = _FAST.get(fast_key)
        if fp is not None and not interpreting():     # (one made on the GPU is not taken once the interpreter is on)
            got = _fast_call(fp, q, k, v)
            if got is not None:
                return got
    if config is not None and not isinstance(config, (AttentionConfig, Mapping)):
        _fail(f"config is an AttentionConfig or a dict of its fields, not {type(config).__name__}")
    if layout not in ("bhsd", "bshd"):
        _fail(f"layout={layout!r}: use 'bhsd' ([batch, heads, seq, head_dim]) or 'bshd' ([batch, seq, heads, "
              "head_dim])")
    if layout == "bshd":
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor) or t.dim() != 4:
                _fail(f"{name} must be a 4-D torch tensor [batch, seq, heads, head_dim]")
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if out is not None:
            out = out.transpose(1, 2)
    _check(q, k, v)
    B, H, Sq, D = q.shape
    HK, Skv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    if not math.isfinite(scale):
        _fail(f"scale={scale} must be a finite number")
    if out is not None and (tuple(out.shape) != (B, H, Sq, D) or out.dtype != q.dtype or out.device != q.device):
        _fail(f"out must be a {q.dtype} tensor of q's shape on {q.device}, got {out.dtype} {tuple(out.shape)}")
    if not (Sq and B and H):                     # nothing to compute: the empty output (and LSE), as SDPA gives
        o = out if out is not None else torch.empty(B, H, Sq, D, device=q.device, dtype=q.dtype)
        o = o.transpose(1, 2) if layout == "bshd" else o
        return (o, torch.empty(B, H, Sq, device=q.device, dtype=torch.float32)) if return_lse else o
    q2, q_bshd, q_copied = _as_view(q)
    k2, k_bshd, k_copied = _as_view(k)
    v2, v_bshd, v_copied = _as_view(v)
    o = out if out is not None else _empty_like_rows(q, q_bshd)
    got = _view2d(o)
    if got is None or got[1] != q_bshd:         # the kernel writes O laid out as Q: through a buffer, copied
        o_work = _empty_like_rows(q, q_bshd)
        got = _view2d(o_work)
    else:
        o_work = o
    o2 = got[0]
    lse = torch.empty(B, H, Sq, device=q.device, dtype=torch.float32) if return_lse else _lse_dummy(q.device)
    key = (q.device.index, B, H, HK, Sq, Skv, D, q.dtype, causal, q_bshd, k_bshd, v_bshd, return_lse,
           plan_config_key(config, default_config(D)))
    plan = _PLANS.get(key)
    if plan is None:
        cfg = to_config(config, choose_config(D, Skv, bool(causal)))
        problem = None if interpreting() else gpu_problem(cfg)
        if problem is not None:
            _fail(problem)
        kw = dict(CFG=cfg, HEAD_DIM=D, CAUSAL=bool(causal), Q_BSHD=q_bshd, K_BSHD=k_bshd, V_BSHD=v_bshd,
                  WRITE_LSE=bool(return_lse), num_warps=num_warps(cfg))
        sms = (device_sms(q.device) if interpreting() else sm_count(q.device.index)) if cfg.PERSISTENT else 0
        plan = _PLANS[key] = _Plan(attention_sm90[grid(Sq, B * H, cfg, bool(causal), sms)], kw)
    args = (q2, k2, v2, o2, lse, Sq, Skv, H, H // HK, scale * _LOG2E)
    ck = compiled
    # a config past the shared memory: one line in its fields (the interpreter runs the passes at its launch; a
    # plain try, not `in_config_terms`: calls past the fast path come here every time, and it costs them nothing)
    try:
        if ck is None:
            if plan.ck is None:
                plan.ck = plan.bound.compiled(*args, **plan.kw)
            ck = plan.ck
        la = ck.launch_args(args, {})
        ck.launcher(plan.bound.grid, *la)
    except SharedMemoryError as e:
        raise GluonError(_past_the_shared_memory(plan.kw["CFG"], D, e)) from None
    if fast_key is not None and o_work is o and not (q_copied or k_copied or v_copied) and len(_FAST) < 256:
        fp = _fast_plan(ck, plan, la, (q2, k2, v2, o2), o_work, q, layout, return_lse, lse)
        if fp is not None:
            _FAST[fast_key] = fp
    if o_work is not o:
        o.copy_(o_work)
    if layout == "bshd":
        o = o.transpose(1, 2)
    return (o, lse) if return_lse else o


def _empty_like_rows(q, bshd: bool):
    """A new [B, H, Sq, D] tensor of q's dtype, its rows laid out [B, S, H, D] when `bshd`, else [B, H, S, D]."""
    import torch
    B, H, Sq, D = q.shape
    if bshd:
        return torch.empty(B, Sq, H, D, device=q.device, dtype=q.dtype).transpose(1, 2)
    return torch.empty(B, H, Sq, D, device=q.device, dtype=q.dtype)


def _lse_dummy(device):
    t = _LSE_DUMMY.get(device.index)
    if t is None:
        import torch
        t = _LSE_DUMMY[device.index] = torch.empty(16, device=device, dtype=torch.float32)
    return t


def _size_arg(n: int | None) -> ScalarArg:
    """A size's stand-in as a launch specializes it (gluon.jit._stand_in): i32 or i64, divisible by 16 or not.
    None: nothing known (i32, no divisibility: valid for every value)."""
    if n is None:
        return ScalarArg(DType.i32)
    return ScalarArg(DType.i32 if -2**31 <= n < 2**31 else DType.i64, 16 if n % 16 == 0 else 1)


def stand_ins(dtype: DType = DType.f16, sq: int | None = None, skv: int | None = None, heads: int | None = None,
              group: int | None = None) -> tuple:
    """What `attention_sm90.trace` / `.compile` take for (Q, K, V, O, L, Sq, Skv, H, GROUP, qk_scale) without
    tensors: 2-D views of `dtype`, the fp32 LSE, the sizes and the scale. With the sizes of a problem (Sq, Skv,
    query heads, query heads per k/v head) the size arguments carry the divisibility `attention` specializes
    them on, so the TTGIR is the one a launch of that problem compiles (the tuner's builds hit the cache at
    launch); without them, a kernel that assumes nothing of the sizes."""
    refs = [TensorRef(n, d, shape=tuple(f"{n}_shape{i}" for i in range(r)))
            for n, d, r in (("Q", dtype, 2), ("K", dtype, 2), ("V", dtype, 2), ("O", dtype, 2), ("L", DType.f32, 1))]
    return (*refs, _size_arg(sq), _size_arg(skv), _size_arg(heads), _size_arg(group), ScalarArg(DType.f32))


def compile_variant(head_dim: int = 128, dtype: DType | None = None, causal: bool = False, **overrides):
    """The default config for `head_dim` with `overrides`, compiled without tensors (no GPU needed)."""
    cfg = to_config(overrides, default_config(head_dim))
    with in_config_terms(lambda e: _past_the_shared_memory(cfg, head_dim, e)):
        return attention_sm90.compile(*stand_ins(dtype or DType.f16), CFG=cfg, HEAD_DIM=head_dim, CAUSAL=causal,
                                      num_warps=num_warps(cfg))


def _past_the_shared_memory(cfg: AttentionConfig, head_dim: int, e: SharedMemoryError) -> str:
    """One line naming the config's fields: the STAGES of the K/V ring that fit beside Q, or else a smaller
    BLOCK_N (or BLOCK_M)."""
    head = past_the_shared_memory("attention", f"BLOCK_M={cfg.BLOCK_M}, BLOCK_N={cfg.BLOCK_N}, STAGES={cfg.STAGES} "
                                               f"at head dim {head_dim}", e)
    fit = stages_that_fit(e, cfg.STAGES, _RINGS)
    if fit >= 2:
        return f"{head}; STAGES={fit} fits ({kib(stage_bytes(e, cfg.STAGES, _RINGS))} of K and V a stage)"
    return f"{head}; use a smaller BLOCK_N or BLOCK_M"


_RINGS = ("k_ring", "v_ring")      # the kernel's K / V TMA rings, STAGES deep
