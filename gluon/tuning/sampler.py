"""The study's sampler, from the spec's `tuning.sampler` (`make_sampler`: tpe with constant_liar, random,
grid over `grid_search_space`, cmaes, gp); a sampler that cannot work here is a SpecError."""
from __future__ import annotations

from .settings import _spec_error, _t


def grid_search_space(space) -> dict:
    """{name: [values]} for optuna's GridSampler, from the space's optuna distributions."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )
    out = {}
    for name, d in space.distributions().items():
        if isinstance(d, CategoricalDistribution):
            out[name] = list(d.choices)
        elif isinstance(d, IntDistribution):
            step = d.step or 1
            if d.log:
                out[name] = list(range(d.low, d.high + 1))
            else:
                out[name] = list(range(d.low, d.high + 1, step))
        elif isinstance(d, FloatDistribution) and d.step:
            n = int(round((d.high - d.low) / d.step))
            out[name] = [d.low + i * d.step for i in range(n + 1)]
        else:
            raise _spec_error(None, "tuning.sampler", f"'grid' needs a finite space; parameter {name} is {d}")
    return out


def make_sampler(spec):
    import optuna
    name = str(_t(spec, "sampler", "tpe")).lower()
    seed = _t(spec, "seed", None)
    if name == "tpe":
        # constant_liar: trials still running (other GPUs, the lookahead) count as bad, so TPE does not
        # propose the same region again before they finish
        return optuna.samplers.TPESampler(seed=seed, constant_liar=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        class Grid(optuna.samplers.GridSampler):
            def after_trial(self, study, trial, state, values):
                pass          # its study.stop() works only inside optimize(); our loop asks is_exhausted

        return Grid(grid_search_space(spec.space), seed=seed)
    if name == "cmaes":
        try:
            import cmaes  # noqa: F401
        except ImportError:
            raise _spec_error(spec, "tuning.sampler", "'cmaes' needs the cmaes package (pip install cmaes), "
                              "which is not installed", allowed="tpe, random, grid, gp") from None
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if name == "gp":
        gp = getattr(optuna.samplers, "GPSampler", None)
        if gp is None:
            raise _spec_error(spec, "tuning.sampler", f"'gp' needs optuna >= 3.6 (GPSampler); this is optuna "
                              f"{optuna.__version__}", allowed="tpe, random, grid")
        try:
            import scipy  # noqa: F401
            import torch  # noqa: F401
        except ImportError as e:
            raise _spec_error(spec, "tuning.sampler", f"'gp' needs torch and scipy ({e})",
                              allowed="tpe, random, grid") from None
        return gp(seed=seed)
    raise _spec_error(spec, "tuning.sampler", f"unknown sampler {name!r}", allowed="tpe, grid, random, cmaes, gp")
