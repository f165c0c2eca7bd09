"""TTGIR -> binary compilation through Triton 3.6 and the on-disk kernel cache.

Runs without a GPU: Triton's wheel bundles ptxas/cuobjdump (CUDA) and ld.lld (HIP),
so every sample compiles to cubin/hsaco here and the checks read SASS/AMDGCN.
Every test uses a cache under ``tmp_path`` -- never the user's cache.  The tests
marked ``gpu`` launch the samples through ``gluon.runtime.Launcher`` on a Hopper GPU.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import pytest

import triton
from gluon.abi import KernelABI, KernelParam, ParamKind
from gluon.backend import compile as tc
from gluon.backend.compile import CompileError, available_targets, compile_ttgir
from gluon.backend.machine_code import sass_instructions
from gluon.cache import KernelCache, default_cache
from gluon.dtypes import DType

# Python >= 3.12 warns on fork() in a threaded process; the forks here run no threads' code.
pytestmark = pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")

REPO = pathlib.Path(__file__).resolve().parents[1]
DATA = pathlib.Path(__file__).resolve().parent / "data" / "ttgir"

SAMPLES = {
    "hopper_tma_wgmma": ("cuda", 90, 32),
    "hopper_ws_wgmma": ("cuda", 90, 32),
    "ampere_mma_v2": ("cuda", 80, 32),
    "blackwell_tcgen05": ("cuda", 100, 32),
    "amd_cdna3_mfma": ("hip", "gfx942", 64),
}


def _text(name: str) -> str:
    return (DATA / f"{name}.ttgir").read_text()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every sample compiled once (forked, the default) into one module-wide tmp cache."""
    cache = KernelCache(tmp_path_factory.mktemp("gluon-cache"))
    return cache, {name: compile_ttgir(_text(name), tgt, cache=cache) for name, tgt in SAMPLES.items()}


@pytest.fixture(autouse=True)
def _isolated_cache_env(tmp_path, monkeypatch):
    """A test that forgets ``cache=`` still writes under tmp_path, not ~/.cache."""
    monkeypatch.setenv("GLUON_CACHE_DIR", str(tmp_path / "default-cache"))


def test_available_targets():
    assert available_targets() == [("cuda", 80, 32), ("cuda", 90, 32), ("cuda", 100, 32), ("hip", "gfx942", 64)]
    assert set(SAMPLES.values()) == set(available_targets())


# --------------------------------------------------------------------------- samples
def test_hopper_tma_wgmma(built):
    cache, bins = built
    b = bins["hopper_tma_wgmma"]
    assert b.name == "tma_wgmma_kernel" and b.target == ("cuda", 90, 32)
    assert set(b.asm) == {"ttgir", "llir", "ptx", "cubin"} and isinstance(b.asm["cubin"], bytes)
    assert b.path == cache.get(b.key)
    ops = sass_instructions(b.sass())
    assert ops["HGMMA"] > 0 and ops["UTMALDG"] > 0 and ops["UTMASTG"] > 0
    assert b.registers > 0 and b.spills == 0
    assert b.num_warps == 4 and b.shared_bytes >= 3 * 128 * 64 * 2 // 2  # a, b tiles at least
    assert (b.path / f"{b.name}.full.sass").read_text() == b.sass()  # cached next to the cubin
    # tensordesc_meta: filled although Triton leaves it unset for .ttgir input
    meta = b.metadata["tensordesc_meta"]
    assert [m["block_size"] for m in meta] == [[128, 64], [64, 64], [128, 64]]  # 128B swizzle: 64-elem inner box
    assert all(m["swizzle"] == 3 and m["elem_size"] == 2 and m["fp4_padded"] is False for m in meta)
    assert b.abi is None and "gluon_abi" not in b.metadata       # raw TTGIR, compiled without an ABI


def test_hopper_warp_specialized_num_warps_from_metadata(built):
    b = built[1]["hopper_ws_wgmma"]
    assert '"ttg.num-warps" = 4' in b.asm["ttgir"]
    assert b.num_warps == 8  # default partition (4) + 1-warp loader, padded to a multiple of 4
    ops = sass_instructions(b.sass())
    assert ops["HGMMA"] > 0 and ops["UTMALDG"] > 0 and ops["USETMAXREG"] > 0  # setmaxnreg
    assert b.spills == 0


def test_ampere_mma_v2(built):
    b = built[1]["ampere_mma_v2"]
    ops = sass_instructions(b.sass())
    assert ops["HMMA"] > 0 and ops["LDGSTS"] > 0 and ops["LDSM"] > 0
    assert b.registers > 0 and b.spills == 0
    assert b.metadata["tensordesc_meta"] == []


