"""A declared kernel's repeated call (gluon/tuning/declared_replay.py): positional tensors of the shapes,
strides, dtypes and devices of a call seen before, and the same config values, replay that call's launch
with new addresses and fresh outputs; anything else takes the full path. A fake backend records launches
(CPU tensors pass its device check)."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_declared import _write  # noqa: E402
from runtime_fakes import FakeBackend  # noqa: E402

from gluon.arch import SM90  # noqa: E402
from gluon.tuning.spec import load_spec, template_of  # noqa: E402

CONFIG = {"BLOCK": 1024, "NUM_WARPS": 4}


@pytest.fixture
def scale(tmp_path, monkeypatch):
    import gluon.runtime.cuda as rt_cuda
    be = FakeBackend(device_type="cpu")
    monkeypatch.setattr(rt_cuda, "DEFAULT_BACKEND", be)
    monkeypatch.setattr(sys.modules["gluon.jit"], "current_arch", lambda: SM90)       # the "GPU" the calls compile for
    t = template_of(load_spec(_write(tmp_path)))
    return t, be


def _full_path_calls(t, monkeypatch):
    """A counter of the full path's argument reading (`prepare`)."""
    n = [0]
    real = t.prepare
    monkeypatch.setattr(t, "prepare", lambda *a, **k: n.__setitem__(0, n[0] + 1) or real(*a, **k))
    return n


def test_a_repeat_replays_the_launch_with_the_new_addresses(scale, monkeypatch):
    t, be = scale
    x = torch.randn(3000).half()
    y1 = t.call(CONFIG, x)
    full = _full_path_calls(t, monkeypatch)
    x2 = torch.randn(3000).half()
    y2 = t.call(dict(CONFIG), x2)                       # an equal config in another dict
    assert full[0] == 0 and len(be.calls) == 2
    assert y2.shape == y1.shape and y2.dtype == y1.dtype and y2.data_ptr() != y1.data_ptr()
    first, again = be.calls
    assert first[9:] == (y1.data_ptr(), x.data_ptr(), 3000, 0.5)
    assert again[9:] == (y2.data_ptr(), x2.data_ptr(), 3000, 0.5) and again[:3] == first[:3]


@pytest.mark.parametrize("change", ["shape", "dtype", "config", "out given", "strided"])
def test_what_the_launch_depends_on_takes_the_full_path(scale, monkeypatch, change):
    t, be = scale
    x = torch.randn(3000).half()
    t.call(CONFIG, x)
    full = _full_path_calls(t, monkeypatch)
    if change == "shape":
        t.call(CONFIG, torch.randn(2000).half())
    elif change == "dtype":
        t.call(CONFIG, x.float())
    elif change == "config":
        t.call({"BLOCK": 512, "NUM_WARPS": 2}, x)
    elif change == "out given":
        t.call(CONFIG, x, out=torch.empty(3000).half())
    else:
        with pytest.raises(Exception, match="not contiguous"):
            t.call(CONFIG, torch.randn(6000).half()[::2])
    assert full[0] == 1


def test_an_input_off_16_bytes_is_never_replayed_into_an_aligned_specialization(scale, monkeypatch):
    t, be = scale
    t.call(CONFIG, torch.randn(3000).half())
    full = _full_path_calls(t, monkeypatch)
    odd = torch.randn(3001).half()[1:]                  # same shape and stride, base 2 bytes off
    t.call(CONFIG, odd)
    assert full[0] == 1 and be.calls[-1][10] == odd.data_ptr()
    assert len(t._replays) == 1                         # the unaligned call made no replay of its own


def _loaded(tmp_path, monkeypatch, capsys, backend):
    """gluon.load("scale") of the spec tuned (dry run) and built in tmp_path, launching on `backend`."""
    import gluon
    import gluon.runtime.cuda as rt_cuda
    from gluon.cli import main
    spec = _write(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["tune", str(spec)]) == 0 and main(["build", "--best", "--allow-dry-run", "--specs", str(tmp_path)]) == 0
    capsys.readouterr()
    monkeypatch.setattr(rt_cuda, "DEFAULT_BACKEND", backend)
    monkeypatch.setattr(sys.modules["gluon.jit"], "current_arch", lambda: SM90)
    return gluon.load("scale")


