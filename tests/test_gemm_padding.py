"""The GEMM's operands TMA cannot describe (gluon/kernels/gemm_sm90/padding.py), in the CPU interpreter: each
input padded alone into a cached buffer, the TMA-ready ones used as given, a contiguous C stored by address
(padded only when a TMA epilogue is asked for or C is strided), the values right against fp64 on poisoned
outputs; repeats with new tensors of the same shapes reuse the buffers, and take the caller's tensors, not
the first call's."""
import pytest

torch = pytest.importorskip("torch")

from gluon.ir import GluonError  # noqa: E402
from gluon.kernels.gemm_sm90 import host, launch, padding  # noqa: E402

NAN = float("nan")


@pytest.fixture
def padded_env(interpret_env, monkeypatch):
    """The interpreter, and no padded buffer or pad plan left from another test."""
    monkeypatch.setattr(padding, "_SCRATCH", {})
    monkeypatch.setattr(host, "_PADS", {})


def _odd_view(rows, cols, dtype, offset=1):
    """A rows x cols tensor at a base `offset` elements past an aligned one (not 16-byte aligned)."""
    return torch.empty(rows * cols + offset, dtype=dtype)[offset:].view(rows, cols)


def _check(a, b, c, b_kmajor=False):
    ref = a.double() @ (b.double().T if b_kmajor else b.double())
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=2e-2 * ref.abs().max().item() / 16)


@pytest.mark.parametrize("case,padded", [
    ("K off 16 bytes", {"a"}),                 # a [200, 77]: A padded; B [77, 136] has aligned rows: as given
    ("N off 16 bytes", {"b"}),                 # B and C rows of 130 elements: C stored by address
    ("a's base", {"a"}),
    ("c's base", set()),                       # stored by address: nothing padded
    ("kmajor K", {"a", "b"}),                  # B [N, K] with K = 77
])
def test_each_operand_is_padded_alone(padded_env, case, padded):
    torch.manual_seed(11)
    M, N, K, kmajor = 200, 136, 72, False
    if case == "K off 16 bytes":
        K = 77
    elif case == "N off 16 bytes":
        N = 130
    elif case == "kmajor K":
        K, kmajor = 77, True
    a = torch.randn(M, K).half()
    b = (torch.randn(N, K) if kmajor else torch.randn(K, N)).half()
    c = torch.full((M, N), NAN).half()
    if case == "a's base":
        a = _odd_view(M, K, torch.half).copy_(a)
    if case == "c's base":
        c = _odd_view(M, N, torch.half).fill_(NAN)
    launch(a, b, c, b_kmajor=kmajor)
    _check(a, b, c, kmajor)
    assert {k[0] for k in padding._SCRATCH} == padded
    # a repeat with new tensors of the same shapes and strides: the same buffers, the new values
    a2 = torch.randn_like(a) if case != "a's base" else _odd_view(M, K, torch.half).copy_(torch.randn(M, K).half())
    b2 = torch.randn_like(b)
    c2 = torch.full_like(c, NAN) if case != "c's base" else _odd_view(M, N, torch.half).fill_(NAN)
    buffers = dict(padding._SCRATCH)
    launch(a2, b2, c2, b_kmajor=kmajor)
    _check(a2, b2, c2, kmajor)
    assert padding._SCRATCH.keys() == buffers.keys() and all(padding._SCRATCH[k] is v for k, v in buffers.items())
    assert len(host._PADS) == (1 if padded else 0)


@pytest.mark.parametrize("epilogue", ["tma", None])
def test_a_per_column_scale_is_padded_with_c(padded_env, epilogue):
    """fp8 with per-column scales and C's rows off 16 bytes. With the TMA epilogue asked for, the kernel's N is
    the padded C's, so scale_b is padded to it (with zeros) and no scale past the caller's is read; left to
    the launch, C is stored by address and nothing is padded."""
    torch.manual_seed(12)
    M, N, K = 100, 130, 256
    a = (torch.randn(M, K) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K) * 2).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(M) + 0.5, torch.rand(N) + 0.5
    c = torch.full((M, N), NAN).bfloat16()
    launch(a, b, c, {"EPILOGUE": epilogue} if epilogue else None, b_kmajor=True, scale_a=sa, scale_b=sb)
    ref = (a.double() * sa.double()[:, None]) @ (b.double() * sb.double()[:, None]).T
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())
    assert {k[0] for k in padding._SCRATCH} == ({"c", "sb"} if epilogue else set())