def test_blackwell_tcgen05(built):
    b = built[1]["blackwell_tcgen05"]
    ops = sass_instructions(b.sass())
    assert ops["UTCHMMA"] > 0 and ops["LDTM"] > 0
    assert b.registers > 0 and b.spills == 0


def test_amd_cdna3_mfma(built):
    b = built[1]["amd_cdna3_mfma"]
    assert set(b.asm) == {"ttgir", "llir", "amdgcn", "hsaco"} and isinstance(b.asm["hsaco"], bytes)
    assert "v_mfma" in b.asm["amdgcn"]
    assert b.registers > 0 and b.spills == 0
    assert b.resources["vgpr_count"] == b.registers
    with pytest.raises(ValueError, match="CUDA-only"):
        b.sass()


# --------------------------------------------------------------------------- cache hits
def test_cache_hit_does_not_call_triton_compile(tmp_path, monkeypatch):
    calls = []
    real = triton.compile

    def spy(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(triton, "compile", spy)
    cache = KernelCache(tmp_path / "c")
    text = _text("ampere_mma_v2")
    b1 = compile_ttgir(text, ("cuda", 80, 32), cache=cache, isolate=False)  # in-process: the spy sees it
    assert len(calls) == 1
    b2 = compile_ttgir(text, ("cuda", 80, 32), cache=cache, isolate=False)
    b3 = compile_ttgir(text, ("cuda", 80, 32), cache=cache)  # forked mode takes the same hit
    assert len(calls) == 1
    assert b1.key == b2.key == b3.key and b2.asm["cubin"] == b1.asm["cubin"]
    assert b2.metadata == b1.metadata
    # options are part of the key: a miss, compiled again, with the option applied
    b4 = compile_ttgir(text, ("cuda", 80, 32), cache=cache, options={"num_stages": 1}, isolate=False)
    assert len(calls) == 2 and b4.key != b1.key and b4.metadata["num_stages"] == 1


def test_cache_hit_in_forked_mode_never_forks_compile(tmp_path, monkeypatch):
    cache = KernelCache(tmp_path / "c")
    text = _text("ampere_mma_v2")
    b1 = compile_ttgir(text, ("cuda", 80, 32), cache=cache)

    def boom(*a, **k):
        raise AssertionError("triton.compile called on a cache hit")

    monkeypatch.setattr(triton, "compile", boom)
    monkeypatch.setattr(os, "fork", boom)
    assert compile_ttgir(text, ("cuda", 80, 32), cache=cache).key == b1.key


def test_second_process_gets_a_hit(tmp_path):
    cache_dir = tmp_path / "shared-cache"
    src = DATA / "hopper_tma_wgmma.ttgir"
    env = dict(os.environ, GLUON_CACHE_DIR=str(cache_dir))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    b = compile_ttgir(src.read_text(), ("cuda", 90, 32), cache=KernelCache(cache_dir))
    b.sass()  # cached as a file: the other process must not need cuobjdump either
    code = textwrap.dedent(f"""
        import json, pathlib, triton, triton.tools.disasm as disasm
        def boom(*a, **k):
            raise SystemExit("compiler or disassembler called on a warm cache")
        triton.compile = boom
        disasm.get_sass = boom
        from gluon.backend.compile import compile_ttgir
        from gluon.backend.machine_code import sass_instructions
        b = compile_ttgir(pathlib.Path({str(src)!r}).read_text(), ("cuda", 90, 32))  # default_cache()
        print(json.dumps({{"key": b.key, "path": str(b.path), "regs": b.registers, "spills": b.spills,
                          "hgmma": sass_instructions(b.sass())["HGMMA"], "td": b.metadata["tensordesc_meta"],
                          "kname": b.name}}))
    """)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr + r.stdout
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["key"] == b.key and out["path"] == str(b.path)
    assert out["regs"] == b.registers and out["spills"] == 0 and out["hgmma"] > 0
    assert out["td"] == b.metadata["tensordesc_meta"] and out["kname"] == "tma_wgmma_kernel"


@pytest.mark.parametrize("name", ["tma_prefetch", "lean_prologue"])
def test_an_opt_in_ptx_pass_is_asked_for_by_the_abi_and_keys_the_cache(name):
    """A kernel asks for a PTX pass in its ABI; the pass's source hash is then part of the cache key
    (editing the pass recompiles those kernels), and absent otherwise; an unknown pass is refused."""
    from gluon.backend.ptx import OPT_IN
    mod = OPT_IN[name][0]
    tgt = ("cuda", 90, 32)
    asks = KernelABI("k", tgt, (), ptx_passes=(name,))
    assert dict(tc.cache_key_parts("module {}", tgt, abi=asks))[f"ptx_{name}"] == mod.source_hash()
    assert f"ptx_{name}" not in dict(tc.cache_key_parts("module {}", tgt, abi=KernelABI("k", tgt, ())))
    with pytest.raises(ValueError, match="unknown PTX passes"):
        tc.cache_key_parts("module {}", tgt, abi=KernelABI("k", tgt, (), ptx_passes=("nope",)))


def test_key_covers_text_target_versions_options(tmp_path, monkeypatch):
    cache = KernelCache(tmp_path)
    text = _text("ampere_mma_v2")
    k = lambda t=text, tgt=("cuda", 80, 32), o=None: cache.key(*tc.cache_key_parts(t, tgt, o))  # noqa: E731
    base = k()
    assert base == k() and len(base) == 64 and int(base, 16) >= 0
    assert k(o={"num_stages": 1, "num_ctas": 1}) == k(o={"num_ctas": 1, "num_stages": 1})  # sorted options
    others = {k(t=text + "\n"), k(tgt=("cuda", 90, 32)), k(o={"num_stages": 1})}
    monkeypatch.setattr(triton, "__version__", "9.9.9")
    others.add(k())
    monkeypatch.undo()
    monkeypatch.setattr(tc, "__version__", "7.7.7")
    others.add(k())
    assert base not in others and len(others) == 5


def test_corrupt_entry_is_rebuilt(tmp_path):
    cache = KernelCache(tmp_path)
    text = _text("amd_cdna3_mfma")
    b = compile_ttgir(text, ("hip", "gfx942", 64), cache=cache)
    (b.path / f"{b.name}.hsaco").unlink()  # damaged by hand
    b2 = compile_ttgir(text, ("hip", "gfx942", 64), cache=cache)
    assert b2.key == b.key and isinstance(b2.asm["hsaco"], bytes) and (b2.path / f"{b.name}.hsaco").exists()


def test_triton_cache_is_not_written(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    compile_ttgir(_text("amd_cdna3_mfma"), ("hip", "gfx942", 64), cache=KernelCache(tmp_path / "c"), isolate=False)
    assert not (tmp_path / "triton-cache").exists()
    assert not [p for p in (tmp_path / "c").iterdir() if p.name.startswith(".tmp-")]  # scratch removed


# --------------------------------------------------------------------------- KernelCache
def test_default_root_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("GLUON_CACHE_DIR", str(tmp_path / "a"))
    assert default_cache().root == tmp_path / "a"
    monkeypatch.delenv("GLUON_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert KernelCache().root == tmp_path / "xdg" / "gluon"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert KernelCache().root == tmp_path / "home" / ".cache" / "gluon"
    assert KernelCache(str(tmp_path / "x")).root == tmp_path / "x"


def test_key_is_canonical(tmp_path):
    c = KernelCache(tmp_path)
    assert c.key({"a": 1, "b": [1, 2]}) == c.key({"b": (1, 2), "a": 1})
    assert c.key("1") != c.key(1) and c.key(1.0) != c.key(1) and c.key(b"x") != c.key("x")
    assert c.key({1, 2, 3}) == c.key({3, 2, 1})
    with pytest.raises(TypeError):
        c.key(object())


def test_put_get_roundtrip(tmp_path):
    c = KernelCache(tmp_path / "root-not-yet-there")
    key = c.key("roundtrip")
    assert c.get(key) is None and key not in c
    p = c.put(key, {"a.txt": "héllo", "b.bin": b"\x00\x01"})
    assert c.get(key) == p == c.root / key and key in c and list(c.keys()) == [key]
    assert (p / "a.txt").read_text(encoding="utf-8") == "héllo" and (p / "b.bin").read_bytes() == b"\x00\x01"
    with pytest.raises(ValueError):
        c.get("../etc")
    with pytest.raises(ValueError):
        c.put(c.key("x"), {"../escape": "no"})


def test_put_exception_mid_write_leaves_no_entry(tmp_path):
    c = KernelCache(tmp_path)
    key = c.key("crash")
    with pytest.raises(TypeError):
        c.put(key, {"first.txt": "written", "second.bin": 12345})  # not str/bytes: fails on write
    assert c.get(key) is None
    assert [p.name for p in tmp_path.iterdir()] == []  # temp dir cleaned up
    assert c.put(key, {"first.txt": "ok"}) == c.root / key  # and the key is still usable


def test_put_killed_mid_write_leaves_no_entry(tmp_path):
    c = KernelCache(tmp_path)
    key = c.key("killed")
    pid = os.fork()
    if pid == 0:  # child: die between writing and publishing (as on SIGKILL / power loss)
        os.rename = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
        try:
            c.put(key, {"f": "x" * 100000})
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)
    assert c.get(key) is None
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    assert len(leftovers) == 1  # only the unpublished scratch dir ...
    assert c.prune_temp(older_than_s=0) == 1 and not any(tmp_path.iterdir())  # ... which pruning removes


def test_put_losing_the_rename_race_returns_the_winner(tmp_path, monkeypatch):
    import gluon.cache as gc

    c = KernelCache(tmp_path)
    key = c.key("race")
    real_rename = os.rename

    def competitor_wins_first(src, dst):
        monkeypatch.setattr(gc.os, "rename", real_rename)
        KernelCache(tmp_path).put(key, {"who": "winner"})  # publishes between our write and our rename
        return real_rename(src, dst)

    monkeypatch.setattr(gc.os, "rename", competitor_wins_first)
    p = c.put(key, {"who": "loser"})
    assert p == c.root / key and (p / "who").read_text() == "winner"
    assert sorted(x.name for x in tmp_path.iterdir()) == [key]  # loser's temp dir removed


def test_concurrent_writers_same_key(tmp_path):
    c = KernelCache(tmp_path)
    key = c.key("concurrent")
    payload = {f"f{i}": os.urandom(1 << 16) for i in range(8)}
    pids = []
    for _ in range(6):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = 0 if c.put(key, payload) == c.root / key else 2
            finally:
                os._exit(code)
        pids.append(pid)
    assert all(os.waitpid(p, 0)[1] == 0 for p in pids)
    entry = c.get(key)
    assert {p.name: p.read_bytes() for p in entry.iterdir()} == payload
    assert sorted(x.name for x in tmp_path.iterdir()) == [key]


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize("isolate", [True, False], ids=["forked", "inprocess"])
def test_compile_error_on_syntax_error(tmp_path, isolate):
    cache = KernelCache(tmp_path)
    broken = _text("hopper_tma_wgmma").replace("ttg.local_alloc : ()", "ttg.local_allocx : ()", 1)
    with pytest.raises(CompileError) as ei:
        compile_ttgir(broken, ("cuda", 90, 32), cache=cache, isolate=isolate)
    e = ei.value
    msg = str(e)
    assert "cuda:90" in msg and e.stage == "parse" and e.target == ("cuda", 90, 32)
    assert e.ttgir_path.parent == cache.failed_dir and str(e.ttgir_path) in msg
    assert e.ttgir_path.read_text() == broken  # kept for the user
    assert f"{e.ttgir_path}:17:15: error: custom op 'ttg.local_allocx' is unknown" in msg  # MLIR's own line
    assert cache.get(cache.key(*tc.cache_key_parts(broken, ("cuda", 90, 32)))) is None


def test_compile_error_on_verifier_error(tmp_path):
    broken = _text("hopper_tma_wgmma").replace('"ttg.num-warps" = 4', '"ttg.num-warps" = 8')
    with pytest.raises(CompileError, match=r"(?s)cuda:90.*requires 8 warps per CTA"):
        compile_ttgir(broken, ("cuda", 90, 32), cache=KernelCache(tmp_path))


def test_compile_error_on_target_mismatch(tmp_path):
    with pytest.raises(CompileError, match=r"cuda:80.*can not be compiled for cuda:90") as ei:
        compile_ttgir(_text("ampere_mma_v2"), ("cuda", 90, 32), cache=KernelCache(tmp_path))
    assert ei.value.stage == "target" and ei.value.ttgir_path.exists()


def test_compiler_abort_becomes_compile_error(tmp_path):
    # tcgen05 ops relabelled for sm_90: LLVM's instruction selection aborts the process
    # ("LLVM ERROR: Cannot select ... tcgen05"); the forked compile turns it into an error.
    ttgir = _text("blackwell_tcgen05").replace('"cuda:100"', '"cuda:90"')
    with pytest.raises(CompileError) as ei:
        compile_ttgir(ttgir, ("cuda", 90, 32), cache=KernelCache(tmp_path))
    assert ei.value.stage == "crash" and "SIGABRT" in str(ei.value) and "LLVM ERROR" in str(ei.value)
    assert "cuda:90" in str(ei.value) and str(ei.value.ttgir_path) in str(ei.value)


def test_ptxas_error_becomes_compile_error(tmp_path):
    with pytest.raises(CompileError, match=r"(?s)cuda:80.*Unknown option") as ei:
        compile_ttgir(_text("ampere_mma_v2"), ("cuda", 80, 32), cache=KernelCache(tmp_path),
                      options={"ptx_options": "--not-a-ptxas-flag"})
    assert ei.value.stage == "compile"


def test_bad_target_is_rejected():
    with pytest.raises(ValueError):
        compile_ttgir("", ("metal", 3, 32))
    with pytest.raises(ValueError):
        compile_ttgir("", ("cuda", 90))


# --------------------------------------------------------------------------- helpers
def test_sass_instructions_counts_dotted_prefixes():
    triton_fmt = ("Function:k\n--:-:0:-:1\tLDC R1, c[0x0][0x37c];\nLBB0:\n"
                  "--:-:-:-:2\t@P0 HGMMA.64x128x16.F32 R24, gdesc[UR4], RZ, !UPT;\n"
                  "--:-:-:-:2\t@!PT LDG.E.128.CONSTANT R4, desc[UR4][R2.64];\n"
                  "--:-:-:-:2\tLDG.E.128 R8, desc[UR4][R2.64+0x10];\n--:-:-:-:2\tLDG.E R8, desc[UR4][R2.64];\n")
    c = sass_instructions(triton_fmt)
    assert c["HGMMA"] == 1 and c["HGMMA.64x128x16"] == 1 and c["LDG.E.128"] == 2 and c["LDG"] == 3
    assert c["LDC"] == 1 and c["Function:k"] == 0 and c["LBB0"] == 0
    raw = ("        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x00000a00ff017b82 */\n"
           "                                                                          /* 0x000fe40000000800 */\n"
           "        /*0010*/              @!P0 UTMALDG.2D [UR8], [UR4] ;            /* 0x0000000804007db4 */\n")
    c = sass_instructions(raw)
    assert c["UTMALDG"] == 1 and c["UTMALDG.2D"] == 1 and c["LDC"] == 1


# --------------------------------------------------------------------------- GPU
def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _hopper() -> bool:
    if not _cuda_available():
        return False
    import torch

    return torch.cuda.get_device_capability()[0] == 9


@pytest.mark.gpu
@pytest.mark.skipif(not _hopper(), reason="needs a Hopper (sm_90) GPU")
@pytest.mark.parametrize("name", ["hopper_tma_wgmma", "hopper_ws_wgmma"])
def test_launch_tma_kernel_on_hopper(tmp_path, name):
    import torch
    from gluon.runtime import Launcher, make_tensor_descriptor

    b = compile_ttgir(_text(name), ("cuda", 90, 32), cache=KernelCache(tmp_path), abi=_sample_abi(name))
    M, N, K = 256, 384, 512
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    ref = (a.float() @ w.float())
    grid = (M // 128, N // 128, 1)
    launch = Launcher(b)

    # 1. plain tensors: the launcher builds the descriptors with the ABI's boxes
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
    launch(grid, a, w, c, K)
    torch.cuda.synchronize()
    assert torch.allclose(c.float(), ref, rtol=2e-2, atol=2e-1)

    # 2. prebuilt descriptors
    c2 = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
    descs = [make_tensor_descriptor(t, blk, 128) for t, blk in ((a, [128, 64]), (w, [64, 128]), (c2, [128, 128]))]
    launch(grid, *descs, K)
    torch.cuda.synchronize()
    assert torch.allclose(c2.float(), ref, rtol=2e-2, atol=2e-1)


def _sample_abi(name: str) -> KernelABI:
    """The ABI of the TMA samples: C[128x128 tile] = A @ B through three 128B-swizzled descriptors, K last."""
    def desc(n, block):
        return KernelParam(n, ParamKind.TENSORDESC, DType.f16, block_shape=block, swizzle_bytes=128,
                           box=(block[0], 64))
    kname = {"hopper_tma_wgmma": "tma_wgmma_kernel"}.get(name, "ws_wgmma_kernel")
    return KernelABI(kname, ("cuda", 90, 32), (desc("a_desc", (128, 64)), desc("b_desc", (64, 128)),
                                                desc("c_desc", (128, 128)),
                                                KernelParam("K", ParamKind.SCALAR, DType.i32)))
