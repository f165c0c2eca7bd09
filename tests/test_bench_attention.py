"""bench/attention.py and its plain Triton baseline on the CPU: the CLI, the cases, the FLOP count, the
bottom-right causal mask, the reference and the error, the row logic with fake implementations, the
Triton kernel run by Triton's interpreter and compiled for sm_90 (the benchmark itself needs a GPU)."""
import json
import math
import os
import re
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import attention as A  # noqa: E402
from bench.attention_ref import causal_mask, check_pairs, max_rel_err, reference  # noqa: E402


def _exit_code(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        A.parse_args(argv)
    return e.value.code, capsys.readouterr().err


def test_help_works_without_a_gpu_or_our_kernel():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "attention.py"), "--help"],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES=""))
    assert r.returncode == 0, r.stderr
    for opt in ("--dtype", "--cases", "--quick", "--no-triton", "--config", "--json", "--repeats", "--round-ms"):
        assert opt in r.stdout


def test_bad_dtype_exits_2_naming_the_choices(capsys):
    code, err = _exit_code(["--dtype", "fp32"], capsys)
    assert code == 2
    assert "--dtype" in err and "invalid choice: 'fp32'" in err and "bf16" in err


@pytest.mark.parametrize("argv, words", [
    (["--cases", "B2 H16 Q5 D128"], "unknown field 'Q'"),
    (["--cases", "S123"], "matches none"),
    (["--cases", "hello"], "cannot read case"),
    (["--cases", "B1 H6 KV4 S64 D64"], "multiple of kv heads"),
    (["--config", "BLOCK_M"], "expected KEY=VALUE"),
    (["--repeats", "0"], "must be positive"),
])
def test_bad_arguments_exit_2_with_a_reason(argv, words, capsys):
    code, err = _exit_code(argv, capsys)
    assert code == 2 and words in err


def test_defaults_are_the_issue_cases_both_dtypes_and_second_rounds():
    a = A.parse_args([])
    assert [c.name for c in a.cases] == ["B2 H16 S16384 D128", "B4 H16 S8192 D128", "B8 H16 S4096 D128",
                                         "B16 H16 S1024 D128", "B4 H32 S4096 D64"]
    assert (a.dtype, a.causal, a.round_ms, a.repeats, a.config, a.no_triton) == ("both", "both", 1000, 5, None, False)


def test_quick_preset_can_still_be_overridden():
    a = A.parse_args(["--quick"])
    assert [c.name for c in a.cases] == [c.name for c in A.QUICK]
    assert (a.dtype, a.repeats, a.round_ms) == ("bf16", 2, 200)
    a = A.parse_args(["--quick", "--repeats", "3", "--dtype", "both", "--cases", "D64"])
    assert (a.dtype, a.repeats, a.round_ms) == ("both", 3, 200)
    assert [c.name for c in a.cases] == ["B4 H32 S4096 D64"]


def test_case_parsing_accepts_spaces_separators_and_case():
    assert A.parse_case("B2 H16 S16384 D128") == {"b": 2, "h": 16, "s": 16384, "d": 128}
    assert A.parse_case("b2h16s16384d128") == A.parse_case("B2_H16_S16384_D128") == A.parse_case("B2xH16xS16384xD128")
    assert A.parse_case("B1 H8 KV2 SQ100 SKV200 D64") == {"b": 1, "h": 8, "hkv": 2, "sq": 100, "skv": 200, "d": 64}
    with pytest.raises(ValueError, match="given twice"):
        A.parse_case("B1 B2")


def test_cases_filter_the_defaults_or_name_new_ones():
    names = lambda items: [c.name for c in A.resolve_cases(items, A.CASES)]  # noqa: E731
    assert names(["S4096"]) == ["B8 H16 S4096 D128", "B4 H32 S4096 D64"]
    assert names(["D64", "S4096"]) == ["B4 H32 S4096 D64", "B8 H16 S4096 D128"]      # order kept, no duplicate
    assert names(["B16 H16"]) == ["B16 H16 S1024 D128"]
    assert names(["B1 H8 KV2 SQ100 SKV200 D64"]) == ["B1 H8 KV2 SQ100 SKV200 D64"]
    c = A.resolve_cases(["B1 H8 KV2 SQ100 SKV200 D64"], A.CASES)[0]
    assert (c.b, c.h, c.hkv, c.sq, c.skv, c.d) == (1, 8, 2, 100, 200, 64)
    assert A.parse_args(["--cases", "S1024,B2H4S77D64"]).cases == [A.Case(16, 16, 1024, 1024, 128, 16),
                                                                  A.Case(2, 4, 77, 77, 64, 4)]


