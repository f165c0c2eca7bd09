"""bench/ncu_stalls.py: the stall summary of an Nsight Compute source export, without a GPU: shares by reason, the
lines holding the most samples with the line before each, the JSON rows, and one line for a file that is not such
an export."""
import csv
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.ncu_stalls import read  # noqa: E402

HEADER = ["Address", "Source", "# Samples", "Instructions Executed", "stall_long_sb", "stall_barrier", "stall_wait",
          "stall_long_sb (Not Issued)"]
ROWS = [["0x10", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR8+0x38080], R6", "2", "1,024", "0", "0", "2", "0"],
        ["0x20", "@!P0  BRA 0x7f", "60", "1,024", "55", "0", "5", "40"],
        ["0x30", "WARPGROUP.DEPBAR.LE gsb0, 0x1", "30", "1,024", "0", "28", "2", "0"],
        ["0x40", "EXIT", "8", "128", "0", "0", "8", "0"]]


def _export(path, kernels=("gemm_sm90",)):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        for i, kernel in enumerate(kernels):
            w.writerow(["Kernel Name", kernel])
            w.writerow(HEADER)
            w.writerows(ROWS[i:])
    return str(path)


def test_shares_by_reason_and_the_lines_that_wait(tmp_path):
    [s] = read(_export(tmp_path / "ours.csv"), top=2)
    assert s.kernel == "gemm_sm90"
    assert s.samples == 100 and s.executed == 3200
    assert list(s.reasons) == ["long_sb", "barrier", "wait"]          # largest first; Not Issued columns left out
    assert abs(s.reasons["long_sb"] - 0.55) < 1e-9
    first, second = s.top
    assert first.source.startswith("@!P0  BRA") and first.after.startswith("SYNCS.PHASECHK")   # an mbarrier wait
    assert first.reasons == ("long_sb", "wait") and abs(first.share - 0.6) < 1e-9
    assert second.source.startswith("WARPGROUP.DEPBAR") and second.reasons == ("barrier", "wait")


def test_the_script_prints_writes_json_and_refuses_other_files(tmp_path):
    out = tmp_path / "rows.json"
    script = os.path.join(ROOT, "bench", "ncu_stalls.py")
    r = subprocess.run([sys.executable, script, _export(tmp_path / "a.csv"), "--top", "1", "--json", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "100 samples" in r.stdout and "long_sb 55.0%" in r.stdout
    rows = json.loads(out.read_text())
    assert rows[0]["top"][0]["executed"] == 1024 and len(rows[0]["top"]) == 1
    bad = subprocess.run([sys.executable, script, os.path.join(ROOT, "README.md")], capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "'# Samples'" in bad.stderr


def test_an_export_of_several_launches_gives_one_summary_each(tmp_path):
    """ncu exports every profiled launch of a filter in one file, each with its own name line and header."""
    ours, theirs = read(_export(tmp_path / "two.csv", ("gemm_sm90", "nvjet_sm90_qqtst_128x128")))
    assert (ours.kernel, ours.samples) == ("gemm_sm90", 100)
    assert (theirs.kernel, theirs.samples) == ("nvjet_sm90_qqtst_128x128", 98)     # its rows: ROWS[1:]
    first = theirs.top[0]                 # its first line: nothing before it (not the other section's last)
    assert first.source.startswith("@!P0  BRA") and first.after == ""
