"""Launcher.prepare / PreparedLaunch (gluon/runtime/prepared.py): a launch validated once and re-issued with
new addresses passes the C launch exactly what a full call with those tensors passes; it refuses, launching
nothing, an address that breaks an alignment the binary relies on; hooks and another current device take the
Launcher's own path. Fake backends record the launches (CPU tensors)."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runtime_fakes import (COPY_ARGS, TMA_ARGS, DirectBackend, FakeBackend, abi, copy_launcher,  # noqa: E402
                           fake_binary, param)

from gluon.runtime import Launcher  # noqa: E402
from gluon.runtime.descriptors import clear_descriptor_cache  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_descriptors():
    clear_descriptor_cache()
    yield
    clear_descriptor_cache()


def _aligned_copy_args():
    return [param("src", "pointer", "f16", rank=1, divisibility=16), *COPY_ARGS[1:]]


@pytest.mark.parametrize("backend", [FakeBackend, DirectBackend], ids=["c_launcher", "direct"])
def test_a_prepared_pointer_launch_passes_what_a_full_call_passes(backend):
    be = backend()
    L = copy_launcher(backend=be)
    src, dst = torch.randn(64).half(), torch.empty(64).half()
    p = L.prepare((2,), (src, dst, 64), (0, 1))
    assert be.calls == []                                           # prepare launches nothing
    src2, dst2 = torch.randn(64).half(), torch.empty(64).half()
    assert p((src2.data_ptr(), dst2.data_ptr())) is True
    L((2,), src2, dst2, 64)
    prepared, full = be.calls
    assert prepared == full


def test_a_prepared_descriptor_launch_fills_a_map_for_the_new_address_once():
    be = DirectBackend()
    L = Launcher(fake_binary(), abi(TMA_ARGS, "tma"), backend=be)
    a, b, c = torch.randn(256, 128).half(), torch.randn(128, 256).half(), torch.empty(256, 256).half()
    p = L.prepare((4,), (a, b, c, 128), (0, 2))                    # a and c move; b stays
    fills = len(be.fills)
    a2, c2 = torch.randn(256, 128).half(), torch.empty(256, 256).half()
    p((a2.data_ptr(), c2.data_ptr()))
    p((a2.data_ptr(), c2.data_ptr()))
    assert len(be.fills) == fills + 2                                # a2's and c2's maps, filled once each
    L((4,), a2, b, c2, 128)
    assert len(be.fills) == fills + 2 and be.calls[0] == be.calls[1] == be.calls[2]


def test_an_address_off_the_alignment_the_binary_assumes_is_refused_before_launching():
    be = DirectBackend()
    L = copy_launcher(backend=be, params=_aligned_copy_args())
    src, dst = torch.randn(64).half(), torch.empty(64).half()
    p = L.prepare((2,), (src, dst, 64), (0, 1))
    odd = torch.randn(72).half()[1:65]
    assert p((odd.data_ptr(), dst.data_ptr())) is False and be.calls == []
    assert p((src.data_ptr(), odd.data_ptr())) is True               # dst's binary takes any address
    L2 = Launcher(fake_binary(), abi(TMA_ARGS, "tma"), backend=be)
    a, b, c = torch.randn(256, 128).half(), torch.randn(128, 256).half(), torch.empty(256, 256).half()
    p2 = L2.prepare((4,), (a, b, c, 128), (0,))
    shifted = torch.randn(256 * 128 + 8).half()[1:1 + 256 * 128]
    assert p2((shifted.data_ptr(),)) is False                        # a TMA base must be 16-byte aligned


def test_hooks_and_another_current_device_take_the_launchers_path():
    be = DirectBackend()
    L = copy_launcher(backend=be)
    src, dst = torch.randn(64).half(), torch.empty(64).half()
    p = L.prepare((2,), (src, dst, 64), (0, 1))
    be.hooks = (lambda *a: None, lambda *a: None)
    p((src.data_ptr(), dst.data_ptr()))
    be.hooks = (None, None)
    be.current = 1                                                     # the launch's device is 0
    p((src.data_ptr(), dst.data_ptr()))
    assert be.contexts == [0]                                          # switched to device 0 for it
    assert len(be.calls) == 2 and be.calls[0][0] == "direct" and be.calls[1][0] != "direct"


def test_a_scalar_cannot_take_an_address():
    L = copy_launcher()
    with pytest.raises(ValueError, match="scalar"):
        L.prepare((2,), (torch.randn(64).half(), torch.empty(64).half(), 64), (2,))
