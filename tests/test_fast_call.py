"""The Launcher's straight-line entry (gluon/runtime/fast_call.py) against its general path.

Every call below runs through `Launcher.__call__` (which takes the fast entry where it can) and through
`_general_call` on a twin launcher: the two must launch the same thing or raise the same message, and the
common calls must take the fast entry (counted), the others must not.
"""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from gluon.runtime import LaunchError, Launcher  # noqa: E402
from gluon.runtime import fast_call  # noqa: E402
from gluon.runtime.launcher import _BOOL, _DESC, _FLOAT, _INT, _PTR  # noqa: E402
from runtime_fakes import (COPY_ARGS, TMA_ARGS, DirectBackend, FakeBackend, abi, cuda_like, fake_binary,  # noqa: E402
                           param)

ARGS = [param("x", "pointer", "f16", rank=1, divisibility=16),
        param("y", "pointer", "f32", rank=2, needs_contiguous=True),
        param("n", "scalar", "i32", divisibility=16),
        param("m", "scalar", "i64"),
        param("alpha", "scalar", "f32"),
        param("flag", "scalar", "i1")]


KINDS = (_PTR, _INT, _FLOAT, _BOOL, _DESC)


class Counting(DirectBackend):
    """DirectBackend whose launches say which entry made them."""


def _pair(params=ARGS):
    """(launcher with the fast entry, its general twin, the backend of each)."""
    fast_be, slow_be = Counting(), Counting()
    fast = Launcher(fake_binary(), abi(params, "k", "k.py:1"), backend=fast_be)
    slow = Launcher(fake_binary(), abi(params, "k", "k.py:1"), backend=slow_be)
    return fast, slow, fast_be, slow_be


def _outcome(launcher, backend, grid, args, stream, general: bool):
    before = len(backend.calls)
    try:
        if general:
            launcher._general_call(grid, args, stream)
        else:
            launcher(grid, *args, stream=stream)
    except LaunchError as e:
        return ("error", str(e))
    return ("launched", backend.calls[before:])


def _inputs():
    return torch.randn(64).half(), torch.randn(4, 8)


def _warm(fast, slow):
    x, y = _inputs()
    for L in (fast, slow):
        L((1,), x, y, 16, 1, 1.0, True)       # loads the binary: the fast entry is built after it
    assert fast._fast is not None and "def fast(" in fast._fast.source


