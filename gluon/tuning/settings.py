"""The spec's [tuning] values as the tuner reads them (`_t`: the spec's value, else the default), and the
SpecError naming the spec file and a field (`_spec_error`), for the tuner's modules."""
from __future__ import annotations

from .spec_errors import SpecError


def _t(spec, name, default=None):
    v = getattr(getattr(spec, "tuning", None), name, default)
    return default if v is None else v


def _spec_error(spec, field: str, problem: str, allowed: str = "") -> Exception:
    """A SpecError naming the spec file and the field."""
    return SpecError(getattr(spec, "source", None), None, field, problem, allowed=allowed)
