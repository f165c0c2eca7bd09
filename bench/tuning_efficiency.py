"""How close does the tuner's TPE search get to the exhaustive best, with a quarter of the configs?

    python3 bench/tuning_efficiency.py --spec specs/copy.toml --json out.json
    python3 bench/tuning_efficiency.py --spec gemm-small --json gemm.json     # a reduced gemm_sm90 space

On a space small enough to measure exhaustively (the copy spec: 30 configs; `gemm-small`: a reduced
gemm_sm90 spec written to a temporary file), through the tuner itself (`gluon.tuning.tuner.tune`, its
GPU workers: verified outputs, median of CUDA-event timings with the L2 flushed, interleaved with the
baseline):

1. grid: every config once (sampler overridden to "grid", no retiming). Valid configs = those whose
   every (shape, dtype) verified and timed (COMPLETE trials); the exhaustive best is the best of their
   objective values (the spec's objective: geomean ratio to the baseline, or geomean time).
2. TPE with seeds 0..4 (sampler "tpe", seed overridden), each in its own study (its own tuning folder)
   with a budget of 25% of the valid configs (rounded up). All runs share one results store, so every
   config TPE proposes is looked up from the grid's measurement instead of measured again: each config
   is measured once, and TPE's values are exactly the grid's numbers (no noise between the two).
3. Per seed: TPE's best, its gap to the exhaustive best (must be within 3%), the configs it evaluated
   and how many it needed to first come within 3%.

Prints a table; `--json PATH` writes every row (each config's exhaustive value, each seed's result).
Exit code: 0 when every seed came within the tolerance, 1 when one did not, 2 without a GPU.

Notes: a fresh `gluon tune` study first measures the template's hand-picked configs; here the TPE
studies start without them (the sampler alone), unless `--seeded`. optuna's TPE samples its first
`n_startup_trials` (10) configs at random; with a budget below that the run measures random search.
`--startup N` lowers it (the bench then replaces the tuner's sampler factory for the TPE runs).
"""
from __future__ import annotations

import math
import os
import statistics
import sys
import tempfile
import textwrap

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.common import ROOT, environment, parser, write_json  # noqa: E402

GEMM_SMALL = textwrap.dedent("""
    # gemm_sm90 reduced to 2 x 2 x 2 x 2 = 16 configs, for bench/tuning_efficiency.py
    [kernel]
    name = "gemm_sm90_small"
    template = "gluon.tuning.templates.gemm_sm90:TUNING"
    arch = "sm90"
    dtypes = ["fp16"]
    shapes = [[4096, 4096, 4096], [2048, 2048, 2048]]
    [tiles]
    BLOCK_M = 128
    BLOCK_N = { values = [128, 256] }
    BLOCK_K = 64
    [swizzle]
    SWIZZLE = 128
    [stages]
    STAGES = { values = [3, 4] }
    [warp_roles.consumer]
    warps = 8
    [warp_roles.producer]
    warps = 1
    registers = 40
    [params]
    GROUP_M = { values = [8, 16] }
    EPILOGUE = { values = ["tma", "direct"] }
    [tuning]
    sampler = "tpe"
    objective = "geomean_ratio"
    baseline = "torch"
""")


def _with_tuning(spec, **kw):
    """The spec with [tuning] values replaced (same content hash: the results lookups still match)."""
    return spec.model_copy(update={"tuning": spec.tuning.model_copy(update=kw)})


def _study(summary):
    import optuna

    from gluon.tuning.storage import journal_storage
    return optuna.load_study(study_name=summary.study_name, storage=journal_storage(summary.storage))