def test_config_overrides_merge_and_are_typed():
    a = A.parse_args(["--config", "BLOCK_M=128,STAGES=2", "--config", "PINGPONG=True", "--config", "MODE=fast"])
    assert a.config == {"BLOCK_M": 128, "STAGES": 2, "PINGPONG": True, "MODE": "fast"}


def test_flops_count_both_products_and_halve_for_causal():
    c = A.Case(2, 16, 16384, 16384, 128, 16)
    assert A.attention_flops(c, False) == 4 * 2 * 16 * 16384 * 16384 * 128
    assert A.attention_flops(c, True) * 2 == A.attention_flops(c, False)
    assert A.attention_flops(A.Case(1, 2, 3, 5, 64, 1), False) == 4 * 2 * 3 * 5 * 64


@pytest.mark.parametrize("sq, skv", [(5, 8), (8, 5), (7, 7), (1, 4), (4, 1), (3, 3)])
def test_causal_mask_is_bottom_right_aligned(sq, skv):
    want = torch.zeros(sq, skv, dtype=torch.bool)
    for i in range(sq):
        for j in range(skv):
            want[i, j] = j <= i + (skv - sq)           # FlashAttention: the last query row sees every key
    mask = causal_mask(sq, skv)
    assert torch.equal(mask, want)
    assert bool(mask[-1].all())
    for r0 in range(sq):                             # row chunks are slices of the whole mask
        assert torch.equal(causal_mask(sq, skv, r0, min(2, sq - r0)), want[r0:r0 + 2])


def test_relative_error_is_max_abs_over_max_abs():
    ref = torch.tensor([[1.0, -4.0], [2.0, 0.5]])
    out = ref + torch.tensor([[0.0, 0.1], [-0.2, 0.0]])
    assert max_rel_err(out, ref) == pytest.approx(0.2 / 4.0)
    assert max_rel_err(ref.half(), ref) == 0.0
    assert math.isnan(max_rel_err(torch.tensor([float("nan"), 1.0]), torch.tensor([1.0, 1.0])))
    assert max_rel_err(torch.zeros(3), torch.zeros(3)) == 0.0
    assert max_rel_err(torch.ones(3), torch.zeros(3)) == math.inf


def test_check_pairs_spread_over_the_heads_within_the_budget():
    assert check_pairs(2, 3, 1.0, 100.0) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    pairs = check_pairs(2, 16, 10.0, 50.0)
    assert len(pairs) == 5 and pairs[0] == (0, 0) and pairs[-1] == (1, 15)
    assert check_pairs(2, 16, 1e15, 1.0) == [(0, 0), (1, 15)]          # at least the first and the last


def _hand_attention(q, k, v, causal, scale):
    g = q.shape[1] // k.shape[1]
    kf, vf = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = q.double() @ kf.transpose(-1, -2) * scale
    if causal:
        sq, skv = q.shape[2], k.shape[2]
        s = s.masked_fill(~torch.tensor([[j <= i + skv - sq for j in range(skv)] for i in range(sq)]), -math.inf)
    return (torch.softmax(s, -1).nan_to_num(0.0) @ vf).float()


@pytest.mark.parametrize("sq, skv, causal", [(9, 13, True), (13, 9, True), (10, 10, False), (7, 12, False)])
def test_reference_matches_a_hand_written_softmax_in_chunks(sq, skv, causal, monkeypatch):
    import bench.attention_ref as ref_mod
    monkeypatch.setattr(ref_mod, "CHUNK_SCORE_BYTES", 4 * skv * 4)       # 4 rows per chunk
    g = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(2, 4, sq, 16, generator=g), torch.randn(2, 2, skv, 16, generator=g), \
        torch.randn(2, 2, skv, 16, generator=g)
    pairs = [(0, 0), (0, 3), (1, 1), (1, 2)]
    ref = reference(q.half(), k.half(), v.half(), causal, 0.3, pairs)
    want = _hand_attention(q.half(), k.half(), v.half(), causal, 0.3)
    assert ref.shape == (4, sq, 16)
    for n, (b, h) in enumerate(pairs):
        torch.testing.assert_close(ref[n], want[b, h], rtol=1e-5, atol=1e-5)
    if causal and sq > skv:                          # rows that see no key are 0, not NaN
        assert torch.all(ref[:, :sq - skv] == 0)


