"""The SM90 attention forward (FlashAttention-3-class): warp-specialized, TMA + WGMMA, online softmax.

    o = attention(q, k, v)                                # [B, H, S, D], as torch SDPA
    o = attention(q, k, v, causal=True, scale=0.1)
    o, lse = attention(q, k, v, return_lse=True)
    o = attention(q, k, v, config={"OVERLAP": False})     # fields of the chosen config overridden

* config.py: `AttentionConfig` (the knobs, checked when made), the default per head dim and `choose_config`
  (per problem: short causal D128 takes 64-key steps), grid and warps.
* kernel.py: the `@kernel` `attention_sm90(Q, K, V, O, L, Sq, Skv, H, GROUP, qk_scale, CFG, HEAD_DIM, ...)`.
* host.py: `attention` (checks, 2-D views without copies, plan cache), `compile_variant` / `stand_ins`
  compile without a GPU.
"""
from .config import (DEFAULT_CONFIGS, FIELDS, HEAD_DIMS, AttentionConfig, choose_config, default_config,  # noqa: F401
                     grid, num_warps, to_config)
from .kernel import attention_sm90  # noqa: F401
from .host import attention, compile_variant, stand_ins  # noqa: F401