def _cases():
    x, y = _inputs()
    odd = torch.randn(65).half()[1:]          # 2-byte offset: the x parameter wants a 16-byte aligned address
    yt = torch.randn(8, 4).t()                # not contiguous
    good = (x, y, 32, -5, 0.5, False)
    yield "common", (3,), good, None, True
    yield "3-d grid", (3, 2, 1), good, None, True
    yield "2-d grid", (3, 2), good, None, True
    yield "int stream", (3,), good, 77, True
    yield "grid list", [3], good, None, False
    yield "grid callable", lambda meta: (meta["n"] // 16,), good, None, False
    yield "grid zero", (0,), good, None, False
    yield "grid too big", (2**31,), good, None, False
    yield "grid 4-d", (1, 1, 1, 1), good, None, False
    yield "grid of floats", (3.0,), good, None, False
    yield "stream object", (3,), good, object(), False
    yield "x unaligned", (3,), (odd, y, 32, -5, 0.5, False), None, False
    yield "x wrong dtype", (3,), (x.float(), y, 32, -5, 0.5, False), None, False
    yield "x wrong rank", (3,), (x.view(8, 8), y, 32, -5, 0.5, False), None, False
    yield "y not contiguous", (3,), (x, yt, 32, -5, 0.5, False), None, False
    yield "x an int address", (3,), (x.data_ptr(), y, 32, -5, 0.5, False), None, False
    yield "x None", (3,), (None, y, 32, -5, 0.5, False), None, False
    yield "x a cuda-looking tensor", (3,), (cuda_like(x), y, 32, -5, 0.5, False), None, False
    yield "x a parameter", (3,), (torch.nn.Parameter(x, requires_grad=False), y, 32, -5, 0.5, False), None, False
    yield "n not a multiple of 16", (3,), (x, y, 33, -5, 0.5, False), None, False
    yield "n too big", (3,), (x, y, 2**31, -5, 0.5, False), None, False
    yield "n a bool", (3,), (x, y, True, -5, 0.5, False), None, False
    yield "n a float", (3,), (x, y, 32.0, -5, 0.5, False), None, False
    yield "m an i64", (3,), (x, y, 32, 2**40, 0.5, False), None, True
    yield "m too big", (3,), (x, y, 32, 2**63, 0.5, False), None, False
    yield "alpha an int", (3,), (x, y, 32, -5, 2, False), None, False
    yield "alpha inf", (3,), (x, y, 32, -5, math.inf, False), None, False
    yield "alpha nan", (3,), (x, y, 32, -5, math.nan, False), None, False
    yield "alpha beyond f32", (3,), (x, y, 32, -5, 1e39, False), None, False
    yield "flag 1", (3,), (x, y, 32, -5, 0.5, 1), None, False
    yield "flag 2", (3,), (x, y, 32, -5, 0.5, 2), None, False
    yield "too few", (3,), (x, y, 32), None, False


@pytest.mark.parametrize("case", list(_cases()), ids=lambda c: c[0])
def test_the_fast_entry_launches_what_the_general_path_does(case):
    _name, grid, args, stream, takes_fast = case
    fast, slow, fast_be, slow_be = _pair()
    _warm(fast, slow)
    general_calls = []
    real = fast._general_call
    fast._general_call = lambda *a: general_calls.append(a) or real(*a)
    fast._fast = fast_call.build(fast, KINDS)        # the entry reads _general_call when it is built
    got = _outcome(fast, fast_be, grid, args, stream, general=False)
    want = _outcome(slow, slow_be, grid, args, stream, general=True)
    assert got == want
    assert (not general_calls) == takes_fast


def test_a_device_that_is_not_current_takes_the_general_path():
    fast, slow, fast_be, _ = _pair()
    _warm(fast, slow)
    x, y = _inputs()
    fast_be.current = 1                      # the tensors' device (-1: the current one) is loaded; device 1 not
    fast((2,), x, y, 16, 1, 1.0, True)
    assert fast_be.loads[-1][2] == 1         # the general path loaded the binary on the new current device


def test_a_launch_hook_takes_the_general_path():
    fast, slow, fast_be, _ = _pair()
    _warm(fast, slow)
    pytest.importorskip("triton")            # the launch metadata is triton's LazyDict
    hook = object()
    fast_be.hooks = (hook, None)
    x, y = _inputs()
    fast((2,), x, y, 16, 1, 1.0, True)
    call = fast_be.calls[-1]
    assert call[12] is hook and call[11] is not None     # the general path passed the hook and its metadata


@pytest.mark.parametrize("params, why", [(TMA_ARGS, "descriptors"), ([param("n", "scalar", "i32")], "no tensor")])
def test_no_fast_entry_where_it_would_not_apply(params, why):
    L = Launcher(fake_binary(), abi(params), backend=DirectBackend())
    L._direct = L._backend.direct_launch(None)
    assert fast_call.build(L, KINDS) is None, why


def test_no_fast_entry_without_a_direct_c_launch():
    L = Launcher(fake_binary(), abi(COPY_ARGS), backend=FakeBackend())
    x, y = torch.randn(16).half(), torch.empty(16).half()
    L((1,), x, y, 16)
    assert L._direct is None and L._fast is None


def test_compiled_kernel_calls_take_the_fast_entry(monkeypatch):
    """`ck(grid, *args)` of a compiled DSL kernel goes straight to the launcher's entry after its first call."""
    pytest.importorskip("triton")
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from copy_kernel import copy_kernel_explicit
    src, dst = torch.randn(4096), torch.empty(4096)
    kw = dict(XBLOCK=1024, VEC=4, NUM_WARPS=4, num_warps=4)
    ck = copy_kernel_explicit[(4,)].compiled(dst, src, 4096, arch="sm_90", **kw)
    be = Counting()
    ck._launcher = Launcher(ck.binary, ck.abi, backend=be)
    ck((4,), dst, src, 4096)
    entered = []
    fast = ck._launcher._fast
    ck._launcher._fast = lambda *a: entered.append(a) or fast(*a)
    ck((4,), dst, src, 4096)
    assert len(entered) == 1
    assert be.calls[0] == be.calls[1]


# ---------------------------------------------------------------- the JIT's exact entry (a key given)

MISS = object()
# what jit.arg_key says of (x aligned, y at a 4-byte offset, n = 32, m = 2**40 + 1, 0.5, False): y's plan has no
# alignment, so its key must say unaligned; m is the i64 parameter
KEYS = (("t", torch.float16, True, 1), ("t", torch.float32, False, 2), ("i", True, True), ("i", False, False), ("f",),
        ("b",))


def _exact():
    fast, slow, fast_be, slow_be = _pair()
    _warm(fast, slow)
    return fast.exact_entry(KEYS, MISS), slow, fast_be, slow_be


def _exact_args(**change):
    x, _ = _inputs()
    y = torch.randn(33)[1:].view(4, 8)          # a 4-byte offset: the key's unaligned y
    args = dict(x=x, y=y, n=32, m=2**40 + 1, alpha=0.5, flag=False)
    args.update(change)
    return tuple(args.values())


def test_an_exact_entry_launches_its_keys_calls_as_the_general_path_does():
    entry, slow, fast_be, slow_be = _exact()
    assert entry is not None and "def fast(" in entry.source
    args = _exact_args()
    assert entry((3,), args) is not MISS
    slow._general_call((3,), args, None)
    assert fast_be.calls[-1] == slow_be.calls[-1]


@pytest.mark.parametrize("change", [dict(x=torch.randn(65).half()[1:]), dict(y=torch.randn(4, 8)), dict(n=48 + 1),
                                    dict(m=5), dict(m=2**40), dict(x=torch.randn(64)), dict(alpha=1), dict(flag=0)],
                         ids=["x unaligned", "y aligned", "n not 16", "m an i32", "m a multiple of 16", "x fp32",
                              "alpha an int", "flag an int"])
def test_an_exact_entry_misses_any_other_specialization_launching_nothing(change):
    entry, _, fast_be, _ = _exact()
    n = len(fast_be.calls)
    assert entry((3,), _exact_args(**change)) is MISS and len(fast_be.calls) == n


def test_no_exact_entry_before_the_load_or_for_a_key_of_another_kind():
    fast, _, _, _ = _pair()
    assert fast.exact_entry(KEYS, MISS) is None                     # nothing loaded yet
    entry, _, _, _ = _exact()
    fast, slow, _, _ = _pair()
    _warm(fast, slow)
    assert fast.exact_entry((("p", torch.float16, True),) + KEYS[1:], MISS) is None   # x an int address


def test_a_repeated_jit_call_goes_straight_to_its_exact_entry(monkeypatch):
    """After a call is seen once more, a repeat skips the JIT's key and lookup; another alignment of the same
    call gets its own specialization through them, and keyword constexprs of other values miss too."""
    pytest.importorskip("triton")
    import sys
    from pathlib import Path

    import gluon.runtime.cuda as rt_cuda
    from gluon.arch import SM90
    be = Counting(device_type="cpu")
    monkeypatch.setattr(rt_cuda, "DEFAULT_BACKEND", be)
    monkeypatch.setattr(sys.modules["gluon.jit"], "current_arch", lambda: SM90)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from copy_kernel import copy_kernel_explicit as k
    jf = k[(4,)].jf
    for table in ("seen", "exact", "cache"):            # this test's launches only (another backend's stay)
        monkeypatch.setattr(jf, table, {})
    monkeypatch.setattr(jf, "last", None)
    src, dst = torch.randn(4096), torch.empty(4096)
    kw = dict(XBLOCK=1024, VEC=4, NUM_WARPS=4, num_warps=4)
    k[(4,)](dst, src, 4096, **kw)
    k[(4,)](dst, src, 4096, **kw)                       # seen: its exact entry is the last
    keys = []
    real = jf.seen_key
    monkeypatch.setattr(jf, "seen_key", lambda *a: keys.append(a) or real(*a))
    src2 = torch.randn(4096)
    k[(4,)](dst, src2, 4096, **kw)
    assert not keys and be.calls[-1][:14] == be.calls[0][:14] and be.calls[-1][15] == src2.data_ptr()
    compiled = len(jf.cache)
    odd = torch.randn(4097)[1:]                         # 4 bytes off: another specialization
    k[(4,)](dst, odd, 4096, **kw)
    assert len(keys) == 1 and len(jf.cache) == compiled + 1 and be.calls[-1][15] == odd.data_ptr()
    k[(4,)](dst, src2, 4096, **dict(kw, XBLOCK=512))    # other constexprs: past the entry
    assert len(keys) == 2


# ---------------------------------------------------------------- prepared launches (fast_call.build_prepared)

def _prepared_pair():
    """A prepared launch of the copy kernel with its straight-line function, and its general twin's launcher."""
    fast_be, slow_be = Counting(), Counting()
    x, y = torch.randn(64).half(), torch.empty(64).half()
    launchers = []
    for be in (fast_be, slow_be):
        L = Launcher(fake_binary(), abi(COPY_ARGS, "copy_kernel", "copy.py:2"), backend=be)
        L((2,), x, y, 64)
        launchers.append(L.prepare((2,), (x, y, 64), (0, 1)))
    return launchers, (fast_be, slow_be)


@pytest.mark.parametrize("case", ["aligned", "x off 16 bytes", "stream", "too few addresses"])
def test_a_prepared_launch_launches_what_its_general_path_does(case):
    (fast, slow), (fast_be, slow_be) = _prepared_pair()
    assert fast.fast is not None and "def fast(" in fast.fast.source
    a, b = torch.randn(64).half(), torch.empty(64).half()
    ptrs = {"aligned": (a.data_ptr(), b.data_ptr()), "x off 16 bytes": (a.data_ptr() + 2, b.data_ptr()),
            "stream": (a.data_ptr(), b.data_ptr()), "too few addresses": (a.data_ptr(),)}[case]
    stream = 55 if case == "stream" else None
    n = len(fast_be.calls), len(slow_be.calls)
    assert fast(ptrs, stream) == slow.general(ptrs, stream)
    assert fast_be.calls[n[0]:] == slow_be.calls[n[1]:]


def test_a_prepared_launch_off_its_device_or_with_a_hook_takes_the_general_path():
    (fast, _), (fast_be, _) = _prepared_pair()
    a, b = torch.randn(64).half(), torch.empty(64).half()
    fast_be.hooks = (object(), None)
    assert fast((a.data_ptr(), b.data_ptr())) is True
    assert fast_be.calls[-1][12] is fast_be.hooks[0]                # the general path passed the hook on
    fast_be.hooks = (None, None)
    fast_be.current = 1
    assert fast((a.data_ptr(), b.data_ptr())) is True
    assert fast_be.contexts[-1] == 0                                # launched on its device from another


@pytest.mark.parametrize("case", ["cached", "a new address (a miss)", "b off 16 bytes"])
def test_a_prepared_launch_with_descriptor_slots_launches_what_its_general_path_does(case):
    """The GEMM's repeated call: its descriptors' CUtensorMaps read from the descriptor cache in the straight
    line; a miss goes to the general path (which fills it), a misaligned base launches nothing."""
    from gluon.runtime.descriptors import DESC_CACHE, clear_descriptor_cache
    clear_descriptor_cache()
    fast_be, slow_be = Counting(), Counting()
    a, b, c = torch.randn(128, 64).half(), torch.randn(64, 128).half(), torch.empty(128, 128).half()
    pair = []
    for be in (fast_be, slow_be):
        L = Launcher(fake_binary(), abi(TMA_ARGS), backend=be)
        L((1,), a, b, c, 64)
        pair.append(L.prepare((1,), (a, b, c, 64), (0, 1, 2)))
    fast, slow = pair
    assert fast.fast is not None and "described((p0, *DK0))" in fast.fast.source
    a2 = torch.randn(128, 64).half()
    ptrs = {"cached": (a.data_ptr(), b.data_ptr(), c.data_ptr()),
            "a new address (a miss)": (a2.data_ptr(), b.data_ptr(), c.data_ptr()),
            "b off 16 bytes": (a.data_ptr(), b.data_ptr() + 2, c.data_ptr())}[case]
    n = len(fast_be.calls), len(slow_be.calls)
    fills = len(DESC_CACHE)
    assert fast(ptrs) == slow.general(ptrs) == (case != "b off 16 bytes")
    assert fast_be.calls[n[0]:] == slow_be.calls[n[1]:]
    assert len(DESC_CACHE) == fills + (case == "a new address (a miss)")   # filled once, then hit by both
    if case != "b off 16 bytes":                # again: each slot's last descriptor, without the cache
        fast(ptrs)                              # (after a miss the general path filled it: the cache's once more)
        hits = DESC_CACHE.hits
        assert fast(ptrs) is True and DESC_CACHE.hits == hits and fast_be.calls[-1] == slow_be.calls[-1]
        other = (a.data_ptr(), b.data_ptr(), c.data_ptr()) if ptrs[0] != a.data_ptr() else \
            (a2.data_ptr(), b.data_ptr(), c.data_ptr())
        slow.general(other)
        assert fast(other) is True and fast_be.calls[-1] == slow_be.calls[-1]     # another address: the cache


def test_a_jit_call_seen_before_takes_the_fast_entry(monkeypatch):
    """`kernel[grid](...)` with arguments of a specialization seen before goes from its lookup straight to
    the launcher's entry."""
    pytest.importorskip("triton")
    import sys
    from pathlib import Path

    import gluon.runtime.cuda as rt_cuda
    from gluon.arch import SM90
    be = Counting(device_type="cpu")
    monkeypatch.setattr(rt_cuda, "DEFAULT_BACKEND", be)
    monkeypatch.setattr(sys.modules["gluon.jit"], "current_arch", lambda: SM90)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from copy_kernel import copy_kernel_explicit
    src, dst = torch.randn(4096), torch.empty(4096)
    kw = dict(XBLOCK=1024, VEC=4, NUM_WARPS=4, num_warps=4)
    copy_kernel_explicit[(4,)](dst, src, 4096, **kw)
    seen = copy_kernel_explicit[(4,)].jf.seen
    (_, _, launcher), = [v for v in seen.values() if v[2] is not None and v[2]._backend is be]
    entered, through_call = [], []
    fast = launcher._fast
    launcher._fast = lambda *a: entered.append(a) or fast(*a)
    general = Launcher.__call__
    monkeypatch.setattr(Launcher, "__call__", lambda self, *a, **k: through_call.append(a) or general(self, *a, **k))
    copy_kernel_explicit[(4,)](dst, src, 4096, **kw)
    assert len(entered) == 1 and not through_call and be.calls[0] == be.calls[1]


def test_the_cuda_backend_hands_the_entries_torchs_c_getters():
    """The entries call torch's C getters of the current device and stream themselves (looked up by the
    backend's first calls, which raw_getters makes if nothing has yet)."""
    from gluon.runtime.cuda import CudaBackend
    be = CudaBackend()
    dev_getter, stream_getter = (lambda: 3), (lambda d: 1000 + d)
    asked = []

    def current_device():
        asked.append("device")
        be._get_device = dev_getter
        return 3

    def current_stream(d):
        asked.append(("stream", d))
        be._get_stream = stream_getter
        return 1000 + d
    be.current_device, be.current_stream = current_device, current_stream
    assert be.raw_getters() == (dev_getter, stream_getter) and asked == ["device", ("stream", 3)]
    assert be.raw_getters() == (dev_getter, stream_getter) and len(asked) == 2      # looked up once


# ---------------------------------------------------------------- a declared call's replay (fast_call.build_replay)

ADD_ARGS = [param("x", "pointer", "f16", rank=2, divisibility=16), param("y", "pointer", "f16", rank=2),
            param("out", "pointer", "f32", rank=1, divisibility=16), param("n", "scalar", "i32")]


def _replay_entry(skip=lambda: False):
    """A two-input, one-output replay entry over a prepared launch, the prepared launch's general twin, the
    backends, and the first call's inputs (the output is made with `new_empty` at another shape and dtype)."""
    fast_be, slow_be = Counting(), Counting()
    x, y = torch.randn(4, 16).half(), torch.randn(4, 16).half()
    out = torch.empty(64)
    prepared = []
    for be in (fast_be, slow_be):
        L = Launcher(fake_binary(), abi(ADD_ARGS, "add", "add.py:1"), backend=be)
        L((3,), x, y, out, 64)
        prepared.append(L.prepare((3,), (x, y, out, 64), (0, 1, 2)))
    inputs = tuple((t.shape, t.dtype, t.get_device()) for t in (x, y))
    entry = fast_call.build_replay(prepared[0], inputs, ((torch.Tensor.new_empty, (64,), torch.float32),), skip)
    return entry, prepared[1], (fast_be, slow_be), (x, y)


def test_a_replay_entry_launches_what_the_prepared_launch_does_with_a_fresh_output():
    entry, general, (fast_be, slow_be), _ = _replay_entry()
    assert entry is not None and "def fast(args)" in entry.source
    a, b = torch.randn(4, 16).half(), torch.randn(4, 16).half()
    out = entry((a, b))
    assert out.shape == (64,) and out.dtype == torch.float32
    assert general((a.data_ptr(), b.data_ptr(), out.data_ptr())) is True
    assert fast_be.calls[-1] == slow_be.calls[-1] and fast_be.calls[-1][14:17] == (a.data_ptr(), b.data_ptr(),
                                                                                   out.data_ptr())


@pytest.mark.parametrize("case", ["shape", "dtype", "strided", "x off 16 bytes", "one input", "not a tensor",
                                  "skip", "hook", "other device current"])
def test_a_replay_entry_declines_any_other_call_launching_nothing(case):
    skipping = [False]
    entry, _, (fast_be, _), (x, y) = _replay_entry(lambda: skipping[0])
    b = torch.randn(4, 16).half()
    args = {"shape": (torch.randn(4, 32).half(), b), "dtype": (torch.randn(4, 16), b),
            "strided": (torch.randn(4, 32).half()[:, ::2], b),
            "x off 16 bytes": (torch.randn(65).half()[1:].view(4, 16), b),
            "one input": (b,), "not a tensor": (b, [1.0] * 64)}.get(case, (torch.randn(4, 16).half(), b))
    skipping[0] = case == "skip"
    if case == "hook":
        fast_be.hooks = (object(), None)
    if case == "other device current":
        fast_be.current = 1
    n = len(fast_be.calls)
    assert entry(args) is None and len(fast_be.calls) == n
    assert entry((torch.randn(4, 16).half(), b)) is not None or case in ("skip", "hook", "other device current")


def test_a_replay_entry_over_descriptor_slots_leaves_a_descriptor_miss_to_the_general_path():
    """Descriptor slots are read from the descriptor cache; on a miss the entry launches nothing and returns
    None (the caller's general path fills it). No entry where the slots do not add up to the call's tensors."""
    from gluon.runtime.descriptors import clear_descriptor_cache
    clear_descriptor_cache()
    be = DirectBackend()
    L = Launcher(fake_binary(), abi(TMA_ARGS), backend=be)
    a, b, c = torch.randn(128, 64).half(), torch.randn(64, 128).half(), torch.empty(128, 128).half()
    L((1,), a, b, c, 64)
    made = ((lambda x: torch.empty(128, 128).half(), None, None),)
    ins = tuple((t.shape, t.dtype, -1) for t in (a, b))
    entry = fast_call.build_replay(L.prepare((1,), (a, b, c, 64), (0, 1, 2)), ins, made, lambda: False)
    assert entry is not None and "described(" in entry.source
    n = len(be.calls)
    assert entry((a, b)) is None and len(be.calls) == n       # the new output's descriptor: not cached yet
    entry, general, _, _ = _replay_entry()
    x = torch.randn(4, 16).half()
    assert fast_call.build_replay(general, ((x.shape, x.dtype, -1),), made, lambda: False) is None
