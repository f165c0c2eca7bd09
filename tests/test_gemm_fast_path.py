"""The GEMM's eager fast path (gluon/runtime/prepared.py, `_FAST` in gemm_sm90/host.py): a call seen before, with
operands of the same dtypes, shapes, strides and devices, is launched from its prepared launch with the new
addresses, and gets the launch the full path would make. A fake backend records the launches (CPU tensors)."""
import importlib
import os
import sys

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_runtime import FakeBackend  # noqa: E402

from gluon.arch import SM90  # noqa: E402
from gluon.jit import _jit_of  # noqa: E402

g = importlib.import_module("gluon.kernels.gemm_sm90.host")
padding = importlib.import_module("gluon.kernels.gemm_sm90.padding")


@pytest.fixture
def backend(monkeypatch):
    import gluon.runtime.cuda as rt_cuda
    from gluon.runtime.descriptors import clear_descriptor_cache
    be = FakeBackend(device_type="cpu")
    monkeypatch.setattr(rt_cuda, "DEFAULT_BACKEND", be)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr("gluon.runtime.cuda._SM_COUNTS", {0: 132})
    monkeypatch.setattr(sys.modules["gluon.jit"], "current_arch", lambda: SM90)     # splitk_reduce's arch
    for name in ("_PLANS", "_FAST", "_WORKSPACE", "_PADS"):
        monkeypatch.setattr(g, name, {})
    monkeypatch.setattr(padding, "_SCRATCH", {})
    for kernel in (g.gemm_sm90, g.splitk_reduce):     # compiled kernels keep the backend their launcher was made with
        jf = _jit_of(kernel)
        monkeypatch.setattr(jf, "cache", {})
        monkeypatch.setattr(jf, "seen", {})
        monkeypatch.setattr(jf, "exact", {})
        monkeypatch.setattr(jf, "last", None)
    clear_descriptor_cache()
    yield be
    clear_descriptor_cache()


def _operands(M=1024, N=2048, K=512, dtype=torch.float16):
    return torch.randn(M, K).to(dtype), torch.randn(K, N).to(dtype), torch.empty(M, N, dtype=dtype)


def _maps(call):
    """The base addresses of the CUtensorMaps a recorded launch passed (the fake fills record them)."""
    return [arg[1][0] for arg in call[9:] if isinstance(arg, tuple) and arg and arg[0] == "CUtensorMap"]


def test_a_repeat_with_new_tensors_launches_the_prepared_launch_with_their_addresses(backend, monkeypatch):
    g.launch(*_operands())
    assert len(g._FAST) == 1
    full = [0]
    real_plan = g._plan
    monkeypatch.setattr(g, "_plan", lambda *a, **k: full.__setitem__(0, full[0] + 1) or real_plan(*a, **k))
    a, b, c = _operands()                                    # same shapes, new storage
    g.launch(a, b, c)
    assert full[0] == 0 and len(backend.calls) == 2            # no plan lookup: the prepared launch
    first, second = backend.calls
    assert first[:3] == second[:3] and len(first) == len(second)
    assert _maps(second) == [a.data_ptr(), b.data_ptr(), c.data_ptr()]
    # everything but the descriptors is the first call's (sizes, workspaces)
    assert [x for x in first[9:] if not isinstance(x, tuple)] == [x for x in second[9:] if not isinstance(x, tuple)]


def test_what_the_launch_depends_on_takes_the_full_path(backend):
    a, b, c = _operands()
    g.launch(a, b, c)
    g.launch(a.bfloat16(), b.bfloat16(), c.bfloat16())                # dtype
    a2 = torch.empty(1024, 576, dtype=torch.float16)[:, :512]         # another row pitch
    a2.copy_(a)
    g.launch(a2, b, c)
    g.launch(a, b, c, {"STAGES": 2})                                  # a dict config
    g.launch(a, b, c, g.GemmConfig(BLOCK_N=128))                      # another config
    assert len(g._FAST) == 5 and len(g._PLANS) == 4       # a2 shares a's plan (its pitch is 128-byte aligned too)
    assert _maps(backend.calls[2])[0] == a2.data_ptr()