@pytest.mark.parametrize("how", ["EPILOGUE='tma' asked", "EPILOGUE='ring' asked", "strided C"])
def test_c_is_padded_where_it_cannot_be_stored_by_address(padded_env, how):
    """C's rows off 16 bytes and a TMA epilogue named by the caller, or a strided C (the kernel's stores
    address rows N apart): C padded, computed there and copied out; the columns past C's view untouched."""
    torch.manual_seed(13)
    M, N, K = 130, 130, 64
    a, b = torch.randn(M, K).half(), torch.randn(N, K).half()       # B [N, K]: rows of 64, TMA-ready
    config = {"EPILOGUE": how.split("'")[1], "STAGES": 2} if "asked" in how else None
    if how == "strided C":
        big = torch.full((M, N + 3), NAN).half()
        c = big[:, :N]
    else:
        c = torch.full((M, N), NAN).half()
    launch(a, b, c, config, b_kmajor=True)
    _check(a, b, c, True)
    assert {k[0] for k in padding._SCRATCH} == {"c"}
    if how == "strided C":
        assert big[:, N:].isnan().all()


@pytest.mark.parametrize("M,N,K,dtype", [
    (4095, 4097, 1023, torch.bfloat16),      # one wave of 128x256 tiles: "tma" -> "coalesced"
    (8191, 8191, 1001, torch.bfloat16),      # several tiles per program (SPLIT_WGS)
    (1000, 3000, 777, torch.bfloat16),       # under a wave: SMALL_CONFIGS
    (16, 4097, 4096, torch.bfloat16),        # decode: SWAP_AB
    (512, 513, 65536, torch.bfloat16),       # deep K: split K
    (2047, 28673, 4095, torch.float32),      # an fp32 output
])
def test_a_c_stored_by_address_gets_a_pointer_epilogue(interpret_env, M, N, K, dtype):
    """The plan of a C stored by address, for each family choose_config picks: its epilogue reaches C by
    pointer ("coalesced" or "direct"), the rest of the pick as it is for an aligned C."""
    a = torch.empty(1, 1, dtype=torch.bfloat16)
    c = torch.empty(1, 1, dtype=dtype)
    plain = host._plan(a, c, M, N, K, None, False, None, True).kw["CFG"]
    addr = host._plan(a, c, M, N, K, None, False, None, True, c_addr=True).kw["CFG"]
    assert addr.EPILOGUE in ("coalesced", "direct")
    assert addr.replace(EPILOGUE=plain.EPILOGUE) == plain


def test_by_address_keeps_to_what_each_family_takes():
    """"tma" and "tma2" -> "coalesced" (the same staging tile), in a cluster "direct" (coalesced has not run in
    one), "ring" -> "direct"; a pointer epilogue stays; only a TMA epilogue named by the caller keeps C padded."""
    from gluon.kernels.gemm_sm90.config import DEFAULT_CONFIG, by_address, stores_by_address
    assert by_address(DEFAULT_CONFIG.replace(EPILOGUE="tma")).EPILOGUE == "coalesced"
    assert by_address(DEFAULT_CONFIG.replace(EPILOGUE="tma", CLUSTER_M=2)).EPILOGUE == "direct"
    assert by_address(DEFAULT_CONFIG.replace(EPILOGUE="tma2", STAGES=2)).EPILOGUE == "coalesced"
    assert by_address(DEFAULT_CONFIG.replace(EPILOGUE="ring", STAGES=4)).EPILOGUE == "direct"
    for e in ("coalesced", "direct"):
        assert by_address(DEFAULT_CONFIG.replace(EPILOGUE=e)).EPILOGUE == e
    assert stores_by_address(None) and stores_by_address({"STAGES": 3}) and stores_by_address(DEFAULT_CONFIG)
    assert not stores_by_address({"EPILOGUE": "ring"}) and not stores_by_address(DEFAULT_CONFIG.replace(EPILOGUE="tma"))
    assert not stores_by_address({"EPILOGUE": "tma2"})


