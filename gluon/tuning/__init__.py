"""Kernel tuning: declarative specs (TOML/YAML) and their search spaces.

    from gluon.tuning import load_spec, SpecError
    spec = load_spec("specs/gemm_sm90.toml")

`gluon.tuning.space` needs nothing beyond the standard library; the spec loader (pydantic, PyYAML,
tomllib/tomli) is imported on first use of the names below.
"""
from .space import Choice, Fixed, IntRange, SearchSpace, evaluate

_SPEC_NAMES = ("load_spec", "resolve_template", "SpecError", "Spec", "KernelSection", "TuningSettings")

__all__ = ["Choice", "Fixed", "IntRange", "SearchSpace", "evaluate", "load_spec", "resolve_template", "SpecError",
           "Spec", "KernelSection", "TuningSettings"]


def __getattr__(name):
    if name in _SPEC_NAMES:
        from . import spec
        return getattr(spec, name)
    raise AttributeError(f"module 'gluon.tuning' has no attribute {name!r}")
