"""The [kernel] and [tuning] tables (pydantic models: what each key takes, with suggestions for typos
and aliases), the names of the document's keys, and the unknown-key error that says where a misplaced
key belongs.
"""
from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from ..dtypes import DTYPE_ALIASES, TUNER_DTYPES
from .spec_errors import SpecError, _fmt, _Problem, _suggest
from .spec_files import _Tree

ARCHS = ("sm80", "sm90", "sm100", "cdna3")
DTYPES = tuple(TUNER_DTYPES)       # fp16 bf16 fp32 fp8e4m3 fp8e5m2, the dtype table's tuner names
SAMPLERS = ("tpe", "grid", "random", "cmaes", "gp")
OBJECTIVES = ("geomean_ratio", "min_time")
SCORINGS = ("geomean", "per_shape")

_ARCH_ALIASES = {"sm_80": "sm80", "a100": "sm80", "ampere": "sm80", "sm_90": "sm90", "sm_90a": "sm90",
                 "sm90a": "sm90", "h100": "sm90", "h200": "sm90", "hopper": "sm90", "sm_100": "sm100",
                 "sm100a": "sm100", "b200": "sm100", "blackwell": "sm100", "gfx942": "cdna3", "mi300": "cdna3",
                 "mi300x": "cdna3", "cdna": "cdna3"}
# a spec's dtype written in another vocabulary (f16, half, float16, float8_e4m3fn, ...) -> the name it means,
# from the dtype table, plus the spellings no vocabulary uses
_DTYPE_ALIASES = {**{alias: dt.tuner_name for alias, dt in DTYPE_ALIASES.items() if dt.tuner_name},
                  **{dt.name: dt.tuner_name for dt in TUNER_DTYPES.values()},
                  "bfloat": "bf16", "tf32": "fp32", "e4m3": "fp8e4m3", "fp8": "fp8e4m3", "float8e4m3": "fp8e4m3",
                  "e5m2": "fp8e5m2", "float8e5m2": "fp8e5m2"}
_SAMPLER_ALIASES = {"cma": "cmaes", "cma-es": "cmaes", "cma_es": "cmaes", "bayesian": "gp", "bo": "gp",
                    "gaussian": "gp", "exhaustive": "grid", "brute": "grid", "rand": "random", "tpe_sampler": "tpe"}
_OBJECTIVE_ALIASES = {"geomean": "geomean_ratio", "ratio": "geomean_ratio", "speedup": "geomean_ratio",
                      "time": "min_time", "min": "min_time", "latency": "min_time"}
_SCORING_ALIASES = {"per-shape": "per_shape", "pershape": "per_shape", "shape": "per_shape",
                    "geometric_mean": "geomean", "geo_mean": "geomean", "mean": "geomean"}
_KEY_ALIASES = {"regs": "registers", "register": "registers", "num_warps": "warps", "warp": "warps",
                "value": "values", "choices": "values", "choice": "values", "options": "values",
                "min_max": "range", "bounds": "range", "log2": "log", "dtype": "dtypes", "shape": "shapes",
                "constraint": "constraints", "tile": "tiles", "stage": "stages", "param": "params",
                "parameters": "params", "roles": "warp_roles", "warp_role": "warp_roles"}

TOP_KEYS = ("extends", "kernel", "dtypes", "shapes", "tiles", "swizzle", "stages", "warp_roles", "params",
            "constraints", "tuning", "args", "launch", "problem")
# the tables of a declared kernel (kernel.function; gluon.tuning.spec_declared), which a template spec has not
DECLARED_KEYS = ("args", "launch", "problem")
KERNEL_KEYS = ("name", "template", "arch", "description", "function", "dims")
ROLE_KEYS = ("warps", "registers")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _need_str(v: Any, allowed: str) -> str:
    if not isinstance(v, str):
        raise _Problem(f"{_fmt(v)} is not a string", value=v, allowed=allowed)
    return v


_TEMPLATE_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_TEMPLATE_FILE = re.compile(r"^[^:]*\.py:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$|^[A-Za-z]:[^:]*\.py:[A-Za-z_]\w*$")
TEMPLATE_ALLOWED = "'package.module:ATTR' or 'path/to/file.py:ATTR'"