def _evaluated(study):
    """Evaluated trials in order (the tuner's budget: COMPLETE, and PRUNED after legality), duplicates out."""
    from gluon.tuning.study import _Study
    return sorted((t for t in study.trials if _Study._counts(t)), key=lambda t: t.number)


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--spec", default=os.path.join(ROOT, "specs", "copy.toml"),
                   help="a spec file, or 'gemm-small' for a reduced gemm_sm90 space (default specs/copy.toml)")
    p.add_argument("--seeds", default="0,1,2,3,4", help="TPE seeds (default 0,1,2,3,4)")
    p.add_argument("--fraction", type=float, default=0.25, help="TPE budget as a fraction of the valid configs")
    p.add_argument("--tolerance", type=float, default=0.03, help="allowed gap to the exhaustive best (0.03 = 3%%)")
    p.add_argument("--startup", type=int, default=None, help="TPE n_startup_trials (default: the tuner's sampler)")
    p.add_argument("--seeded", action="store_true", help="start each TPE study from the template's hand-picked "
                   "configs, as `gluon tune` does (default: TPE alone, so the numbers measure the sampler)")
    p.add_argument("--gpus", default=None, help="comma list of GPU indices (default: all visible)")
    p.add_argument("--work", default=None, help="folder for results/ and tuning/ (default: a temporary one)")
    p.add_argument("--time-limit", type=float, default=24 * 3600.0, help="seconds per tuner run")
    args = p.parse_args()

    try:
        import torch
        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if not has_gpu:
        print("bench/tuning_efficiency.py needs a CUDA GPU: it times every config of the space on the device "
              "(no GPU here; `gluon tune SPEC --dry-run` ranks configs without one)", file=sys.stderr)
        return 2

    from gluon.tuning import study as study_mod
    from gluon.tuning import tuner as tuner_mod
    from gluon.tuning.spec import load_spec
    work = args.work or tempfile.mkdtemp(prefix="gluon-tuning-efficiency-")
    spec_path = args.spec
    if spec_path == "gemm-small":
        spec_path = os.path.join(work, "gemm_sm90_small.toml")
        os.makedirs(work, exist_ok=True)
        with open(spec_path, "w") as f:
            f.write(GEMM_SMALL)
    spec = load_spec(spec_path)
    gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else None
    results = os.path.join(work, "results")
    size = spec.space.size()
    maximize = str(spec.tuning.objective) == "geomean_ratio"
    print(f"{spec.name}: {size} configs in the space; work folder {work}", flush=True)

    # 1. every config once
    grid = tuner_mod.tune(_with_tuning(spec, sampler="grid", trials=size, retime_top=0, time_limit_s=args.time_limit,
                                       repeats=args.repeats, storage=None),
                          gpus=gpus, dry_run=False, progress=True, results_root=results,
                          tuning_root=os.path.join(work, "tuning", "grid"))
    if grid.stopped not in ("exhausted", "trials"):
        print(f"warning: the grid run stopped early ({grid.stopped}); the exhaustive best covers "
              f"{grid.trials} configs", file=sys.stderr)
    import optuna
    gstudy = _study(grid)
    evaluated = _evaluated(gstudy)
    valid = [t for t in evaluated if t.state == optuna.trial.TrialState.COMPLETE]
    if not valid:
        print("no config of the space verified and timed: nothing to compare", file=sys.stderr)
        return 1
    exh = max(valid, key=lambda t: t.value if maximize else -t.value)
    exh_best = exh.value
    rows = [{"kind": "exhaustive", "config_id": t.user_attrs.get("config_id"), "config": t.user_attrs.get("config"),
             "status": t.user_attrs.get("status"), "value": t.value, "trial": t.number} for t in evaluated]
    budget = max(1, math.ceil(args.fraction * len(valid)))
    print(f"exhaustive: {len(evaluated)} configs evaluated, {len(valid)} valid, best {exh_best:.4g} "
          f"({exh.user_attrs.get('config_id')}); TPE budget {budget} configs per seed", flush=True)

    def gap(v):
        return (1.0 - v / exh_best) if maximize else (v / exh_best - 1.0)

    # 2. TPE per seed, reusing the grid's measurements through the shared results store
    make_sampler = study_mod.make_sampler          # where each study builds its sampler
    if args.startup is not None:
        def make_sampler_startup(s):
            if str(s.tuning.sampler) == "tpe":
                return optuna.samplers.TPESampler(seed=s.tuning.seed, n_startup_trials=args.startup,
                                                    constant_liar=True)
            return make_sampler(s)
        study_mod.make_sampler = make_sampler_startup
    seeds = [int(s) for s in args.seeds.split(",")]
    table = []
    try:
        for seed in seeds:
            # one study folder per (seed, startup, seeding): a rerun with other settings is a new search
            tag = f"tpe-seed{seed}-startup{args.startup or 'default'}{'-seeded' if args.seeded else ''}"
            s = tuner_mod.tune(_with_tuning(spec, sampler="tpe", seed=seed, trials=budget, retime_top=0,
                                            time_limit_s=args.time_limit, repeats=args.repeats, storage=None),
                               gpus=gpus, dry_run=False, progress=False, results_root=results,
                               tuning_root=os.path.join(work, "tuning", tag), seeds=args.seeded)
            trials = _evaluated(_study(s))
            best, reached = None, None
            for i, t in enumerate(trials, 1):
                if t.state != optuna.trial.TrialState.COMPLETE:
                    continue
                if best is None or (t.value > best.value if maximize else t.value < best.value):
                    best = t
                if reached is None and gap(t.value) <= args.tolerance:
                    reached = i
            row = {"kind": "tpe", "seed": seed, "budget": budget, "evaluated": len(trials), "measured": s.measured,
                   "reused": s.reused, "best_value": best.value if best else None,
                   "best_config_id": best.user_attrs.get("config_id") if best else None,
                   "best_config": best.user_attrs.get("config") if best else None, "exhaustive_best": exh_best,
                   "gap": gap(best.value) if best else None, "configs_to_tolerance": reached,
                   "within_tolerance": bool(best is not None and gap(best.value) <= args.tolerance)}
            table.append(row)
            rows.append(row)
            print(f"seed {seed}: best {row['best_value']} gap {row['gap']} after {row['evaluated']} configs "
                  f"(measured {s.measured}, looked up {s.reused})", flush=True)
    finally:
        study_mod.make_sampler = make_sampler

    # 3. the table
    print()
    print(f"{spec.name}: {len(valid)} valid configs, exhaustive best {exh_best:.4g} "
          f"({'geomean ratio, higher is better' if maximize else 'geomean ms, lower is better'}); "
          f"TPE budget {budget} ({args.fraction:.0%}), tolerance {args.tolerance:.0%}")
    print(f"{'seed':>4} {'configs':>7} {'TPE best':>10} {'gap':>8} {'within':>6} {'configs to tol':>14}  best config")
    for r in table:
        v = f"{r['best_value']:.4g}" if r["best_value"] is not None else "-"
        g = f"{100 * r['gap']:.2f}%" if r["gap"] is not None else "-"
        print(f"{r['seed']:>4} {r['evaluated']:>7} {v:>10} {g:>8} {'yes' if r['within_tolerance'] else 'NO':>6} "
              f"{r['configs_to_tolerance'] if r['configs_to_tolerance'] else '-':>14}  {r['best_config']}")
    hits = sum(r["within_tolerance"] for r in table)
    gaps = [r["gap"] for r in table if r["gap"] is not None]
    print(f"{hits}/{len(table)} seeds within {args.tolerance:.0%}; median gap "
          f"{100 * statistics.median(gaps):.2f}%" if gaps else "no seed found a working config")
    meta = dict(environment(), spec=os.path.abspath(spec_path), spec_name=spec.name, space_size=size,
                valid=len(valid), evaluated=len(evaluated), exhaustive_best=exh_best,
                exhaustive_best_config=exh.user_attrs.get("config"), budget=budget, fraction=args.fraction,
                tolerance=args.tolerance, startup=args.startup, seeded=args.seeded,
                objective=str(spec.tuning.objective),
                seeds=seeds, work=work, within=hits)
    write_json(args.json, rows, meta)
    return 0 if hits == len(table) else 1


if __name__ == "__main__":
    sys.exit(main())
