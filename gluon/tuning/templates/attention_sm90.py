"""`attention_sm90` (gluon/kernels/attention_sm90/) for the tuner: `TUNING`, named by specs/attention_sm90.toml.

**The problem.** A shape is (B, H, S, D, CAUSAL): batch, query heads (k/v heads = H), sequence length
(Sq = Skv = S), head dim, and the causal flag (1 = causal, 0 = not; a spec writes it `true` / `false`,
which the spec loader reads as 1 / 0). Causal is a dim of the shape rather than a search parameter or
a second template because it is part of the problem, not a knob: the tuner must never pick "causal" as
if it were faster, a causal and a non-causal case of one size are two cases of one study (their
geometric mean is the objective), and everything downstream of the shape (results rows keyed by
"4x16x8192x128x1", `gluon results`, `gluon build --best`'s buckets, the manifest, `gluon.load`'s dispatch)
already works per shape, so one spec and one built kernel serve both masks. The trace depends on the
shape only through D, CAUSAL and the divisibility of S and H (`legality_key` / `compile_key`): B, H and S
are runtime sizes of one binary.

**Buckets.** `gluon.load("attention_sm90")` serves a call `attn(q, k, v, causal=..., scale=...,
return_lse=..., layout=..., out=...)` (as `gluon.kernels.attention_sm90.attention` takes them) from the
built buckets of its dtype with the same head dim and causal flag, the nearest in log space over B * H
(the grid's batch x head axis: [8, 16] and [4, 32] are the same work) and S (Sq of the call; Skv is not
part of the key, tuning shapes have Sq == Skv). A call no bucket serves (another head dim, causal flag or
dtype) runs what `attention` picks for it (`choose_config`), with a one-line warning.

**Configs.** `kernel_config` maps the spec's names to an `AttentionConfig`, on top of AttentionConfig's field
defaults (not of the kernel's per-head-dim default, which moves as the kernel is tuned by hand: one spec
config is one kernel, whatever the defaults are):
CONSUMER_WARPS -> CONSUMER_WGS = warps // 4 (whole warpgroups); PRODUCER_WARPS
must be 1 (one TMA producer warp); BLOCK_M left out is 64 * CONSUMER_WGS; the rest are AttentionConfig
fields by their own names (`config.FIELDS`: a new switch is a spec parameter without an edit here).
AttentionConfig's own checks (BLOCK_M = 64 * CONSUMER_WGS, BLOCK_N 64/128/256, setmaxnreg budgets) and the
compiler passes (shared memory of the Q tiles and the K/V ring, the register file over the warp roles) prune
the rest, with their messages.

**Measuring.** Inputs fresh random normal (q, k, v [B, H, S, D]); the output is passed as `out=` and
poisoned with NaN before the run. The reference is fp32 math on the same inputs: softmax(q k^T * scale
with the bottom-right causal mask) v, in chunks of at most 1 GiB of scores, at "highest" fp32 matmul
precision; the check is the tuner's (max|o - ref| <= atol + rtol * max|ref|, no NaN). The baseline is
torch SDPA with the cuDNN backend (`sdpa_kernel(SDPBackend.CUDNN_ATTENTION)`), or torch's default SDPA
backends where cuDNN cannot run the case. FLOPs 4 * B * H * S^2 * D, halved for causal; bytes q, k, v, o.
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict
from pathlib import Path

import gluon.kernels.attention_sm90 as _kernel_package
from gluon.ir import GluonError
from gluon.kernels.attention_sm90 import (HEAD_DIMS, AttentionConfig, attention, attention_sm90, default_config,
                                          num_warps, stand_ins, to_config)
from gluon.kernels.attention_sm90.config import FIELDS, LONG_D128, SHORT_CAUSAL_D128, WRONG_ON_GPU, choose_config
from gluon.kernels.attention_sm90.reference import reference as reference_attention
from gluon.tuning.template import (H200_PEAK_BW, H200_PEAK_FLOPS, H200_SMS, TuningTemplate, dtype_name, element_size,
                                   gluon_dtype, log_distance, torch_dtype, waves_efficiency)

_SPEC_NAMES = ("CONSUMER_WARPS", "PRODUCER_WARPS")
_KERNEL_DIR = Path(_kernel_package.__file__).parent
_BASE = AttentionConfig()            # what a spec config does not set (its field defaults)


def _spec_config(cfg: AttentionConfig) -> dict:
    """`cfg` in the spec's names: its fields, with CONSUMER_WARPS for CONSUMER_WGS and the one producer warp."""
    d = {k: v for k, v in asdict(cfg).items() if k != "CONSUMER_WGS"}
    return dict(d, CONSUMER_WARPS=4 * cfg.CONSUMER_WGS, PRODUCER_WARPS=1)