FUNCTION_ALLOWED = "'package.module:function' or 'path/to/file.py:function' (a @gluon.jit kernel)"


class KernelSection(_Model):
    """[kernel]: what is tuned: a template (a TuningTemplate object), or a declared `@gluon.jit` function
    with the names of its shape's dims (its arguments and launch in [args], [launch], [problem])."""
    name: str
    template: str = ""
    function: str = ""
    dims: list[str] = []
    arch: Literal["sm80", "sm90", "sm100", "cdna3"]
    description: str = ""

    @property
    def ref(self) -> str:
        """The template or the function, whichever the spec names (rows and manifests record it)."""
        return self.template or self.function

    @field_validator("function", mode="before")
    @classmethod
    def _function(cls, v):
        _need_str(v, FUNCTION_ALLOWED)
        if _TEMPLATE_MODULE.match(v) or _TEMPLATE_FILE.match(v):
            return v
        sugg = None
        if ":" not in v and v.endswith(".py"):
            sugg = v + ":my_kernel"
        elif "/" in v and ":" in v and not v.split(":")[0].endswith(".py"):
            mod, attr = v.rsplit(":", 1)
            sugg = mod + ".py:" + attr
        raise _Problem(f"{_fmt(v)} is not a function reference", value=v, allowed=FUNCTION_ALLOWED, suggestion=sugg)

    @field_validator("dims", mode="before")
    @classmethod
    def _dims(cls, v):
        from .spec_declared import parse_dims
        return list(parse_dims(v))

    @field_validator("name", mode="before")
    @classmethod
    def _name(cls, v):
        _need_str(v, "a name of letters, digits, _ . -")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", v):
            s = re.sub(r"[^A-Za-z0-9_.\-]", "_", v).lstrip(".-") or None
            raise _Problem(f"{_fmt(v)} is not a valid kernel name", value=v,
                           allowed="letters, digits, _ . - (starting with a letter or _)",
                           suggestion=s if s and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", s) else None)
        return v

    @field_validator("template", mode="before")
    @classmethod
    def _template(cls, v):
        _need_str(v, TEMPLATE_ALLOWED)
        if _TEMPLATE_MODULE.match(v) or _TEMPLATE_FILE.match(v):
            return v
        sugg = None
        if ":" not in v:
            if v.endswith(".py") or re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", v):
                sugg = v + ":TUNING"
        elif v.count(":") == 1 and v.endswith(":"):
            sugg = v + "TUNING"
        elif "/" in v and ":" in v and not v.split(":")[0].endswith(".py"):
            mod, attr = v.rsplit(":", 1)
            sugg = mod + ".py:" + attr
        elif re.fullmatch(r"[\w.]+\.[A-Za-z_]\w*", v.replace(":", ".")) and "::" in v:
            sugg = v.replace("::", ":")
        raise _Problem(f"{_fmt(v)} is not a template reference", value=v, allowed=TEMPLATE_ALLOWED,
                       suggestion=sugg)

    @field_validator("arch", mode="before")
    @classmethod
    def _arch(cls, v):
        _need_str(v, ", ".join(ARCHS))
        if v not in ARCHS:
            raise _Problem(f"unknown arch {_fmt(v)}", value=v, allowed=", ".join(ARCHS),
                           suggestion=_suggest(v, ARCHS, _ARCH_ALIASES))
        return v

    @field_validator("description", mode="before")
    @classmethod
    def _description(cls, v):
        return _need_str(v, "a string")


def _int_rule(v, lo: int, what: str = "integers") -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise _Problem(f"{_fmt(v)} is not an integer", value=v, allowed=f"{what} >= {lo}")
    if v < lo:
        raise _Problem(f"{v} is less than {lo}", value=v, allowed=f"{what} >= {lo}")
    return v


def _num_rule(v, lo: float, strict: bool) -> float:
    allowed = f"numbers {'>' if strict else '>='} {lo:g}"
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise _Problem(f"{_fmt(v)} is not a number", value=v, allowed=allowed)
    if not math.isfinite(v) or (v <= lo if strict else v < lo):
        raise _Problem(f"{_fmt(v)} is out of range", value=v, allowed=allowed)
    return float(v)


def _one_of(v, options, aliases, what: str) -> str:
    _need_str(v, ", ".join(options))
    if v not in options:
        raise _Problem(f"unknown {what} {_fmt(v)}", value=v, allowed=", ".join(options),
                       suggestion=_suggest(v, options, aliases))
    return v


class TuningSettings(_Model):
    """[tuning]: how the tuner searches and scores."""
    trials: int = 100
    sampler: Literal["tpe", "grid", "random", "cmaes", "gp"] = "tpe"
    objective: Literal["geomean_ratio", "min_time"] = "geomean_ratio"
    seed: int = 0
    time_limit_s: float = 600.0
    rtol: float = 1e-2
    atol: float = 0.0
    baseline: str | None = None
    repeats: int = 3
    round_ms: int = 100          # each side's do_bench time per round while searching (ranks configs)
    retime_top: int = 3
    retime_round_ms: int = 1000  # per round when re-timing the best: long enough for the clock to settle
    compile_timeout_s: float = 60.0
    trial_timeout_s: float = 60.0
    storage: str | None = None
    scoring: Literal["geomean", "per_shape"] = "geomean"

    @field_validator("trials", "repeats", "round_ms", "retime_round_ms", mode="before")
    @classmethod
    def _at_least_one(cls, v):
        return _int_rule(v, 1)

    @field_validator("retime_top", mode="before")
    @classmethod
    def _at_least_zero(cls, v):
        return _int_rule(v, 0)

    @field_validator("seed", mode="before")
    @classmethod
    def _seed(cls, v):
        if not isinstance(v, int) or isinstance(v, bool):
            raise _Problem(f"{_fmt(v)} is not an integer", value=v, allowed="integers")
        return v

    @field_validator("time_limit_s", "compile_timeout_s", "trial_timeout_s", mode="before")
    @classmethod
    def _positive(cls, v):
        return _num_rule(v, 0, True)

    @field_validator("rtol", "atol", mode="before")
    @classmethod
    def _tolerance(cls, v):
        return _num_rule(v, 0, False)

    @field_validator("baseline", "storage", mode="before")
    @classmethod
    def _opt_str(cls, v):
        if v is None:
            return v
        _need_str(v, "a string")
        if not v.strip():
            raise _Problem("empty string", value=v, allowed="a non-empty string (or leave the key out)")
        return v

    @field_validator("sampler", mode="before")
    @classmethod
    def _sampler(cls, v):
        return _one_of(v, SAMPLERS, _SAMPLER_ALIASES, "sampler")

    @field_validator("objective", mode="before")
    @classmethod
    def _objective(cls, v):
        return _one_of(v, OBJECTIVES, _OBJECTIVE_ALIASES, "objective")

    @field_validator("scoring", mode="before")
    @classmethod
    def _scoring(cls, v):
        return _one_of(v, SCORINGS, _SCORING_ALIASES, "scoring")


DTYPES_ALLOWED = ", ".join(DTYPES)


def _unknown_key(tree: _Tree, path: tuple, key: Any, allowed, where: str) -> SpecError:
    hint = ""
    if key in ("dtypes", "shapes") and where != "the top level":
        hint = f" ({key} go at the top level or in [kernel])"
    elif key == "constraints":
        hint = " (constraints go at the top level, before the first [table], or in [params])"
    elif key in KERNEL_KEYS and where != "[kernel]":
        hint = f" ('{key}' belongs in [kernel])"
    elif key in TuningSettings.model_fields and where != "[tuning]":
        hint = f" ('{key}' belongs in [tuning])"
    elif key in ROLE_KEYS and where != "a warp role":
        hint = f" ('{key}' belongs in a [warp_roles.ROLE] table)"
    elif key in TOP_KEYS and where != "the top level":
        hint = f" ('{key}' is a top-level section)"
    return tree.error(path + (key,), f"unknown key {_fmt(key)}{hint}", value=key,
                      allowed=", ".join(allowed), suggestion=_suggest(key, allowed, _KEY_ALIASES))
