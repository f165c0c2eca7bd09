"""Under `pytest -n auto --dist loadgroup` (README's test command) the GPU tests run on one worker: conftest's
collection hook puts them in one xdist group on a machine with a GPU, and runs before xdist's hook, which reads
the groups (after it, the marks would come too late: the tests were spread over every worker)."""
from types import SimpleNamespace

import conftest


def _item(*keywords):
    marks = []
    return SimpleNamespace(keywords=set(keywords), add_marker=marks.append, marks=marks)


def test_gpu_tests_share_one_xdist_group_where_there_is_a_gpu(monkeypatch):
    monkeypatch.setattr(conftest, "_has_cuda", lambda: True)
    gpu, cpu = _item("gpu", "test_x"), _item("test_y")
    conftest.pytest_collection_modifyitems(None, [gpu, cpu])
    assert [(m.name, m.args) for m in gpu.marks] == [("xdist_group", ("gpu",))] and cpu.marks == []


def test_without_a_gpu_they_are_skipped(monkeypatch):
    monkeypatch.setattr(conftest, "_has_cuda", lambda: False)
    gpu, cpu = _item("gpu"), _item()
    conftest.pytest_collection_modifyitems(None, [gpu, cpu])
    assert [m.name for m in gpu.marks] == ["skip"] and cpu.marks == []


def test_the_hook_runs_before_xdists():
    assert conftest.pytest_collection_modifyitems.pytest_impl.get("tryfirst") is True