def _div(n: int) -> tuple[bool, bool]:
    """What a launch specializes a size on (gluon.jit._arg_key): divisible by 16, fits in i32."""
    return n % 16 == 0, -2**31 <= n < 2**31



class _AttentionSM90Tuning(TuningTemplate):
    name = "attention_sm90"
    dims = ("B", "H", "S", "D", "CAUSAL")
    dtypes = ("fp16", "bf16")
    archs = ("sm90",)
    params = _SPEC_NAMES + FIELDS          # the spec's two warp counts and every AttentionConfig field

    def __init__(self):
        self._configs: dict[tuple, AttentionConfig] = {}        # (config items, head dim) -> AttentionConfig

    def source_hash(self) -> str:
        """sha256 (16 hex digits) of this adapter and of the kernel package it drives."""
        h = hashlib.sha256(Path(__file__).read_bytes())
        for f in sorted(_KERNEL_DIR.glob("*.py")):
            h.update(f.name.encode() + b"\0" + f.read_bytes())
        return h.hexdigest()[:16]

    # -- the problem ------------------------------------------------------------------------------------
    def shape_problem(self, shape):
        shape = tuple(int(d) for d in shape)
        if len(shape) != len(self.dims):
            return (f"{len(shape)} dims where attention_sm90 takes 5: [B, H, S, D, CAUSAL] (CAUSAL true or "
                    "false)")
        B, H, S, D, C = shape
        small = [f"{n}={d}" for n, d in zip("BHS", (B, H, S)) if d < 1]
        if small:
            return f"{', '.join(small)}: batch, heads and sequence length are sizes >= 1"
        if D not in HEAD_DIMS:
            return f"head dim D={D}: the kernel takes {' or '.join(map(str, HEAD_DIMS))}"
        if C not in (0, 1):
            return f"CAUSAL={C}: write true or false"
        return None

    # -- the spec's names -> AttentionConfig ---------------------------------------------------------------
    def kernel_config(self, config: dict, head_dim: int) -> AttentionConfig:
        """The AttentionConfig the kernel runs for this spec config at this head dim (GluonError if it is
        not one)."""
        key = (tuple(sorted(config.items())), int(head_dim))
        cfg = self._configs.get(key)
        if cfg is None:
            cfg = self._configs[key] = self._kernel_config(config, int(head_dim))
        return cfg

    def _kernel_config(self, config: dict, head_dim: int) -> AttentionConfig:
        if head_dim not in HEAD_DIMS:
            raise GluonError(f"attention_sm90 takes head dim {' or '.join(map(str, HEAD_DIMS))}, not {head_dim}")
        kw = {k: v for k, v in config.items() if k not in _SPEC_NAMES}
        if "CONSUMER_WARPS" in config:
            w = config["CONSUMER_WARPS"]
            if isinstance(w, bool) or not isinstance(w, int) or w <= 0 or w % 4:
                raise GluonError(f"CONSUMER_WARPS={w!r}: the consumers issue WGMMA, which needs whole warpgroups "
                                 "(a multiple of 4 warps)")
            if "CONSUMER_WGS" in config and config["CONSUMER_WGS"] != w // 4:
                raise GluonError(f"CONSUMER_WARPS={w} and CONSUMER_WGS={config['CONSUMER_WGS']} disagree "
                                 "(give one of them)")
            kw["CONSUMER_WGS"] = w // 4
        pw = config.get("PRODUCER_WARPS", 1)
        if pw != 1:
            raise GluonError(f"PRODUCER_WARPS={pw!r}: attention_sm90 has one TMA producer warp")
        if "BLOCK_M" not in kw and "CONSUMER_WGS" in kw:
            kw["BLOCK_M"] = 64 * int(kw["CONSUMER_WGS"])
        return to_config(kw, _BASE)                              # AttentionConfig checks the knobs (GluonError)

    # -- without a GPU ---------------------------------------------------------------------------------
    def value_problem(self, name, value):
        if name == "PRODUCER_WARPS" and value != 1:
            return "attention_sm90 has one TMA producer warp (write warps = 1)"
        if name in WRONG_ON_GPU and value is True:
            return f"gave {WRONG_ON_GPU[name]} (docs/ATTENTION.md): not tuned (write values = [false])"
        return None

    def trace(self, config, shape, dtype, arch):
        if str(arch) != "sm90":
            raise GluonError(f"attention_sm90 runs on sm90 (WGMMA + TMA), not {arch}")
        B, H, S, D, C = (int(d) for d in shape)
        cfg = self.kernel_config(config, D)
        # the stand-ins with the divisibility `attention` specializes the sizes on (Sq = Skv = S, H query heads,
        # GROUP = 1 query head per k/v head), and its constexprs: the TTGIR a launch of this shape compiles
        return attention_sm90.trace(*stand_ins(gluon_dtype(dtype), sq=S, skv=S, heads=H, group=1), arch=arch,
                                    num_warps=num_warps(cfg), CFG=cfg, HEAD_DIM=D, CAUSAL=bool(C), Q_BSHD=False,
                                    K_BSHD=False, V_BSHD=False, WRITE_LSE=False)

    def legality_key(self, config_id, shape, dtype, arch):
        B, H, S, D, C = (int(d) for d in shape)
        return (config_id, D, bool(C), _div(S), _div(H), dtype, arch)    # B, H, S are runtime sizes

    # -- on the GPU -------------------------------------------------------------------------------------
    def make_inputs(self, shape, dtype, device, seed):
        import torch
        B, H, S, D, C = (int(d) for d in shape)
        g = torch.Generator(device=device)
        g.manual_seed(int(seed))
        dt = torch_dtype(dtype)
        q, k, v = (torch.randn(B, H, S, D, device=device, generator=g, dtype=torch.float32).to(dt) for _ in range(3))
        return {"q": q, "k": k, "v": v, "out": torch.empty(B, H, S, D, device=device, dtype=dt), "causal": bool(C),
                "scale": None}

    def run(self, inputs, config, kernel=None):
        """One launch into inputs["out"]; `kernel` (the binary the tuner's pool built from `trace`) is launched
        as it is."""
        q = inputs["q"]
        attention(q, inputs["k"], inputs["v"], causal=inputs["causal"], scale=inputs.get("scale"),
                  config=self.kernel_config(config, q.shape[-1]), out=inputs["out"], compiled=kernel)

    def reference(self, inputs):
        return reference_attention(inputs["q"], inputs["k"], inputs["v"], inputs["causal"], inputs.get("scale"))

    def baseline(self, inputs):
        """torch SDPA on the cuDNN backend, or torch's default backends where cuDNN cannot run the case (the
        callable's `backend` says which)."""
        import warnings

        import torch.nn.functional as F
        q, k, v, causal, scale = inputs["q"], inputs["k"], inputs["v"], inputs["causal"], inputs.get("scale")

        def default():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        default.backend = "default"
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError:
            return default

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        cudnn.backend = "cudnn"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")              # torch says why cuDNN declines, then raises
                cudnn()
        except RuntimeError:
            return default
        return cudnn

    def seed_configs(self, shapes=(), dtypes=()):
        """What `attention` runs at each of `shapes` ([B, H, S, D, CAUSAL]: `choose_config`, D64's three serial
        warpgroups among them), first, so `gluon build --best` serves no bucket slower than it even after a short
        search; then what it runs at D 128: the default, short causal problems' 64-key config and long unmasked
        ones' config without ping-pong. Every field in the spec's names (the study keeps those the spec searches),
        each config once."""
        picks = [choose_config(int(D), int(S), bool(C)) for _, _, S, D, C in shapes]
        seeds = []
        for seed in map(_spec_config, picks + [default_config(128), SHORT_CAUSAL_D128, LONG_D128]):
            if seed not in seeds:
                seeds.append(seed)
        return seeds

    # -- what gluon.load's callable uses -------------------------------------------------------------------
    @staticmethod
    def _bhsd(q, layout):
        B, X, Y, D = (int(d) for d in q.shape)
        return (B, Y, X, D) if layout == "bshd" else (B, X, Y, D)

    def shape_of(self, q, k=None, v=None, causal=False, scale=None, return_lse=False, layout="bhsd", out=None):
        B, H, S, D = self._bhsd(q, layout)
        return (B, H, S, D, int(bool(causal)))

    def dtype_of(self, q, *args, **kwargs):
        try:
            return dtype_name(q.dtype)
        except KeyError:                     # not a tuner dtype: no bucket; `attention` says what it takes
            return str(q.dtype)

    def bucket_distance(self, built, shape):
        """None unless the head dim and the causal flag match; else the log-space distance over B * H and S."""
        bB, bH, bS, bD, bC = (int(d) for d in built)
        B, H, S, D, C = (int(d) for d in shape)
        if bD != D or bC != C:
            return None
        return log_distance((bB * bH, bS), (B * H, S))

    def fallback_config(self, shape, dtype):
        return {}                            # `call` runs what `attention` picks for the call (choose_config)

    def call(self, config, q, k, v, causal=False, scale=None, return_lse=False, layout="bhsd", out=None):
        """`attention(q, k, v, ...)` with the bucket's config (`attention`'s own pick for `config={}`)."""
        cfg = self.kernel_config(config, q.shape[-1]) if config else None
        return attention(q, k, v, causal=causal, scale=scale, config=cfg, return_lse=return_lse, layout=layout,
                         out=out)

    def bind(self, config):
        """`call` with the bucket's config mapped to its AttentionConfig once per head dim (gluon.load's callable
        keeps it per call key)."""
        configs: dict[int, AttentionConfig] = {}

        def run(q, k, v, causal=False, scale=None, return_lse=False, layout="bhsd", out=None):
            cfg = None
            if config:
                d = q.shape[-1]
                cfg = configs.get(d)
                if cfg is None:
                    cfg = configs[d] = self.kernel_config(config, d)
            return attention(q, k, v, causal=causal, scale=scale, config=cfg, return_lse=return_lse, layout=layout,
                             out=out)
        return run

    def call_args(self, inputs):
        return inputs["q"], inputs["k"], inputs["v"]

    def call_kwargs(self, inputs):
        return {"causal": inputs["causal"], "scale": inputs.get("scale")}

    # -- models ---------------------------------------------------------------------------------------
    def flops(self, shape):
        B, H, S, D, C = (int(d) for d in shape)
        return 4.0 * B * H * S * S * D * (0.5 if C else 1.0)

    def bytes(self, shape, dtype):
        B, H, S, D, C = (int(d) for d in shape)
        return float(4 * B * H * S * D * element_size(dtype))

    def model_s(self, config, shape, dtype, peak_flops=H200_PEAK_FLOPS, peak_bw=H200_PEAK_BW, num_sms=H200_SMS):
        """For ranking dry-run configs only: the compute roofline penalized by the padding of S to BLOCK_M and
        BLOCK_N and the idle part of the last wave (CTAS_PER_SM CTAs an SM), against the K/V traffic from L2 (each
        query block reads all of its head's keys and values) and the DRAM bytes."""
        B, H, S, D, C = (int(d) for d in shape)
        cfg = self.kernel_config(config, D)
        BM, BN = cfg.BLOCK_M, cfg.BLOCK_N
        tm, tn = -(-S // BM), -(-S // BN)
        pad = (S * S) / (tm * BM * tn * BN)
        waves = waves_efficiency(tm * B * H, num_sms * cfg.CTAS_PER_SM)
        compute = self.flops(shape) / peak_flops / (pad * waves)
        es = element_size(dtype)
        kv = B * H * tm * tn * BN * D * 2 * es * (0.5 if C else 1.0)
        l2 = kv / (2.5 * peak_bw)
        dram = self.bytes(shape, dtype) / peak_bw
        return max(compute, l2, dram)


TUNING = _AttentionSM90Tuning()