def test_a_loaded_kernels_repeat_skips_the_bucket_choice_and_replays(tmp_path, monkeypatch, capsys):
    """gluon.load(name)(x): the first call of a key reads the arguments and picks the bucket; a repeat goes
    straight to the bucket's config and the template's replay."""
    be = FakeBackend(device_type="cpu")
    k = _loaded(tmp_path, monkeypatch, capsys, be)
    x = torch.randn(3000).half()
    y1 = k(x)
    bucket = [0]
    real = k.bucket
    monkeypatch.setattr(k, "bucket", lambda *a: bucket.__setitem__(0, bucket[0] + 1) or real(*a))
    y2 = k(torch.randn(3000).half())
    assert bucket[0] == 0 and len(be.calls) == 2 and y2.shape == y1.shape
    assert len(k._replays) == 1
    k(torch.randn(5000).half())                          # a new key: the bucket is chosen again
    assert bucket[0] == 1
    sys.modules.pop("k", None)


def test_a_loaded_kernels_last_key_goes_straight_to_its_replays_entry(tmp_path, monkeypatch, capsys):
    """A repeat of the key replayed last skips the call key and the lookup (Replay.entry checks the key
    itself); another key, and the interpreter, go the other way and launch the same."""
    import gluon.loader as loader
    from runtime_fakes import DirectBackend
    be = DirectBackend(device_type="cpu")
    k = _loaded(tmp_path, monkeypatch, capsys, be)
    keys = [0]
    real_key = loader.call_key
    monkeypatch.setattr(loader, "call_key", lambda a: keys.__setitem__(0, keys[0] + 1) or real_key(a))
    x = torch.randn(3000).half()
    k(x)
    k(x)                                                 # the dict's replay: its entry becomes the last
    (replay,) = k._replays._kept.values()
    assert k._last is replay.entry and keys[0] == 2
    x3 = torch.randn(3000).half()
    y3 = k(x3)
    assert keys[0] == 2 and be.calls[-1][14:] == (y3.data_ptr(), x3.data_ptr(), 3000, 0.5)
    assert be.calls[-1][:14] == be.calls[0][:14]
    k(torch.randn(5000).half())                          # another key: past the entry, the full path
    assert keys[0] == 3 and len(be.calls) == 4
    monkeypatch.setattr(sys.modules["gluon.jit"], "_INTERPRET_LAUNCHES", True)
    assert replay.entry((x3,)) is None                   # the interpreter: never the replay's launch
    sys.modules.pop("k", None)


def test_the_templates_call_takes_the_last_entry_for_an_equal_config_only(tmp_path, monkeypatch):
    import gluon.runtime.cuda as rt_cuda
    import gluon.tuning.declared as declared
    from runtime_fakes import DirectBackend
    be = DirectBackend(device_type="cpu")
    monkeypatch.setattr(rt_cuda, "DEFAULT_BACKEND", be)
    monkeypatch.setattr(sys.modules["gluon.jit"], "current_arch", lambda: SM90)
    t = template_of(load_spec(_write(tmp_path)))
    keys = [0]
    real_key = declared.call_key
    monkeypatch.setattr(declared, "call_key", lambda a: keys.__setitem__(0, keys[0] + 1) or real_key(a))
    x = torch.randn(3000).half()
    t.call(CONFIG, x)
    t.call(CONFIG, x)
    assert t._last is not None and keys[0] == 2
    y = t.call(dict(CONFIG), torch.randn(3000).half())
    assert keys[0] == 2 and len(be.calls) == 3 and y.shape == x.shape
    other = {"BLOCK": 512, "NUM_WARPS": 2}
    t.call(other, x)                                     # another config: not the last entry's launch
    assert keys[0] == 3 and be.calls[-1][1:4] != be.calls[0][1:4]
