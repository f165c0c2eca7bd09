"""Where a kernel's warps wait, from Nsight Compute's per-instruction source counters: the stall samples by reason
and the SASS lines that hold the most samples (with the line before, which usually says what is waited for: a
`SYNCS.PHASECHK` before a branch is an mbarrier wait).

    ncu --section WarpStateStats --section SourceCounters -k regex:'gemm_sm90|nvjet' -o rep \\
        python3 bench/ncu_gemm.py --shape 1024x1024x32768 --dtype bf16
    ncu -i rep.ncu-rep --page source --csv --print-source sass -k regex:gemm_sm90 > ours.csv
    python3 bench/ncu_stalls.py ours.csv [cublas.csv ...] [--top 12] [--json out.json]

Reads the CSV without a GPU (docs/PERF.md, twenty-ninth session, has two such readings).
"""
from __future__ import annotations

import os
import sys

# the repo root instead of bench/ on the path, before any import: bench/copy.py must not shadow the stdlib `copy`
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402


@dataclass(frozen=True)
class Line:
    """One SASS line's samples: `share` of the kernel's, its `executed` warp instructions, its two largest stall
    reasons, and the line before it."""
    source: str
    share: float
    executed: int
    reasons: tuple[str, ...]
    after: str


@dataclass(frozen=True)
class Stalls:
    path: str
    samples: int
    executed: int
    reasons: dict[str, float]          # reason -> share of all samples, largest first
    top: tuple[Line, ...]


def _int(text: str) -> int:
    return int(text.replace(",", "")) if text.strip() else 0


def read(path: str, top: int = 12) -> Stalls:
    """The stall summary of one `--page source --csv --print-source sass` export (its first line names the kernel,
    the second is the header)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = next((i for i, r in enumerate(rows) if "# Samples" in r), None)
    if header is None:
        raise ValueError(f"{path}: no '# Samples' column; export with `ncu -i REPORT --page source --csv "
                         "--print-source sass` from a report that has the SourceCounters section")
    names = rows[header]
    ix = {h: i for i, h in enumerate(names)}
    data = [r for r in rows[header + 1:] if len(r) == len(names)]
    samples = sum(_int(r[ix["# Samples"]]) for r in data)
    executed = sum(_int(r[ix["Instructions Executed"]]) for r in data)
    kinds = [h for h in names if h.startswith("stall_") and "Not Issued" not in h]
    total = max(samples, 1)
    by_reason = {k[6:]: sum(_int(r[ix[k]]) for r in data) / total for k in kinds}
    reasons = dict(sorted(((k, v) for k, v in by_reason.items() if v), key=lambda kv: -kv[1]))
    ranked = sorted(range(len(data)), key=lambda i: -_int(data[i][ix["# Samples"]]))[:top]
    lines = []
    for i in ranked:
        r = data[i]
        most = sorted(kinds, key=lambda k: -_int(r[ix[k]]))[:2]
        lines.append(Line(r[ix["Source"]].strip(), _int(r[ix["# Samples"]]) / total,
                          _int(r[ix["Instructions Executed"]]), tuple(k[6:] for k in most if _int(r[ix[k]])),
                          data[i - 1][ix["Source"]].strip() if i else ""))
    return Stalls(path, samples, executed, reasons, tuple(lines))


def render(s: Stalls) -> str:
    out = [f"{os.path.basename(s.path)}: {s.samples} samples, {s.executed} warp instructions executed",
           "  by reason: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in list(s.reasons.items())[:8])]
    for ln in s.top:
        out.append(f"  {100 * ln.share:5.1f}% x{ln.executed:>8} {ln.source[:56]:56s} {'/'.join(ln.reasons):22s} "
                   f"(after: {ln.after[:48]})")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", nargs="+", help="`ncu --page source --csv --print-source sass` exports")
    p.add_argument("--top", type=int, default=12, help="SASS lines listed per kernel (default 12)")
    p.add_argument("--json", metavar="PATH", help="write every summary here")
    args = p.parse_args(argv)
    try:
        summaries = [read(path, args.top) for path in args.csv]
    except (OSError, ValueError) as e:
        print(f"ncu_stalls: {e}", file=sys.stderr)
        return 1
    try:
        print("\n".join(render(s) for s in summaries))
        sys.stdout.flush()
    except BrokenPipeError:             # quiet on a closed pipe (| head)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump([asdict(s) for s in summaries], f, indent=1)
        os.replace(tmp, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
