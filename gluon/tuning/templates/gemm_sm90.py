"""`gemm_sm90` (gluon/kernels/gemm_sm90/) for the tuner: `TUNING`, named by specs/gemm_sm90.toml.

A spec's config is a dict in the spec's names; `kernel_config` maps it to a `GemmConfig` once, in one place:
CONSUMER_WARPS -> CONSUMER_WGS = warps // 4; PRODUCER_WARPS must be 1 (one producer warp); CONSUMER_REGS left out,
"auto" or 0 keeps the default (the second warpgroup's budget, with SPLIT_WGS); SPLIT_K ("auto"/0 = the split_k
heuristic, else forced) is the launch's `splits`; the rest are GemmConfig fields (BLOCK_M, BLOCK_N, BLOCK_K, STAGES,
GROUP_M, SWIZZLE, EPILOGUE, PRODUCER_REGS, SPLIT_WGS, CLUSTER_M, CLUSTER_K, EARLY_LOADS, LEAN_PROLOGUE, K_ZIGZAG,
SWAP_AB, SPLITK_FIXUP, MMA_TURNS, SCALES_AHEAD, PDL, SPLITK_GRID, CTAS_PER_SM, PIPELINED_PROMOTION, QUARTERS,
N_STEP) on top of DEFAULT_CONFIG, with the "auto" values resolved as `launch` resolves them. GemmConfig checks the
knobs, the compiler passes the rest (shared memory, registers, warp roles, layouts). fp16/bf16: output dtype = input
dtype, B is [K, N] row-major, against torch.matmul. fp8 (fp8e4m3, fp8e5m2): B is [N, K] (K-major, as WGMMA reads
8-bit operands), per-tensor fp32 scales, a bf16 output, against torch._scaled_mm (cuBLASLt).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import gluon.kernels.gemm_sm90 as _kernel_package
from gluon.dtypes import DType
from gluon.ir import GluonError
from gluon.kernels.gemm_sm90 import (DEFAULT_CONFIG, GemmConfig, gemm_sm90, launch, num_warps, promises_n16,
                                     resolve_config, split_k, stand_ins, tiles)
from gluon.kernels.gemm_sm90.picks import SMALL_M
from gluon.tuning.declared_replay import tensor_type
from gluon.tuning.template import (H200_PEAK_BW, H200_PEAK_FLOPS, H200_SMS, TuningTemplate, dtype_name, element_size,
                                   gluon_dtype, log_distance, torch_dtype, waves_efficiency)

_SPEC_NAMES = ("CONSUMER_WARPS", "CONSUMER_REGS", "PRODUCER_WARPS", "SPLIT_K")
_KERNEL_DIR = Path(_kernel_package.__file__).parent


def _auto(v) -> bool:
    return v in (None, "auto", 0)


def _fp8(dtype: str) -> bool:
    return element_size(dtype) == 1


def _out_size(dtype: str) -> int:
    """C's element size for inputs of `dtype`: theirs, or 2 (bf16) for fp8."""
    return 2 if _fp8(dtype) else element_size(dtype)


FP8_SCALES = (0.5, 0.25)            # scale_a, scale_b of the tuner's fp8 problems: not 1, so a dropped scale shows