def _t(*shape, dtype=torch.half):
    return torch.randn(*shape).to(dtype)


@pytest.mark.parametrize("args,kw,msg", [
    ((_t(64, 64), _t(64, 64, dtype=torch.bfloat16), _t(64, 64)), {}, r"a and b take one dtype of .* got a "
                                                                       r"torch.float16 and b torch.bfloat16"),
    ((_t(64, 64, dtype=torch.float32), _t(64, 64, dtype=torch.float32), _t(64, 64)), {}, "got a torch.float32"),
    ((_t(64, 64), _t(64, 64), torch.empty(64, 64, dtype=torch.int32)), {}, "c takes .* got torch.int32"),
    ((_t(64), _t(64, 64), _t(64, 64)), {}, r"a must be a 2-D tensor, got shape \[64\]"),
    (([[1.0]], _t(64, 64), _t(64, 64)), {}, "a must be a torch.Tensor, got list"),
    ((_t(64, 32), _t(48, 64), _t(64, 64)), {}, r"a is \[64, 32\] \(K = 32\) and b \[48, 64\], read as \[K, N\].*K = 48"),
    ((_t(64, 32), _t(64, 48), _t(64, 64)), dict(b_kmajor=True), r"read as \[N, K\] \(b_kmajor=True\), has K = 48"),
    ((_t(64, 32), _t(32, 64), _t(64, 48)), {}, r"b is \[32, 64\].*N = 64, but c \[64, 48\] has 48 columns"),
    ((_t(64, 32), _t(32, 64), _t(48, 64)), {}, r"a is \[64, 32\] and c \[48, 64\]: a must have c's 48 rows"),
    ((_t(64, 64), _t(64, 64), _t(64, 64)), dict(config="fast"), "config is a GemmConfig or a dict of its fields"),
    ((_t(64, 64), _t(64, 64), _t(64, 64)), dict(config={"BLOCK_N": 100}), "BLOCK_N=100: takes a power of two"),
    ((_t(64, 64), _t(64, 64), _t(64, 64)), dict(splits=0), "splits=0: the number of K slices, a positive int"),
    ((_t(64, 64), _t(64, 64), _t(64, 64)), dict(splits="2"), "splits='2'"),
])
def test_operands_that_do_not_fit_are_one_line_naming_them(interpret_env, args, kw, msg):
    """Shapes that disagree were read past or left short without a word, a 1-D operand was an IndexError, an
    fp32 or fp64 input a shared-memory error from inside the kernel: one GluonError naming the operand now."""
    with pytest.raises(GluonError, match=msg):
        launch(*args, **kw)


@pytest.mark.parametrize("M,N,K", [(0, 64, 32), (64, 0, 32), (64, 64, 0), (0, 0, 0)])
def test_empty_problems_are_what_torch_gives(interpret_env, M, N, K):
    """M or N of 0: nothing to write; K of 0: zeros (an empty sum), as torch.matmul; no kernel runs (a K of 0
    recursed through the padding before)."""
    a, b = _t(M, K), _t(K, N)
    c = torch.full((M, N), NAN).half()
    assert launch(a, b, c) is c
    assert torch.equal(c, torch.matmul(a.float(), b.float()).half())


