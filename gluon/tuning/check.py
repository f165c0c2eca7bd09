"""`gluon check`: a spec's configs checked without a GPU, fast by default and honest about what it skipped.

By default a representative sample is checked: configs of the space picked greedily so that every value of
every parameter is held by at least one legal config (a picked config the passes refuse is reported and
another one holding its values is tried). `all_configs=True` checks every config of the space. Each checked
(config, dtype) is traced and run through the passes at every shape whose verdict can differ
(`template.legality_key`); unless `compile=False` the legal ones are compiled at the first of those shapes,
in parallel in the tuner's compile pool. A config that compiles with spills is a warning, counted apart
from the clean ones.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..ir import GluonError
from .expand import CompilePool, Legality
from .template import shape_str


@dataclass(frozen=True)
class CheckRow:
    """One (config, dtype): status ok | spills | legal (checked, not compiled) | pruned | compile_error |
    timeout; `shape` is where a refused config failed."""
    config_id: str
    config: dict
    dtype: str
    status: str
    reason: str | None = None
    shape: str | None = None
    registers: int | None = None
    spills: int | None = None
    shared_bytes: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class CheckReport:
    space_size: int                     # configs of the space (its constraints applied)
    configs_checked: int
    rows: tuple[CheckRow, ...]
    uncovered: tuple[str, ...] = ()     # "NAME=value" no checked legal config holds (sampled runs only)
    sampled: bool = True
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def legal(self) -> int:
        return sum(self.counts.get(s, 0) for s in ("ok", "spills", "legal"))

    @property
    def failed(self) -> int:
        return self.counts.get("compile_error", 0) + self.counts.get("timeout", 0)


def _pairs(config: dict) -> set[tuple[str, str]]:
    return {(k, repr(v)) for k, v in config.items()}


def greedy_cover(configs: list[dict], accept: Callable[[dict], bool], max_tries: int | None = None) -> set:
    """Offer `accept` configs in the order a greedy cover of every (parameter, value) pair takes them: each
    step the config holding the most pairs no accepted config holds yet (the first such in the space's order),
    until every pair is held, none adds one, or `max_tries` configs were offered (default: 8 per pair). A
    refused config covers nothing, so its pairs stay wanted. Returns the pairs no accepted config holds."""
    pairs = [_pairs(c) for c in configs]
    wanted = set().union(*pairs)
    tries = 8 * max(1, len(wanted)) if max_tries is None else max_tries
    left = list(range(len(configs)))
    while left and wanted and tries > 0:
        best = max(left, key=lambda i: (len(pairs[i] & wanted), -i))
        if not pairs[best] & wanted:
            break
        left.remove(best)
        tries -= 1
        if accept(configs[best]):
            wanted -= pairs[best]
    return wanted


def _legality_shapes(template, cid: str, shapes, dtype: str, arch: str) -> list[tuple]:
    """The shapes whose verdicts can differ for this config and dtype: one per distinct
    `template.legality_key`, the first shape first."""
    key = getattr(template, "legality_key", lambda c, s, d, a: (c, tuple(s), d, a))
    seen, out = set(), []
    for shape in shapes:
        k = key(cid, tuple(shape), dtype, arch)
        if k not in seen:
            seen.add(k)
            out.append(tuple(shape))
    return out


def check_spec(spec, template, *, all_configs: bool = False, compile: bool = True, workers: int | None = None,
               progress: Callable[[str], None] | None = None, max_tries: int | None = None) -> CheckReport:
    """Check `spec`'s configs (a sample, or `all_configs`) for every dtype: legality, then (`compile`) the legal
    ones compiled in a pool of `workers` processes (default: one per core, at most 8). `progress` gets a line
    per finished (config, dtype), with an ETA while compiles run."""
    t0 = time.monotonic()
    say = progress or (lambda line: None)
    arch = spec.kernel.arch
    configs = list(spec.space.grid())
    legality = Legality(spec, template, arch)
    rows: list[CheckRow] = []
    to_compile: list[tuple[str, dict, str, tuple]] = []
    checked = 0

    def check_one(cfg: dict) -> bool:
        """Legality of cfg for every dtype; rows for the refused ones; True if legal for one."""
        nonlocal checked
        checked += 1
        cid = spec.space.config_id(cfg)
        any_legal = False
        for dtype in spec.dtypes:
            shapes = _legality_shapes(template, cid, spec.shapes, dtype, arch)
            v = None
            for at in shapes:
                v = legality.one(cfg, cid, at, dtype, lower=compile and at == shapes[0])
                if not v.ok:
                    break
            if v is not None and not v.ok:
                reason = (v.reason or "").splitlines()[0] if v.reason else None
                rows.append(CheckRow(cid, cfg, dtype, v.status, reason, shape_str(v.shape or at)))
                say(f"{cid} {dtype:4} {v.status:13} {reason or ''}")
                continue
            any_legal = True
            if compile:
                to_compile.append((cid, cfg, dtype, shapes[0]))
            else:
                rows.append(CheckRow(cid, cfg, dtype, "legal"))
                say(f"{cid} {dtype:4} legal")
        return any_legal

    uncovered: tuple[str, ...] = ()
    if all_configs:
        for cfg in configs:
            check_one(cfg)
    else:
        uncovered = tuple(sorted(f"{k}={v}" for k, v in greedy_cover(configs, check_one, max_tries)))
    if to_compile:
        rows.extend(_compile_all(spec, legality, to_compile, workers, say))
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    return CheckReport(len(configs), checked, tuple(rows), uncovered, not all_configs, time.monotonic() - t0, counts)


def _compile_all(spec, legality: Legality, jobs: list, workers: int | None, say) -> list[CheckRow]:
    """Compile the legal (config, dtype) jobs in parallel; one row each, in the jobs' order."""
    n = len(jobs)
    workers = max(1, min(8, os.cpu_count() or 1)) if workers is None else workers
    t0 = time.monotonic()
    out: list[CheckRow] = []
    with CompilePool(workers=min(workers, n)) as pool:
        handles = []
        for cid, cfg, dtype, shape in jobs:
            try:
                lowered = legality.lowered(cfg, cid, shape, dtype)
            except GluonError as e:
                handles.append((cid, cfg, dtype, shape, None, str(e).splitlines()[0]))
                continue
            handles.append((cid, cfg, dtype, shape, pool.submit(spec, lowered), None))
        for i, (cid, cfg, dtype, shape, h, err) in enumerate(handles):
            r = {"status": "pruned", "reason": err} if h is None else pool.wait(h)
            status = r.get("status", "compile_error")
            if status == "ok" and r.get("spills"):
                status = "spills"
            reason = r.get("reason")
            row = CheckRow(cid, cfg, dtype, status, reason.splitlines()[0] if reason else None,
                           None if status in ("ok", "spills") else shape_str(shape),
                           r.get("registers"), r.get("spills"), r.get("shared_bytes"))
            out.append(row)
            done = i + 1
            eta = (time.monotonic() - t0) / done * (n - done)
            extra = (f"registers={row.registers} spills={row.spills} smem={row.shared_bytes}"
                     if status in ("ok", "spills") else (row.reason or ""))
            say(f"[{done}/{n} compiled, ETA {eta:.0f} s] {cid} {dtype:4} {status:13} {extra}")
    return out


def summary_lines(spec_name: str, report: CheckReport, compiled: bool) -> list[str]:
    """What `gluon check` prints last."""
    c = report.counts
    what = (f"checked all {report.configs_checked} configs of the space" if not report.sampled else
            f"checked a sample of {report.configs_checked} of the space's {report.space_size} configs, picked to hold "
            f"every value of every parameter ({report.space_size - report.configs_checked} skipped; --all checks "
            "them all)")
    lines = [f"{spec_name}: {what} in {report.seconds:.0f} s"]
    if compiled:
        lines.append(f"  {c.get('ok', 0)} (config, dtype) pairs compile clean, {c.get('spills', 0)} compile with "
                     f"register spills (warnings), {c.get('pruned', 0)} refused by the checks, "
                     f"{c.get('compile_error', 0)} failed to compile, {c.get('timeout', 0)} timed out")
    else:
        lines.append(f"  {c.get('legal', 0)} (config, dtype) pairs pass the checks, {c.get('pruned', 0)} refused "
                     "(not compiled: --no-compile)")
    if report.uncovered:
        lines.append(f"  no legal config among those tried holds {', '.join(report.uncovered)}")
    return lines
