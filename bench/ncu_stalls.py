"""Where a kernel's warps wait, from Nsight Compute's per-instruction source counters: the stall samples by reason
and the SASS lines that hold the most samples (with the line before, which usually says what is waited for: a
`SYNCS.PHASECHK` before a branch is an mbarrier wait).

    ncu --section WarpStateStats --section SourceCounters -k regex:'gemm_sm90|nvjet' -o rep \\
        python3 bench/ncu_gemm.py --shape 1024x1024x32768 --dtype bf16
    ncu -i rep.ncu-rep --page source --csv --print-source sass -k regex:gemm_sm90 > ours.csv
    python3 bench/ncu_stalls.py ours.csv [cublas.csv ...] [--top 12] [--json out.json]

An export of several launches (a `-k` filter that matched more than one) gives a summary for each.
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
    kernel: str                         # the section's kernel (an export of several launches has one each)
    samples: int
    executed: int
    reasons: dict[str, float]          # reason -> share of all samples, largest first
    top: tuple[Line, ...]


def _int(text: str) -> int:
    return int(text.replace(",", "")) if text.strip() else 0


def read(path: str, top: int = 12) -> list[Stalls]:
    """The stall summaries of one `--page source --csv --print-source sass` export: one per kernel launch in it
    (each section's first line names the kernel, the second is its header)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    headers = [i for i, r in enumerate(rows) if "# Samples" in r]
    if not headers:
        raise ValueError(f"{path}: no '# Samples' column; export with `ncu -i REPORT --page source --csv "
                         "--print-source sass` from a report that has the SourceCounters section")
    ends = headers[1:] + [len(rows) + 1]     # a section's rows stop before the next one's kernel-name line
    return [_section(path, rows[h - 1][1] if h and len(rows[h - 1]) > 1 else "", rows[h], rows[h + 1:end - 1], top)
            for h, end in zip(headers, ends)]


def _section(path: str, kernel: str, names: list[str], rows: list[list[str]], top: int) -> Stalls:
    """One kernel's summary from its header `names` and SASS `rows`."""
    ix = {h: i for i, h in enumerate(names)}
    data = [r for r in rows if len(r) == len(names)]
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
    return Stalls(path, kernel, samples, executed, reasons, tuple(lines))


def render(s: Stalls) -> str:
    out = [f"{os.path.basename(s.path)} {s.kernel[:40]}: {s.samples} samples, {s.executed} warp instructions executed",
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
        summaries = [kernel for path in args.csv for kernel in read(path, args.top)]
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
