"""bench/launch_overhead.py's bookkeeping, with fake cases and a fake clock (the cases need a GPU): each
(group, path) row keeps its own rounds, also where two groups name a path alike."""
import itertools
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_rows_of_two_groups_with_the_same_path_names_keep_their_own_rounds(tmp_path, monkeypatch):
    sys.path.insert(0, ROOT)
    import bench.launch_overhead as lo
    cases = [("GEMM aligned", "torch.matmul", "t1"), ("GEMM aligned", "ours: launch", "o1"),
             ("GEMM unaligned", "torch.matmul", "t2"), ("GEMM unaligned", "ours: launch", "o2")]
    us = {"t1": 10.0, "o1": 9.0, "t2": 11.0, "o2": 30.0}
    monkeypatch.setattr(lo, "_cases", lambda: cases)
    monkeypatch.setattr(lo, "host_us_per_call", lambda fn, calls: us[fn])
    monkeypatch.setattr(lo, "environment", lambda: {"device": "fake", "commit": "x"})
    out = tmp_path / "rows.json"
    monkeypatch.setattr(sys, "argv", ["launch_overhead.py", "--repeats", "3", "--json", str(out)])
    assert lo.main() == 0
    rows = {(r["group"], r["path"]): r for r in json.loads(out.read_text())["rows"]}
    assert rows["GEMM unaligned", "ours: launch"]["rounds_us"] == [30.0] * 3
    assert rows["GEMM aligned", "ours: launch"]["host_us"] == 9.0
    assert abs(rows["GEMM unaligned", "ours: launch"]["vs_torch"] - 30 / 11) < 1e-9
    assert list(itertools.chain.from_iterable(r["rounds_us"] for r in rows.values())).count(10.0) == 3