def test_a_repeated_dict_config_takes_the_prepared_launch_keyed_by_its_content(backend, monkeypatch):
    """A dict of overrides (what users and `--set` pass) is keyed by its items and their types: the same content
    again (another dict object too) skips the plan; changed content, or an equal value of another type, takes
    the full path, which checks it."""
    a, b, c = _operands()
    g.launch(a, b, c, {"STAGES": 2, "BLOCK_N": 128})
    full = [0]
    real_check = g._check_call
    monkeypatch.setattr(g, "_check_call", lambda *a, **k: full.__setitem__(0, full[0] + 1) or real_check(*a, **k))
    g.launch(a, b, c, {"STAGES": 2, "BLOCK_N": 128})
    assert full[0] == 0 and len(backend.calls) == 2 and len(g._FAST) == 1
    g.launch(a, b, c, {"STAGES": 3, "BLOCK_N": 128})                  # changed content: its own launch
    assert full[0] == 1 and len(g._FAST) == 2
    with pytest.raises(g.GluonError, match="STAGES=2.0"):             # equal to 2, but not an int
        g.launch(a, b, c, {"STAGES": 2.0, "BLOCK_N": 128})
    with pytest.raises(g.GluonError, match="SPLIT_WGS"):
        g.launch(a, b, c, {"SPLIT_WGS": [1]})                         # unhashable: the full path's message
    assert len(g._FAST) == 2


def test_an_address_that_lost_its_alignment_falls_back_to_the_padded_copy(backend):
    a, b, c = _operands()
    g.launch(a, b, c)
    store = torch.empty(1024 * 512 + 8, dtype=torch.float16)
    a_odd = store[1:1 + 1024 * 512].view(1024, 512)                 # 2 bytes past a 16-byte boundary
    a_odd.copy_(a)
    g.launch(a_odd, b, c)
    assert any(k[0] == "a" for k in padding._SCRATCH)                 # padded into an aligned buffer
    assert _maps(backend.calls[-1])[0] != a_odd.data_ptr()


def test_split_k_repeats_launch_the_reduction_too(backend):
    a, b, c = _operands(256, 256, 8192)
    g.launch(a, b, c, splits=4)
    assert len(backend.calls) == 2                                    # the GEMM, then splitk_reduce
    c2 = torch.empty_like(c)
    g.launch(a, b, c2, splits=4)
    assert len(backend.calls) == 4
    reduce_first, reduce_again = backend.calls[1], backend.calls[3]
    assert reduce_again[9] == c2.data_ptr() and reduce_first[9] == c.data_ptr()
    assert reduce_again[10:] == reduce_first[10:]                     # the same workspace, sizes, splits


@pytest.mark.parametrize("pdl", [False, True])
def test_split_k_repeats_launch_the_reduction_as_the_first_call_did_with_or_without_pdl(backend, pdl):
    """GemmConfig.PDL: the second pass (the split count a constant of its binary) is launched as a programmatic
    dependent, by the first call and by the prepared repeat alike."""
    a, b, c = _operands(256, 256, 8192)
    cfg = g.resolve_config(256, 256, 8192, 132, 2, True, dict(PDL=pdl))
    g.launch(a, b, c, cfg, splits=4)
    (rck,) = _jit_of(g.splitk_reduce).cache.values()
    assert rck.abi.constexprs["SPLITS"] == 4 and rck.abi.launch_pdl == pdl
    (main,) = _jit_of(g.gemm_sm90).cache.values()
    assert main.abi.launch_pdl == pdl and main.launcher._launch_meta_ns.launch_pdl == pdl
    assert backend.launcher_meta.launch_pdl == pdl                    # the reduction's launcher, made last
    c2 = torch.empty_like(c)
    g.launch(a, b, c2, cfg, splits=4)
    assert len(backend.calls) == 4 and len(_jit_of(g.splitk_reduce).cache) == 1
    assert backend.calls[3][9] == c2.data_ptr() and backend.calls[3][10:] == backend.calls[1][10:]


