"""The JIT's table of launches already seen (gluon.jit.JITFunction.seen): a repeated `kernel[grid](...)`
skips normalizing the call, and still gets the specialization a first call with those arguments would
(dtype, 16-byte alignment, divisibility of ints, constexprs, num_warps). A fake backend records the
launches; the tensors are CPU tensors."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")

import gluon.runtime.cuda as rt_cuda  # noqa: E402
from gluon.jit import _jit_of  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))

from copy_kernel import copy_kernel_explicit  # noqa: E402
from runtime_fakes import FakeBackend  # noqa: E402

KW = dict(XBLOCK=256, VEC=4, NUM_WARPS=2, num_warps=2)


@pytest.fixture
def backend(monkeypatch):
    be = FakeBackend(device_type="cpu")
    monkeypatch.setattr(rt_cuda, "DEFAULT_BACKEND", be)
    jf = _jit_of(copy_kernel_explicit)
    monkeypatch.setattr(jf, "cache", {})
    monkeypatch.setattr(jf, "seen", {})
    monkeypatch.setattr(jf, "exact", {})
    monkeypatch.setattr(jf, "last", None)
    return be


def _launch(dst, src, n, **kw):
    copy_kernel_explicit[(2,)](dst, src, n, arch="sm90", **{**KW, **kw})


def test_a_repeated_call_takes_the_kernel_it_took_before(backend):
    jf = _jit_of(copy_kernel_explicit)
    src, dst = torch.randn(512), torch.empty(512)
    _launch(dst, src, 512)
    _launch(torch.empty(512), torch.randn(512), 512)          # other tensors, same specialization
    assert len(jf.cache) == 1 and len(jf.seen) == 1 and len(backend.calls) == 2
    assert backend.calls[-1][-1] == 512


def test_what_the_specialization_depends_on_still_selects_it(backend):
    jf = _jit_of(copy_kernel_explicit)
    src, dst = torch.randn(520), torch.empty(520)
    _launch(dst, src, 512)
    _launch(dst, src, 500)                                     # n not a multiple of 16
    _launch(dst[1:], src[1:], 512)                            # pointers not 16-byte aligned
    _launch(dst.double(), src.double(), 512)                  # another dtype
    _launch(dst, src, 512, XBLOCK=512)                        # another constexpr
    copy_kernel_explicit[(2,)](dst, src, 512, arch="sm90", num_warps=2, NUM_WARPS=2, VEC=4, XBLOCK=256)
    # (the same specialization with the keywords in another order: a second table entry, one kernel)
    assert len(jf.cache) == 5
    assert len(jf.seen) == 6 and len({id(hit[0]) for hit in jf.seen.values()}) == 5


def test_calls_the_table_does_not_cover_take_the_full_path(backend):
    jf = _jit_of(copy_kernel_explicit)
    src, dst = torch.randn(512), torch.empty(512)
    copy_kernel_explicit[(2,)](dst, src, 512, 256, 4, 2, arch="sm90", num_warps=2)   # constexprs by position
    assert jf.seen == {} and len(jf.cache) == 1
    _launch(dst, src, 512)                                     # the same specialization by keyword
    assert len(jf.cache) == 1 and len(jf.seen) == 1 and len(backend.calls) == 2


def test_the_launcher_still_checks_the_arguments_on_a_hit(monkeypatch):
    """The table keys on what selects the kernel; the device checks stay the launcher's, hit or not."""
    monkeypatch.setattr(rt_cuda, "DEFAULT_BACKEND", FakeBackend(device_type="cuda"))
    jf = _jit_of(copy_kernel_explicit)
    monkeypatch.setattr(jf, "cache", {})
    monkeypatch.setattr(jf, "seen", {})
    monkeypatch.setattr(jf, "exact", {})
    monkeypatch.setattr(jf, "last", None)
    src, dst = torch.randn(512), torch.empty(512)
    for _ in range(2):
        with pytest.raises(Exception, match="is a CPU tensor; move it to the GPU"):
            _launch(dst, src, 512)
    assert len(jf.seen) == 1


def test_a_call_with_the_wrong_number_of_arguments_is_refused(backend):
    src, dst = torch.randn(512), torch.empty(512)
    _launch(dst, src, 512)
    with pytest.raises(Exception, match="takes 3 runtime arguments"):
        copy_kernel_explicit[(2,)](dst, src, arch="sm90", **KW)