class _GemmSM90Tuning(TuningTemplate):
    name = "gemm_sm90"
    dims = ("M", "N", "K")
    dtypes = ("fp16", "bf16", "fp8e4m3", "fp8e5m2")
    archs = ("sm90",)
    params = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "STAGES", "GROUP_M", "SWIZZLE", "EPILOGUE", "CONSUMER_WARPS",
              "CONSUMER_REGS", "PRODUCER_WARPS", "PRODUCER_REGS", "CONSUMER_WGS", "SPLIT_K", "SPLIT_WGS", "CLUSTER_M",
              "CLUSTER_K", "EARLY_LOADS", "LEAN_PROLOGUE", "K_ZIGZAG", "SWAP_AB", "SPLITK_FIXUP", "MMA_TURNS",
              "SCALES_AHEAD", "PDL", "SPLITK_GRID", "CTAS_PER_SM", "PIPELINED_PROMOTION", "QUARTERS", "N_STEP")

    SCALE = "tensor"                # the fp8 problems' scale kind (gemm_sm90_fp8_scales.py has the others)

    def __init__(self):
        self._runs: dict[tuple, tuple[GemmConfig, int | None]] = {}      # run(): (config, dtype) -> launch args
        self._binds: dict[tuple, object] = {}                            # call(): config -> `bind`'s callable

    def source_hash(self) -> str:
        """sha256 (16 hex digits) of this adapter and of the kernel package it drives: rows of an edited
        kernel are not mistaken for the current one's."""
        h = hashlib.sha256(Path(__file__).read_bytes())
        for f in sorted(_KERNEL_DIR.glob("*.py")):
            h.update(f.name.encode() + b"\0" + f.read_bytes())
        return h.hexdigest()[:16]

    # -- the spec's names -> GemmConfig -------------------------------------------------------------------
    def knobs(self, config: dict) -> GemmConfig:
        """The spec's config as a GemmConfig, "auto" values not yet resolved."""
        kw = {k: v for k, v in config.items() if k not in _SPEC_NAMES}
        if "CONSUMER_WARPS" in config:
            w = int(config["CONSUMER_WARPS"])
            if w <= 0 or w % 4:
                raise GluonError(f"CONSUMER_WARPS={w}: the consumers issue WGMMA, which needs whole "
                                 "warpgroups (a multiple of 4 warps)")
            kw["CONSUMER_WGS"] = w // 4
        pw = config.get("PRODUCER_WARPS", 1)
        if int(pw) != 1:
            raise GluonError(f"PRODUCER_WARPS={pw}: gemm_sm90 has one producer warp")
        if not _auto(config.get("CONSUMER_REGS")):
            kw["CONSUMER_REGS"] = int(config["CONSUMER_REGS"])   # GemmConfig: only with SPLIT_WGS
        return DEFAULT_CONFIG.replace(**kw)

    def kernel_config(self, config: dict, dtype: str) -> GemmConfig:
        """The GemmConfig the kernel runs for this spec config and dtype (its "auto" values resolved)."""
        return self.knobs(config).resolve(_out_size(dtype))

    def splits(self, config: dict, shape, num_sms: int = H200_SMS) -> int:
        s = config.get("SPLIT_K", "auto")
        if _auto(s):
            M, N, K = shape
            return split_k(M, N, K, self.knobs(config), num_sms)
        return int(s)

    # -- without a GPU ---------------------------------------------------------------------------------
    def value_problem(self, name, value):
        if name == "PRODUCER_WARPS" and value != 1:
            return "gemm_sm90 has one producer warp (write warps = 1)"
        return None

    def trace(self, config, shape, dtype, arch):
        if str(arch) != "sm90":
            raise GluonError(f"gemm_sm90 runs on sm90 (WGMMA + TMA), not {arch}")
        cfg = self.kernel_config(config, dtype)
        S = self.splits(config, shape)
        # rows of C a multiple of 16 elements: promised where `launch` promises it (split-K partials stored in
        # pairs, the coalesced epilogue's 16-byte stores), so the binary timed is the one a launch runs
        n16 = promises_n16(cfg, S, shape[1])
        if _fp8(dtype):
            return gemm_sm90.trace(*stand_ins(gluon_dtype(dtype), DType.bf16, splits=S), arch=arch,
                                   num_warps=num_warps(cfg), CFG=cfg, B_KMAJOR=True, SCALE=self.SCALE,
                                   N_MULTIPLE_16=n16)
        return gemm_sm90.trace(*stand_ins(gluon_dtype(dtype), splits=S), arch=arch, num_warps=num_warps(cfg),
                               CFG=cfg, B_KMAJOR=False, N_MULTIPLE_16=n16)

    def legality_key(self, config_id, shape, dtype, arch):
        return (config_id, dtype, arch)            # the trace has symbolic sizes

    def compile_key(self, config_id, shape, dtype, arch):
        # one binary per (config, dtype, whether N is a multiple of 16): the trace has symbolic sizes; SPLITS and
        # N_MULTIPLE_16 are traced as the first shape's split count has them (a shape of the key with another
        # count may run without the promise, never with a false one; a launch through `launch` alone would
        # specialize a split count of 16 once more)
        return (config_id, dtype, arch, shape[1] % 16 == 0)

    # -- on the GPU -------------------------------------------------------------------------------------
    def make_inputs(self, shape, dtype, device, seed):
        import torch
        M, N, K = shape
        g = torch.Generator(device=device)
        g.manual_seed(int(seed))
        dt = torch_dtype(dtype)
        a = torch.randn(M, K, device=device, generator=g, dtype=torch.float32).to(dt)
        if not _fp8(dtype):
            b = torch.randn(K, N, device=device, generator=g, dtype=torch.float32).to(dt)
            return {"a": a, "b": b, "out": torch.empty(M, N, device=device, dtype=dt),
                    "base_out": torch.empty(M, N, device=device, dtype=dt)}
        b = torch.randn(N, K, device=device, generator=g, dtype=torch.float32).to(dt)    # K-major
        sa, sb = self.fp8_scales(M, N, K, device, g)
        return {"a": a, "b": b, "scale_a": sa, "scale_b": sb,
                "out": torch.empty(M, N, device=device, dtype=torch.bfloat16),
                "base_out": torch.empty(M, N, device=device, dtype=torch.bfloat16)}

    def fp8_scales(self, M: int, N: int, K: int, device, g) -> tuple:
        """(scale_a, scale_b) of an fp8 problem: one fp32 element each (FP8_SCALES); the scaled templates'
        (gemm_sm90_fp8_scales.py) draw theirs from `g`."""
        import torch
        return tuple(torch.tensor([s], device=device, dtype=torch.float32) for s in FP8_SCALES)

    def run(self, inputs, config, kernel=None):
        """One launch; `kernel` (the binary the tuner's pool built from `trace`) is launched as it is."""
        a, out = inputs["a"], inputs["out"]
        key = (tuple(sorted(config.items())), a.dtype)
        args = self._runs.get(key)
        if args is None:                           # the mapping once per config, not per timed launch
            s = config.get("SPLIT_K", "auto")
            args = self._runs[key] = (self.kernel_config(config, dtype_name(a.dtype)), None if _auto(s) else int(s))
        if a.element_size() == 1:
            launch(a, inputs["b"], out, args[0], b_kmajor=True, splits=args[1], compiled=kernel,
                   scale_a=inputs["scale_a"], scale_b=inputs["scale_b"])
        else:
            launch(a, inputs["b"], out, args[0], splits=args[1], compiled=kernel)

    def reference(self, inputs):
        a, b = inputs["a"], inputs["b"]
        if a.element_size() == 1:
            return (a.double() * inputs["scale_a"].double()) @ (b.double() * inputs["scale_b"].double()).T
        return a.double() @ b.double()

    def seed_configs(self, shapes=(), dtypes=()):
        """What `launch` runs at each of `shapes` x `dtypes` (`pick`), first: every bucket of a spec whose problems
        differ (decode's M = 1 .. 128) has its pick measured before anything else, so `gluon build --best` serves
        none slower than it even after a short search. Then what choose_config runs where programs have several
        tiles (DEFAULT_CONFIG with SPLIT_WGS and K_ZIGZAG: 1.01-1.04x cuBLAS at 4096^3-8192^3 on the H200,
        docs/PERF.md), without K_ZIGZAG, and the cooperative form, in the spec's names; then the same with fp8's
        k-step (128 one-byte elements, what `launch` runs for fp8 inputs). A spec's study takes those in its
        space (a 16-bit spec the first three, an fp8 one the last three) and queues each config once."""
        d = DEFAULT_CONFIG
        cfg = dict(BLOCK_M=d.BLOCK_M, BLOCK_N=d.BLOCK_N, BLOCK_K=d.BLOCK_K, STAGES=d.STAGES, GROUP_M=d.GROUP_M,
                   PRODUCER_REGS=d.PRODUCER_REGS, SWIZZLE=d.SWIZZLE, EPILOGUE="tma", SPLIT_WGS=d.SPLIT_WGS,
                   CONSUMER_REGS=d.CONSUMER_REGS, CLUSTER_M=d.CLUSTER_M, CONSUMER_WARPS=4 * d.CONSUMER_WGS,
                   PRODUCER_WARPS=1, K_ZIGZAG=False)
        sixteen = [dict(cfg, SPLIT_WGS=True, K_ZIGZAG=True), dict(cfg, SPLIT_WGS=True), cfg]
        picks = [self.pick(shape, dtype) for shape in shapes for dtype in dtypes if dtype in self.dtypes]
        return picks + sixteen + [dict(c, BLOCK_K=2 * c["BLOCK_K"]) for c in sixteen]

    def pick(self, shape, dtype: str, num_sms: int = H200_SMS) -> dict:
        """`launch`'s config for contiguous operands of `shape` and `dtype` (choose_config's, "auto" values
        resolved; the split count left to "auto", which splits as `launch` does), in the spec's names."""
        M, N, K = shape
        es = element_size(dtype)
        aligned = K * es % 128 == 0 and (K if _fp8(dtype) else N) * es % 128 == 0
        given = self.launch_overrides(M, N, K, num_sms, _out_size(dtype), aligned)
        cfg = resolve_config(M, N, K, num_sms, _out_size(dtype), aligned, given, es)
        out = {k: v for k, v in cfg.to_dict().items() if k in self.params}
        return dict(out, CONSUMER_WARPS=4 * cfg.CONSUMER_WGS, PRODUCER_WARPS=1, SPLIT_K="auto")

    def launch_overrides(self, M: int, N: int, K: int, num_sms: int, out_size: int, aligned: bool) -> dict | None:
        """What `launch` puts on top of choose_config's pick for this template's problems (None: nothing)."""
        return None

    def shape_of(self, a, b, out=None, scale_a=None, scale_b=None):
        import torch
        for name, t in (("a", a), ("b", b)):
            if not isinstance(t, torch.Tensor) or t.dim() != 2:
                got = f"shape {list(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
                raise GluonError(f"{self.name}: {name} must be a 2-D torch.Tensor, got {got}")
        fp8 = a.element_size() == 1
        bK = b.shape[1] if fp8 else b.shape[0]
        if bK != a.shape[1]:        # here, before a bucket is chosen (and a fallback warned of) for a bad call
            form = "[N, K] (fp8)" if fp8 else "[K, N]"
            raise GluonError(f"{self.name}: a is {list(a.shape)} (K = {a.shape[1]}) and b {list(b.shape)}, read as "
                             f"{form}, has K = {bK}")
        return (a.shape[0], b.shape[0] if fp8 else b.shape[1], a.shape[1])

    def bucket_distance(self, built, shape):
        """The log-space distance, but None across the decode boundary (SMALL_M rows of A, where `launch` swaps A
        and B): a prefill bucket's tiles would leave most SMs idle at a few rows (128x256 tiles: 16 of them at 1 x
        4096 x 4096), a decode bucket's swapped tiles would run prefill on 64-row tiles."""
        if (built[0] <= SMALL_M) != (shape[0] <= SMALL_M):
            return None
        return log_distance(built, shape)

    def bucket_key(self, args: tuple, kwargs: dict) -> tuple | None:
        """What a `gluon.load` call's bucket depends on, for the loader's cache of bound calls: a's and b's
        shapes and a's dtype (shape_of's and dtype_of's inputs; strides, devices, `out` and the scales are
        `launch`'s, which keys its own fast path on them), or None where a and b are not the first two
        positional tensors (the loader's general key then)."""
        if len(args) < 2:
            return None
        a, b = args[0], args[1]
        T = tensor_type()
        if type(a) is not T or type(b) is not T:
            return None
        return "gemm", a.shape, b.shape, a.dtype

    def fallback_config(self, shape, dtype):
        return {}                   # `launch`'s own pick for the call (choose_config), with the loader's warning

    def call(self, config, a, b, out=None, scale_a=None, scale_b=None):
        """c = a @ b (a [M, K], b [K, N] row-major, one dtype); fp8: c = (scale_a a) @ (scale_b b).T in bf16,
        b [N, K] (nn.Linear's weight), scales fp32 of one element each. `out` is written when given."""
        key = tuple(sorted(config.items()))
        fn = self._binds.get(key)
        if fn is None:
            fn = self._binds[key] = self.bind(config)
        return fn(a, b, out=out, scale_a=scale_a, scale_b=scale_b)

    def bind(self, config):
        """`call` with `config` mapped to its GemmConfig and split count once (gluon.load's callable keeps it
        per call key): per call the output's allocation and `launch`."""
        import torch
        # "auto" values: `launch` resolves them per problem, once; no config (the fallback): `launch`'s own pick
        cfg = self.knobs(config) if config else None
        s = config.get("SPLIT_K", "auto")
        splits = None if _auto(s) else int(s)
        empty, bf16 = torch.empty, torch.bfloat16

        def gemm(a, b, out=None, scale_a=None, scale_b=None):
            fp8 = a.element_size() == 1
            if out is None:
                out = empty(a.shape[0], b.shape[0] if fp8 else b.shape[1], device=a.device,
                            dtype=bf16 if fp8 else a.dtype)
            if not fp8:
                return launch(a, b, out, cfg, splits=splits)
            if scale_a is None or scale_b is None:
                raise GluonError(self.missing_scales(a, b))
            return launch(a, b, out, cfg, b_kmajor=True, splits=splits, scale_a=scale_a, scale_b=scale_b)
        return gemm

    def missing_scales(self, a, b) -> str:
        """The error of an fp8 call without its scales."""
        return "gemm_sm90 of fp8 inputs takes scale_a= and scale_b= (fp32 tensors of one element each)"

    def call_args(self, inputs):
        return inputs["a"], inputs["b"]

    def call_kwargs(self, inputs):
        return {k: inputs[k] for k in ("scale_a", "scale_b") if k in inputs}

    def baseline(self, inputs):
        import torch
        a, b, o = inputs["a"], inputs["b"], inputs["base_out"]
        if a.element_size() == 1:
            sa, sb = inputs["scale_a"], inputs["scale_b"]
            return lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, out=o)
        return lambda: torch.matmul(a, b, out=o)

    # -- models ---------------------------------------------------------------------------------------
    def flops(self, shape):
        M, N, K = shape
        return 2.0 * M * N * K

    def bytes(self, shape, dtype):
        M, N, K = shape
        return float(element_size(dtype) * (M * K + K * N) + _out_size(dtype) * M * N)

    def roofline_s(self, shape, dtype, peak_flops=H200_PEAK_FLOPS, peak_bw=H200_PEAK_BW):
        """As the template's, at fp8's doubled tensor-core rate for fp8 inputs."""
        return super().roofline_s(shape, dtype, peak_flops * (2 if _fp8(dtype) else 1), peak_bw)

    def model_s(self, config, shape, dtype, peak_flops=H200_PEAK_FLOPS, peak_bw=H200_PEAK_BW, num_sms=H200_SMS):
        """Roofline penalized by quantization: tile padding of M, N, K, the idle part of the last wave
        of (tile, K-slice) units, L2->SM operand traffic of the tile shape, and the split-K workspace."""
        M, N, K = shape
        cfg = self.knobs(config)
        BM, BN, BK = cfg.BLOCK_M, cfg.BLOCK_N, cfg.BLOCK_K
        tm, tn, tk = -(-M // BM), -(-N // BN), -(-K // BK)
        S = self.splits(config, shape, num_sms)
        pad = (M * N * K) / (tm * BM * tn * BN * tk * BK)
        waves = waves_efficiency(tiles(M, N, cfg) * S, num_sms * cfg.CTAS_PER_SM)
        peak = peak_flops * (2 if _fp8(dtype) else 1)           # fp8 tensor cores: twice the 16-bit rate
        compute = self.flops(shape) / peak / (pad * waves)
        es = element_size(dtype)
        dram = self.bytes(shape, dtype) / peak_bw
        l2 = (tm * BM * tn * BN * tk * BK) * es * (1.0 / BM + 1.0 / BN) / (2.5 * peak_bw)
        workspace = (2.0 * S * M * N * 4 / peak_bw) if S > 1 else 0.0
        return max(compute, dram, l2) + workspace


TUNING = _GemmSM90Tuning()