def test_a_grown_workspace_drops_the_prepared_launches_holding_the_old_one(backend):
    g.launch(*_operands(256, 256, 8192), splits=2)
    assert len(g._FAST) == 1
    g.launch(*_operands(512, 512, 8192), splits=4)                  # needs a larger fp32 workspace
    assert len(g._FAST) == 1                                          # the first entry went with the old buffer
    (w,) = [v for k, v in g._WORKSPACE.items() if k[-1] == "w"]
    assert w.numel() >= 4 * 512 * 512


def test_the_fast_path_keeps_at_most_its_bound(backend, monkeypatch):
    monkeypatch.setattr(g, "_FAST_MAX", 3)
    for n in (128, 256, 384, 512, 640):
        g.launch(*_operands(n, 256, 256))
    assert len(g._FAST) == 3


def test_a_prepared_launch_is_not_taken_once_the_interpreter_is_on(backend):
    from gluon.interpret import set_enabled
    a, b, c = _operands(256, 256, 128)
    g.launch(a, b, c)
    assert len(g._FAST) == 1 and len(backend.calls) == 1
    was = set_enabled(True)
    try:
        g.launch(a, b, c)                                 # interpreted: computes C on the CPU, launches nothing
    finally:
        set_enabled(was)
    assert len(backend.calls) == 1
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-2, atol=1e-1)


def test_a_scale_off_its_specialized_alignment_takes_the_full_path(backend):
    """fp8 per-row/column scales: the binary assumes 16-byte aligned scale pointers; a repeat with a scale 4 bytes
    off is refused by the prepared launch and the full path reports it (before, the call returned having
    launched nothing)."""
    from gluon.runtime import LaunchError
    M, N, K = 256, 256, 128
    a = (torch.randn(M, K) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K) * 2).to(torch.float8_e4m3fn)
    c = torch.empty(M, N, dtype=torch.bfloat16)
    sa, sb = torch.rand(M) + 0.5, torch.rand(N) + 0.5
    g.launch(a, b, c, b_kmajor=True, scale_a=sa, scale_b=sb)
    assert len(g._FAST) == 1 and len(backend.calls) == 1
    odd = torch.empty(M + 1)[1:]                                    # 4 bytes past a 16-byte boundary
    odd.copy_(sa)
    with pytest.raises(LaunchError, match="'SA'.*not 16-byte aligned"):
        g.launch(a, b, c, b_kmajor=True, scale_a=odd, scale_b=sb)
    assert len(backend.calls) == 1


@pytest.mark.parametrize("resident,grid", [(14, 14), (16, 16), (200, 16), (None, 16)])
def test_a_cluster_grid_holds_no_more_clusters_than_the_device_does(backend, monkeypatch, resident, grid):
    """CLUSTER_K=8: the persistent grid asks sm_count / 8 = 16 clusters, unless the backend's occupancy query
    (asked once, of the loaded binary) says fewer fit at once; a backend that cannot say keeps 16."""
    from gluon.kernels.gemm_sm90.picks import DEEP_K_CONFIG
    asked = []
    if resident is not None:
        backend.max_active_clusters = lambda fn, shared, size, dev: asked.append((fn, size, dev)) or resident
    cfg = DEEP_K_CONFIG.replace(CLUSTER_M=1, CLUSTER_K=8)
    for _ in range(2):
        g.launch(*_operands(512, 512, 16384), config=cfg)
    assert backend.calls[0][0] == grid and backend.calls[-1][0] == grid
    assert asked == ([] if resident is None else [(0xF00, 8, 0)])