def _fake_impls(monkeypatch, wrong: str = "flash"):
    """ours and triton right (the hand-written softmax), `wrong` off by 10%, cudnn failing."""
    def right(q, k, v, causal, scale):
        out = torch.empty_like(q)

        def call():
            return out.copy_(_hand_attention(q, k, v, causal, scale))
        call.config = lambda: "64x64"
        return call, out

    def off(q, k, v, causal, scale):
        return (lambda: _hand_attention(q, k, v, causal, scale).to(q.dtype) * 1.1), None

    def broken(q, k, v, causal, scale):
        raise RuntimeError("No available kernel.\nmore text")

    impls = {"ours": right, "cudnn": broken, "flash": off, "triton": right}
    impls[wrong] = off
    monkeypatch.setattr(A, "implementations", lambda args: impls)
    monkeypatch.setattr(A, "DEVICE", "cpu")
    timed_pairs = []

    def fake_interleaved(cand, base, repeats, rep_ms):
        timed_pairs.append((cand, base))
        return {"time_ms": 1.0, "baseline_ms": 1.25, "ratio": 1.25, "ratio_min": 1.2, "ratio_max": 1.3,
                "rounds_ms": [1.0] * repeats, "baseline_rounds_ms": [1.25] * repeats, "round_ms": rep_ms}

    monkeypatch.setattr(A, "interleaved", fake_interleaved)
    monkeypatch.setattr(A, "timed", lambda fn, repeats, rep_ms: {"time_ms": 2.0, "rounds_ms": [2.0] * repeats,
                                                                 "round_ms": rep_ms})
    return timed_pairs


def test_rows_check_first_time_only_the_correct_and_write_json(tmp_path, monkeypatch, capsys):
    timed_pairs = _fake_impls(monkeypatch)
    path = tmp_path / "attn.json"
    rc = A.main(["--cases", "B1 H2 SQ20 SKV24 D64,B1H2S16D64", "--dtype", "fp16", "--repeats", "2",
                 "--json", str(path), "--config", "BLOCK_M=64"])
    out = capsys.readouterr().out
    assert rc == 1                                   # flash is wrong: the run says so
    data = json.loads(path.read_text())
    assert data["meta"]["complete"] and len(data["rows"]) == 4
    r = data["rows"][0]
    assert (r["case"], r["mask"], r["config"]) == ("B1 H2 SQ20 SKV24 D64", "none", {"BLOCK_M": 64})
    assert [r[f"{n}_status"] for n in ("ours", "triton", "flash", "cudnn")] == ["ok", "ok", "wrong", "failed"]
    assert r["cudnn_why"] == "RuntimeError: No available kernel." and "error" in r["flash_why"]
    assert r["ours_err"] < 1e-2 and r["flash_err"] == pytest.approx(0.1, rel=0.05)
    assert "ours_vs_flash" not in r and "ours_vs_cudnn" not in r and r["ours_vs_triton"] == 1.25
    assert r["ours_tflops"] == pytest.approx(A.attention_flops(A.Case(1, 2, 20, 24, 64, 2), False) / 1.0 / 1e9)
    assert r["triton_config"] == "64x64" and r["cudnn_config"] is None
    assert len(timed_pairs) == 4                     # ours against Triton only, in each row
    assert [row["mask"] for row in data["rows"]] == ["none", "causal", "none", "causal"]
    assert "ours/Triton" in out and "ours vs Triton: geometric mean 1.250x over 4 rows" in out


def test_a_failing_candidate_is_not_timed_but_the_baselines_are(tmp_path, monkeypatch, capsys):
    timed_pairs = _fake_impls(monkeypatch, wrong="ours")
    rc = A.main(["--cases", "B1H2S16D64", "--dtype", "bf16", "--causal", "on", "--no-triton"])
    assert rc == 1 and timed_pairs == []
    out = capsys.readouterr().out
    assert re.search(r"ours wrong \S+ \(error", out)