@pytest.mark.parametrize("config", [
    {"SPLIT_WGS": True, "K_ZIGZAG": True},          # two roles of 64x256, each its own staging tile
    {"EPILOGUE": "direct", "SPLIT_WGS": True},      # (a cluster's "tma" becomes "direct")
    None,                                           # the pick
    {"EPILOGUE": "coalesced", "BLOCK_N": 128},
])
def test_c_by_address_over_several_tiles_a_program(padded_env, monkeypatch, config):
    """C's rows off 16 bytes through the pointer epilogues with several tiles a program (a grid of 2), edges in
    both dimensions, and a fresh call: every element right, nothing padded."""
    monkeypatch.setattr(host, "device_sms", lambda d: 2)
    torch.manual_seed(14)
    M, N, K = 300, 530, 128
    for _ in range(2):
        a, b = torch.randn(M, K).half(), torch.randn(N, K).half()
        c = torch.full((M, N), NAN).half()
        launch(a, b, c, config, b_kmajor=True)
        _check(a, b, c, True)
    assert not padding._SCRATCH


def _memmove_rows(calls, runs=None):
    """A stand-in for the backend's `row_copy` on CPU tensors: the same rows moved by address (ctypes), each
    prepared copy's geometry recorded in `calls`, each run of one in `runs`."""
    import ctypes

    def make(width, height, src_pitch, dst_pitch):
        calls.append((width, height, src_pitch, dst_pitch))

        def copy(src, dst):
            if runs is not None:
                runs.append(width)
            for r in range(height):
                ctypes.memmove(dst + r * dst_pitch, src + r * src_pitch, width)
        return copy
    return make


@pytest.mark.parametrize("case", ["K off 16 bytes", "kmajor K", "strided C", "a's base"])
def test_padded_copies_by_the_driver_take_each_rows_pitch(padded_env, monkeypatch, case):
    """Where the backend prepares copies of rows (cuMemcpy2DAsync on the GPU; memmove here), the padded operands
    go through them, not torch's copy_: one prepared copy per padded operand with its rows' width and both
    pitches in bytes, and the values right, first call and a repeat with new tensors."""
    calls, runs = [], []
    monkeypatch.setattr(host, "_row_copy_on", lambda t, stream: _memmove_rows(calls, runs))
    torch.manual_seed(17)
    M, N, K, kmajor, config = 200, 136, 77, case == "kmajor K", None
    a = torch.randn(M, K).half()
    if case == "a's base":
        K = 72
        a = _odd_view(M, K, torch.half).copy_(torch.randn(M, K).half())
    b = (torch.randn(N, K) if kmajor else torch.randn(K, N)).half()
    c = torch.full((M, N), NAN).half()
    if case == "strided C":
        K, N, config = 64, 130, {"EPILOGUE": "tma", "STAGES": 2}
        a, b = torch.randn(M, K).half(), torch.randn(K, N).half()
        big = torch.full((M, N + 3), NAN).half()
        c = big[:, :N]
    expected = {"K off 16 bytes": [(154, 200, 154, 160)], "kmajor K": [(154, 200, 154, 160), (154, 136, 154, 160)],
                "strided C": [(260, 64, 260, 272), (260, 200, 272, 266)], "a's base": [(144, 200, 144, 144)]}[case]
    for _ in range(2):
        launch(a, b, c, config, b_kmajor=kmajor)
        _check(a, b, c, kmajor)
        assert calls == expected            # prepared once, with the plan
        a = torch.randn_like(a) if case != "a's base" else _odd_view(M, K, torch.half).copy_(torch.randn(M, K).half())
        c.fill_(NAN)
    assert len(runs) == 2 * len(expected)  # each call's copies went through them
    if case == "strided C":
        assert big[:, N:].isnan().all()


def test_row_copies_are_left_to_torch_where_rows_are_not_contiguous():
    """A transposed or broadcast operand has no rows for a 2D copy: `_row_copy` says None and torch copies."""
    made = []
    make = _memmove_rows(made)
    x = torch.randn(77, 40).half()
    assert padding._row_copy(make, x.T, torch.empty(40, 80).half()[:, :77]) is None
    assert padding._row_copy(make, torch.randn(1, 77).half().expand(5, 77), torch.empty(5, 80).half()[:, :77]) is None
    assert padding._row_copy(None, x, torch.empty(77, 48).half()[:, :40]) is None
    assert padding._row_copy(make, x, torch.empty(77, 48).half()[:, :40]) is not None and made == [(80, 77, 80, 96)]
