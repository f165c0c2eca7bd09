"""The SM90 attention forward on the GPU: every case of issue 16's list against an fp32 reference on fresh
random inputs, the output poisoned (NaN) before the run; sizes that are and are not multiples of the tiles."""
import math

import pytest

from gluon.kernels.attention_sm90.reference import reference

pytestmark = pytest.mark.gpu
TOL = 1e-2


def rel_error(out, ref) -> float:
    """max |out - ref| / max |ref|."""
    return ((out.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def _inputs(B, H, HK, Sq, Skv, D, dtype, layout="bhsd", seed=0):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)

    def make(h, s):
        if layout == "bshd":
            return torch.randn(B, s, h, D, device="cuda", dtype=dtype, generator=g).transpose(1, 2)
        return torch.randn(B, h, s, D, device="cuda", dtype=dtype, generator=g)
    return make(H, Sq), make(HK, Skv), make(HK, Skv)


def _heads(B, H):
    """All (batch, head) pairs of a small problem; the first, last and a middle one of a large one."""
    if B * H <= 16:
        return [(b, h) for b in range(B) for h in range(H)]
    return [(0, 0), (B // 2, H // 2), (B - 1, H - 1)]


def _run(B, H, HK, Sq, Skv, D, causal, dtype, layout="bhsd", config=None, lse=False, lse_tol=1e-3):
    import torch
    from gluon.kernels.attention_sm90 import attention
    q, k, v = _inputs(B, H, HK, Sq, Skv, D, getattr(torch, dtype), layout, seed=Sq + 3 * Skv + D + causal)
    scale = 1 / math.sqrt(D)
    out = torch.full_like(q, float("nan"))
    got = attention(q, k, v, causal=causal, scale=scale, config=config, return_lse=lse, out=out)
    o = got[0] if lse else got
    assert o.data_ptr() == out.data_ptr()
    heads = _heads(B, H)
    ref_o, ref_l = reference(q, k, v, causal, scale, heads=heads, with_lse=True)
    sel = torch.stack([o[b, h] for b, h in heads])
    assert not torch.isnan(sel).any()
    err = rel_error(sel, ref_o)
    assert err <= TOL, f"relative error {err:.3e}"
    if lse:
        lse_sel = torch.stack([got[1][b, h] for b, h in heads])
        fin = torch.isfinite(ref_l)
        assert torch.equal(torch.isfinite(lse_sel), fin)
        assert (lse_sel[fin] - ref_l[fin]).abs().max().item() < lse_tol


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B,H,S,D", [(2, 16, 16384, 128), (8, 16, 4096, 128), (16, 16, 1024, 128), (4, 32, 4096, 64),
                                     (2, 16, 4096, 256)])
def test_issue_shapes(B, H, S, D, causal, dtype):
    _run(B, H, H, S, S, D, causal, dtype)


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("S", [1000, 4097, 1, 63, 200])
def test_sizes_not_multiples_of_the_tiles(S, causal, D):
    _run(2, 4, 4, S, S, D, causal, "bfloat16", lse=True)


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Sq,Skv", [(300, 1700), (1700, 300), (1, 4096), (128, 129)])
def test_query_and_key_lengths_differ(Sq, Skv, causal, D):
    """Bottom-right causal alignment; with Sq > Skv the first Sq - Skv queries see no key (zeros, LSE -inf)."""
    _run(2, 4, 4, Sq, Skv, D, causal, "float16", lse=True)


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("H,HK", [(32, 8), (16, 1), (8, 2)])
def test_grouped_query_attention(H, HK, D):
    _run(2, H, HK, 1537, 1537, D, True, "bfloat16")


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_bshd_inputs_without_copies(D, causal):
    """[B, S, H, D] tensors (layout='bshd', and their [B, H, S, D] transposes) run on 2-D views of the
    inputs' own storage; the output comes back in the same layout."""
    import torch
    from gluon.kernels.attention_sm90 import attention
    _run(2, 8, 4, 999, 999, D, causal, "bfloat16", layout="bshd")
    q, k, v = (torch.randn(2, 777, 8, D, device="cuda", dtype=torch.float16) for _ in range(3))
    o = attention(q, k, v, causal=causal, layout="bshd")
    assert o.shape == q.shape and o.stride() == q.stride()
    ref = reference(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal, 1 / math.sqrt(D))
    assert rel_error(o.transpose(1, 2), ref) <= TOL


def test_packed_qkv_slices():
    """q, k, v sliced out of one [B, S, 3, H, D] tensor (rows 3*H*D apart) need no copy either."""
    import torch
    from gluon.kernels.attention_sm90 import attention
    from gluon.kernels.attention_sm90.host import _view2d
    qkv = torch.randn(2, 1000, 3, 8, 128, device="cuda", dtype=torch.bfloat16)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    assert _view2d(q) is not None and _view2d(q)[0].data_ptr() == q.data_ptr()
    o = attention(q, k, v, causal=True)
    assert rel_error(o, reference(q, k, v, True, 1 / math.sqrt(128))) <= TOL


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("config", [
    dict(OVERLAP=False, PINGPONG=False), dict(OVERLAP=True, PINGPONG=False), dict(STAGES=3, PERSISTENT=False), dict(BLOCK_N=64),
    dict(CONSUMER_WGS=3, BLOCK_M=192, CONSUMER_REGS=160, PINGPONG=False, STAGES=2),
    dict(CONSUMER_WGS=1, BLOCK_M=64, CONSUMER_REGS=240, PINGPONG=False), dict(REVERSE_M=False),
    dict(PINGPONG=True, OVERLAP=True, CONSUMER_WGS=2, BLOCK_M=128, CONSUMER_REGS=240),
    dict(PINGPONG=True, OVERLAP=True, CONSUMER_WGS=2, BLOCK_M=128, CONSUMER_REGS=240, STAGES=3, BLOCK_N=64),
    dict(PERSISTENT=True, PINGPONG=False, STAGES=2), dict(PERSISTENT=True, OVERLAP=False, PINGPONG=False, STAGES=2),
    dict(PERSISTENT=False, PINGPONG=True, OVERLAP=True, CONSUMER_WGS=2, BLOCK_M=128, CONSUMER_REGS=240, STAGES=2),
    dict(PERSISTENT=True, CONSUMER_WGS=3, BLOCK_M=192, CONSUMER_REGS=160, OVERLAP=False, PINGPONG=False, STAGES=2),
    dict(CONSUMER_WGS=1, BLOCK_M=64, PINGPONG=False, OVERLAP=False, BLOCK_N=64, CTAS_PER_SM=2),
    dict(CONSUMER_WGS=1, BLOCK_M=64, PINGPONG=False, OVERLAP=False, BLOCK_N=64, PERSISTENT=True, CTAS_PER_SM=2)])
def test_configs(config, D):
    for causal in (False, True):
        _run(2, 4, 2, 1111, 1111, D, causal, "float16", config=config)


def _check_variant(D, config):
    """A config against the reference, causal and not, at sizes off the tiles and with Sq != Skv; then the
    same call three more times, bit-identical (no race)."""
    import torch
    from gluon.kernels.attention_sm90 import attention
    for causal in (False, True):
        _run(2, 4, 2, 1111, 1111, D, causal, "float16", config=config)
        _run(1, 4, 4, 300, 700, D, causal, "bfloat16", config=config)
    q, k, v = _inputs(2, 8, 8, 2048, 2048, D, torch.bfloat16)
    a = attention(q, k, v, causal=True, config=config)
    for _ in range(3):
        assert torch.equal(attention(q, k, v, causal=True, config=config), a)


@pytest.mark.parametrize("D,config", [
    (64, dict(P_SMEM=True)), (64, dict(P_SMEM=True, OVERLAP=True)),
    (128, dict(P_SMEM=True, BLOCK_N=64, PINGPONG=False, STAGES=3))])
def test_p_through_shared_memory(D, config):
    """P_SMEM: P stored to the warpgroup's shared tiles, O += P V from shared memory (two tiles in turn with
    OVERLAP); sizes off the tiles, Sq != Skv, and repeated calls bit-identical (no race on the P tiles)."""
    _check_variant(D, config)


@pytest.mark.parametrize("D,config", [
    (128, dict(PIN_SOFTMAX=True)), (128, dict(PIN_SOFTMAX=True, PINGPONG=False)),
    (128, dict(PIN_SOFTMAX=True, PERSISTENT=False, BLOCK_N=64, STAGES=3)),
    (64, dict(PIN_SOFTMAX=True, OVERLAP=True, BLOCK_M=128, CONSUMER_WGS=2, CONSUMER_REGS=240)),
    (64, dict(PIN_SOFTMAX=True, OVERLAP=True, BLOCK_N=64))])
def test_pinned_softmax(D, config):
    """PIN_SOFTMAX: the overlapped softmax runs while P V's register operand is in flight (P_j in other registers
    than P_(j-1)); sizes off the tiles, Sq != Skv, and repeated calls bit-identical."""
    _check_variant(D, config)


@pytest.mark.parametrize("D,config", [
    (64, dict(PINGPONG=True)), (64, dict(PINGPONG=True, PERSISTENT=True)),
    (64, dict(PINGPONG=True, OVERLAP=False, BLOCK_M=128, CONSUMER_WGS=2, CONSUMER_REGS=240)),
    (128, dict(PINGPONG=True, OVERLAP=False)), (256, dict(PINGPONG=True)), (128, dict(HOLD_TURNS=True, PINGPONG=True)),
    (128, dict(HOLD_TURNS=True, PINGPONG=True, PERSISTENT=False, STAGES=3)),
    (64, dict(PINGPONG=True, OVERLAP=True, BLOCK_M=128, CONSUMER_WGS=2, CONSUMER_REGS=240, HOLD_TURNS=True)),
    (64, dict(PINGPONG=True, OVERLAP=True, HOLD_TURNS=True, P_SMEM=True)),
    (64, dict(PINGPONG=True, OVERLAP=True, HOLD_TURNS=True, BLOCK_N=64))])
def test_serial_and_held_turns(D, config):
    """Turns held until the GEMM is done: PINGPONG without OVERLAP (the P V GEMMs round robin over two or three
    warpgroups; a warpgroup past Sq or right of the diagonal still takes its turns) and HOLD_TURNS (the overlapped
    loop's turn handed on once S is done); sizes off the tiles, Sq != Skv, repeated calls bit-identical."""
    _check_variant(D, config)


@pytest.mark.parametrize("D,config", [
    (64, dict(ROWSUM_MMA=True)), (64, dict(ROWSUM_MMA=True, PINGPONG=True)), (64, dict(ROWSUM_MMA=True, P_SMEM=True)),
    (64, dict(ROWSUM_MMA=True, BLOCK_N=64)), (256, dict(ROWSUM_MMA=True)),
    (128, dict(ROWSUM_MMA=True, OVERLAP=False, PINGPONG=False, PIN_SOFTMAX=False)),
    (128, dict(ROWSUM_MMA=True, PERSISTENT=False, PIN_SOFTMAX=False)),
    (64, dict(ROWSUM_MMA=True, OVERLAP=True, BLOCK_N=64)), (64, dict(ROWSUM_MMA=True, OVERLAP=True, P_SMEM=True))])
def test_row_sums_on_the_tensor_cores(D, config):
    """ROWSUM_MMA: the row sums l from P times a tile of ones on the tensor cores, serial and overlapped (l += P_{j-1}
    ones with P_{j-1} V_{j-1}); sizes off the tiles, Sq != Skv,
    repeated calls bit-identical, and the LSE within the rounding of P it sums (2^-9 relative in l with bf16)."""
    _check_variant(D, config)
    for causal in (False, True):
        _run(2, 4, 4, 1000, 1000, D, causal, "bfloat16", config=config, lse=True, lse_tol=2.5e-3)


@pytest.mark.parametrize("D,config", [(64, dict(TREE_MAX=True)), (128, dict(TREE_MAX=True)),
                                      (64, dict(TREE_MAX=True, ROWSUM_MMA=True)), (256, dict(TREE_MAX=True))])
def test_tree_max(D, config):
    """TREE_MAX: each row's max over four column quarters' chains; sizes off the tiles (masked blocks: -inf scores),
    Sq != Skv, repeated calls bit-identical, and the LSE as the default's tolerance allows."""
    _check_variant(D, config)
    for causal in (False, True):
        _run(2, 4, 4, 1000, 1000, D, causal, "bfloat16", config=config, lse=True,
             lse_tol=2.5e-3 if config.get("ROWSUM_MMA") else 1e-3)


@pytest.mark.parametrize("D,config", [(64, dict(OVERLAP=True, JOINT_WAIT=True)),
                                      (64, dict(OVERLAP=True, JOINT_WAIT=True, TREE_MAX=True, PERSISTENT=True)),
                                      (128, dict(JOINT_WAIT=True, PIN_SOFTMAX=False))])
def test_joint_wait(D, config):
    """JOINT_WAIT: the overlapped loop's S and P V GEMMs waited for together, the softmax after both; sizes off the
    tiles, Sq != Skv, repeated calls bit-identical."""
    _check_variant(D, config)


@pytest.mark.parametrize("D,config", [(64, dict(PERSISTENT=True, OVERLAP=False)),
                                      (64, dict(PERSISTENT=True, OVERLAP=True)),
                                      (128, dict(PERSISTENT=True, OVERLAP=False, PINGPONG=False)),
                                      (128, dict(PERSISTENT=True)),
                                      (64, dict(PERSISTENT=True, OVERLAP=False, EARLY_Q_RELEASE=True)),
                                      (64, dict(PERSISTENT=True, OVERLAP=False, EARLY_Q_RELEASE=True, PINGPONG=True)),
                                      (64, dict(PERSISTENT=True, OVERLAP=False, PREFETCH_Q=True)),
                                      (64, dict(PERSISTENT=True, OVERLAP=False, PREFETCH_Q=True, PINGPONG=True))])
def test_persistent_q_buffers(D, config):
    """The persistent kernels, serial (one Q buffer, handed back after the epilogue or, EARLY_Q_RELEASE, before
    it) and overlapped (two), with one CTA walking many tiles (more units than SMs) at Skv < BLOCK_N, where the
    unmasked loop runs no step (a serial kernel with two Q buffers read a wrong Q there); the LSE checked: at Skv = 1
    O is V whatever Q is, only the LSE sees a wrong Q. Then sizes off the tiles, Sq != Skv, repeated calls
    bit-identical. PREFETCH_Q: the check of its fix (one serial loop; ptxas 12.8 read the Q descriptors stale with
    two), which passed on an H100 in the thirty-eighth session."""
    for causal in (False, True):
        for skv in (1, 17, 100, 127):
            _run(3, 64, 64, skv, skv, D, causal, "float16", config=config, lse=True)
            _run(2, 48, 16, 200, skv, D, causal, "bfloat16", config=config, lse=True)
    _check_variant(D, config)


def test_switches_wrong_on_the_gpu_are_refused_there(monkeypatch):
    """A switch listed in config.WRONG_ON_GPU (none is now; PREFETCH_Q was until the thirty-eighth session):
    `attention` refuses it with one line naming the switch instead of returning wrong numbers."""
    import torch
    from gluon.ir import GluonError
    from gluon.kernels.attention_sm90 import attention, config, host
    monkeypatch.setitem(config.WRONG_ON_GPU, "PREFETCH_Q", "a wrong log-sum-exp (a test's entry)")
    monkeypatch.setattr(host, "_PLANS", {})             # a plan (or fast path) made before would skip the check
    monkeypatch.setattr(host, "_FAST", {})
    q, k, v = _inputs(1, 2, 2, 200, 200, 64, torch.bfloat16)
    with pytest.raises(GluonError, match="PREFETCH_Q=True gave a wrong log-sum-exp"):
        attention(q, k, v, config={"PERSISTENT": True, "OVERLAP": False, "PREFETCH_Q": True})


def test_scale_argument():
    _run(1, 4, 4, 640, 640, 128, False, "bfloat16", config=None)
    import torch
    from gluon.kernels.attention_sm90 import attention
    q, k, v = _inputs(1, 2, 2, 256, 256, 64, torch.float16)
    o = attention(q, k, v, scale=0.3)
    assert rel_error(o, reference(q, k, v, False, 0.3)) <= TOL


@pytest.mark.parametrize("config", [None, dict(PINGPONG=False), dict(OVERLAP=False, PINGPONG=False)])
def test_repeated_calls_are_stable(config):
    """The same call again gives the same bits (no race between the warpgroups or the ring)."""
    import torch
    from gluon.kernels.attention_sm90 import attention
    q, k, v = _inputs(4, 16, 16, 2048, 2048, 128, torch.bfloat16)
    a = attention(q, k, v, causal=True, config=config)
    for _ in range(3):
        assert torch.equal(attention(q, k, v, causal=True, config=config), a)


@pytest.mark.parametrize("kw", [dict(), dict(causal=True, layout="bshd"), dict(return_lse=True, scale=0.2),
                                dict(D=128, causal=True), dict(HK=2)])
def test_a_repeated_call_on_new_inputs_equals_a_first_call(kw):
    """The second call of a problem (the `_FAST` path: descriptors from the new base addresses) gives, on
    fresh inputs of the same shapes, bit for bit what a first call (the full path) gives on them."""
    import torch
    import gluon.kernels.attention_sm90.host as host
    from gluon.kernels.attention_sm90 import attention
    kw = dict(kw)
    D, HK, layout = kw.pop("D", 64), kw.pop("HK", 4), kw.get("layout", "bhsd")
    B, H, S = 2, 4, 300

    def make(seed):
        q, k, v = _inputs(B, H, HK, S, S, D, torch.bfloat16, layout, seed=seed)
        if layout == "bshd":                      # attention takes [B, S, H, D] tensors with layout="bshd"
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        return q, k, v
    host._FAST.clear()
    attention(*make(1), **kw)                     # the full path, which records the fast plan
    assert len(host._FAST) == 1
    fresh = make(2)
    fast = attention(*fresh, **kw)
    host._FAST.clear()
    full = attention(*fresh, **kw)
    torch.cuda.synchronize()
    for a, b in zip(fast if isinstance(fast, tuple) else (fast,), full if isinstance(full, tuple) else (full,)):
        assert a.shape == b.shape and a.stride() == b.stride() and torch.equal(a, b)


@pytest.mark.parametrize("D,config", [(64, {}), (128, {}), (64, dict(PERSISTENT=True, OVERLAP=False, PREFETCH_Q=True))])
@pytest.mark.parametrize("causal", [False, True])
def test_ffma_yield_gives_the_same_o_bit_for_bit(D, config, causal):
    """FFMA_YIELD (control bits of the softmax's FFMAs set in the binary after ptxas) runs the same instructions:
    O bit for bit as without it (the head dim's default, and PREFETCH_Q), within 1e-2 of the fp32 reference."""
    import torch
    from gluon.kernels.attention_sm90 import attention
    q, k, v = _inputs(2, 16, 16, 1000, 1000, D, torch.bfloat16, seed=5)
    outs = []
    for y in (False, True):
        out = torch.full_like(q, float("nan"))
        outs.append(attention(q, k, v, causal=causal, config=dict(config, FFMA_YIELD=y), out=out))
    torch.cuda.synchronize()
    assert not torch.isnan(outs[1]).any() and torch.equal(outs[0], outs[1])
    assert rel_error(outs[1], reference(q, k, v, causal)) <= TOL


@pytest.mark.parametrize("D,config", [(64, dict(Q_REGS=True)),
                                      (64, dict(Q_REGS=True, PERSISTENT=True, OVERLAP=False, EARLY_Q_RELEASE=True,
                                                PINGPONG=True))])
def test_q_in_registers(D, config):
    """Q_REGS: each warpgroup's Q tile read into registers once a tile for every S GEMM; with the LSE (a wrong Q shows
    there even where O does not), one CTA walking many tiles where persistent, sizes off the tiles, Sq != Skv,
    repeated calls bit-identical."""
    for causal in (False, True):
        for skv in (1, 100):
            _run(3, 64, 64, skv, skv, D, causal, "float16", config=config, lse=True)
    _check_variant(D, config)
