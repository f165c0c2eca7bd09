"""What `tune()` returns: one study's counts, best config and re-timings (or, for scoring = per_shape, the
totals with one summary per (shape, dtype) in `studies`; for a dry run, the model's ranking)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TuneSummary:
    spec_name: str
    dry_run: bool
    results_root: str
    study_name: str | None = None
    storage: str | None = None
    device: str | None = None
    trials: int = 0                 # evaluated configs in the study (all runs)
    new_trials: int = 0             # of which evaluated by this call
    measured: int = 0               # GPU jobs (config, shape, dtype) run by this call, retimes excluded
    reused: int = 0                 # jobs looked up in the results store
    duplicates: int = 0             # proposals answered from the study
    statuses: dict = field(default_factory=dict)   # this call's trials by status
    best_config: dict | None = None
    best_config_id: str | None = None
    best_value: float | None = None
    best_trial: int | None = None
    retimed: list = field(default_factory=list)    # [{config_id, config, trial, value, first_value}]
    retime_skipped: int = 0         # re-timing jobs not run: the time limit came first
    time_limit_s: float | None = None  # the limit this study ran under (per_shape: its share of the spec's)
    ranking: list = field(default_factory=list)    # dry run: [{config_id, config, score, model_ms}]
    rows_written: int = 0
    stopped: str = ""               # trials | exhausted | time_limit | idle | interrupted | dry_run
    interrupted: bool = False
    studies: list = field(default_factory=list)    # scoring = per_shape: one summary per (shape, dtype)
    message: str = ""