def test_triton_wrapper_refuses_what_it_cannot_run():
    from bench.triton_attention import triton_attention
    q = torch.zeros(1, 4, 8, 64, dtype=torch.float16)
    kv = torch.zeros(1, 3, 8, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="multiple of kv heads"):
        triton_attention(q, kv, kv)
    with pytest.raises(ValueError, match="head dim 96"):
        triton_attention(torch.zeros(1, 1, 8, 96, dtype=torch.float16), *[torch.zeros(1, 1, 8, 96,
                                                                                      dtype=torch.float16)] * 2)
    with pytest.raises(ValueError, match="scale must be positive"):
        triton_attention(q, q, q, scale=-1.0)


def test_triton_pruning_keeps_configs_that_fit():
    from bench.triton_attention import CONFIGS, SMEM_BYTES, _keep, smem_bytes
    for d in (64, 128):
        kept = [c for c in CONFIGS if _keep(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], d, c.num_stages, c.num_warps)]
        assert kept and all(smem_bytes(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], d, c.num_stages) <= SMEM_BYTES
                            for c in kept)
        assert any(c.kwargs["BLOCK_M"] == c.kwargs["BLOCK_N"] == 128 and c.num_warps == 8 for c in kept)
    assert not _keep(128, 128, 128, 4, 8)            # 288 KiB
    assert not _keep(128, 64, 128, 3, 4)             # ptxas spills


def test_triton_kernel_in_the_interpreter_matches_the_softmax():
    """GQA, Sq < Skv and Sq > Skv causal (rows that see nothing), ragged tails, Skv below a block, [B, S, H, D]
    strides, layouts TMA cannot describe (copied) and size-1 dims with odd strides, each written into a
    NaN-filled `out`."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "attention_interp.py")], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=ROOT), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(rows) == 10
    bad = [row for row in rows if not (row["err"] < 2e-3 and row["nan"] == 0 and row["same_out"])]
    assert bad == []


def _compile_sm90(d: int, causal: bool, dt: str, bm: int = 128, bn: int = 128, stages: int = 3, warps: int = 8):
    import triton
    from triton.backends.compiler import GPUTarget

    from bench.triton_attention import _attn_fwd
    sig = {"q_desc": f"tensordesc<{dt}[1,1,{bm},{d}]>", "k_desc": f"tensordesc<{dt}[1,1,{bn},{d}]>",
           "v_desc": f"tensordesc<{dt}[1,1,{bn},{d}]>", "o_desc": f"tensordesc<{dt}[1,1,{bm},{d}]>",
           "Sq": "i32", "Skv": "i32", "Hq": "i32", "GROUP": "i32", "qk_scale": "fp32",
           "HEAD_DIM": "constexpr", "CAUSAL": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}
    src = triton.compiler.ASTSource(_attn_fwd.fn, sig, {"HEAD_DIM": d, "CAUSAL": causal, "BLOCK_M": bm, "BLOCK_N": bn})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})


def _ptxas_spills(ptx: str, tmp_path) -> int:
    import triton
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    f = tmp_path / "k.ptx"
    f.write_text(ptx)
    r = subprocess.run([ptxas, "-v", "-arch=sm_90a", str(f), "-o", os.devnull], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", r.stdout + r.stderr))


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dt", ["fp16", "bf16"])
def test_triton_kernel_compiles_for_sm90_through_tma_and_wgmma(d, causal, dt, tmp_path):
    from bench.triton_attention import SMEM_BYTES, smem_bytes
    c = _compile_sm90(d, causal, dt)
    ttgir = c.asm["ttgir"]
    assert "ttng.async_tma_copy_global_to_local" in ttgir and "ttng.warp_group_dot" in ttgir
    assert ttgir.count("scf.for") == 2               # the unmasked and the masked K/V loops
    assert c.metadata.shared <= smem_bytes(128, 128, d, 3) <= SMEM_BYTES
    assert _ptxas_spills(c.asm["ptx"], tmp_path) == 0


def test_runs_as_a_script_with_torch_importable():
    """`python bench/attention.py` puts bench/ first on sys.path, where bench/copy.py would shadow the stdlib
    `copy` that dataclasses and torch import: the script fixes the path before any such import."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ("import os, runpy, sys; sys.path[0] = os.path.abspath('bench'); "
            "runpy.run_path('bench/attention.py', run_name='bench_attention'); "
            "import copy, torch; assert hasattr(copy, 'deepcopy'), copy.__file__")
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
