"""Declarative kernel specs: a kernel's tuning problem in a TOML or YAML file.

    spec = load_spec("specs/gemm_sm90.toml")
    spec.space.size(), list(spec.space.grid()), spec.tuning.trials, spec.content_hash
    tuning = resolve_template(spec)          # imports kernel.template lazily

File layout (TOML; YAML is the same tree):

    extends = "base.toml"                    # optional, relative to this file; deep-merged, this file wins,
                                             # lists replace
    dtypes = [...]  shapes = [[...], ...]    # top level, or inside [kernel]
    constraints = ["..."]                    # top level, or inside [kernel], [tiles], [swizzle], [stages], [params]
    [kernel]   name, template ("pkg.mod:ATTR" | "path/file.py:ATTR"), arch (sm80|sm90|sm100|cdna3), description
    [tiles]    NAME = 128 | { values = [...] } | { range = [lo, hi], step = s } | { range = [lo, hi], log = true }
               (powers of two)
    [swizzle]  NAME = 0 | 32 | 64 | 128, or a domain of them
    [stages]   NAME = 1..8, or a domain
    [warp_roles.ROLE]  warps = 1..32 | domain, registers = multiple of 8 in 24..256 | domain
                       (parameters ROLE_WARPS, ROLE_REGS, upper case)
    [params]   NAME = int | float | string | bool | domain
    [tuning]   see TuningSettings

Every problem raises SpecError, whose message names the file, the line (where the format gives one),
the dotted field, the bad value, what is allowed, and a suggestion for typos:

    specs/bad.toml:12: tiles.BLOCK_N.values[1]: 96 is not a power of two; allowed: powers of two (16, 32, ...)
    specs/bad.toml:7: stagse: unknown key 'stagse'; did you mean 'stages'? (allowed: kernel, dtypes, ...)
"""
from __future__ import annotations

import bisect
import difflib
import hashlib
import importlib
import importlib.util
import json
import keyword
import math
import re
import traceback
from pathlib import Path
from typing import Any, Literal

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from . import space as _space
from .space import (
    ALLOWED_SYNTAX,
    Choice,
    Domain,
    ExprError,
    Fixed,
    IntRange,
    SearchSpace,
    expression_names,
    is_power_of_two,
    parse_expression,
    string_comparisons,
)

__all__ = ["load_spec", "resolve_template", "SpecError", "Spec", "KernelSection", "TuningSettings",
           "ARCHS", "DTYPES", "SAMPLERS", "OBJECTIVES", "SCORINGS"]

ARCHS = ("sm80", "sm90", "sm100", "cdna3")
DTYPES = ("fp16", "bf16", "fp32", "fp8e4m3", "fp8e5m2")
SAMPLERS = ("tpe", "grid", "random", "cmaes", "gp")
OBJECTIVES = ("geomean_ratio", "min_time")
SCORINGS = ("geomean", "per_shape")
FORMATS = {".toml": "toml", ".yaml": "yaml", ".yml": "yaml"}

_ARCH_ALIASES = {"sm_80": "sm80", "a100": "sm80", "ampere": "sm80", "sm_90": "sm90", "sm_90a": "sm90",
                 "sm90a": "sm90", "h100": "sm90", "h200": "sm90", "hopper": "sm90", "sm_100": "sm100",
                 "sm100a": "sm100", "b200": "sm100", "blackwell": "sm100", "gfx942": "cdna3", "mi300": "cdna3",
                 "mi300x": "cdna3", "cdna": "cdna3"}
_DTYPE_ALIASES = {"f16": "fp16", "half": "fp16", "float16": "fp16", "bfloat16": "bf16", "bfloat": "bf16",
                  "f32": "fp32", "float": "fp32", "float32": "fp32", "tf32": "fp32", "e4m3": "fp8e4m3",
                  "fp8": "fp8e4m3", "float8_e4m3fn": "fp8e4m3", "float8e4m3": "fp8e4m3", "f8e4m3": "fp8e4m3",
                  "e5m2": "fp8e5m2", "float8_e5m2": "fp8e5m2", "float8e5m2": "fp8e5m2", "f8e5m2": "fp8e5m2"}
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
            "constraints", "tuning")
KERNEL_KEYS = ("name", "template", "arch", "description")
ROLE_KEYS = ("warps", "registers")
DOMAIN_KEYS = ("values", "range", "step", "log")
SPACE_SECTIONS = ("tiles", "swizzle", "stages", "params")
_HOISTED_FROM = ("kernel", "tiles", "swizzle", "stages", "params")   # where `constraints` may also sit
_RESERVED_NAMES = {"min", "max", "abs", "True", "False", "None"}
_MAX_OPTIONS = 65536
_MAX_EXTENDS = 32

TILE_ALLOWED = "powers of two (16, 32, 64, 128, 256, ...)"
SWIZZLE_ALLOWED = "0, 32, 64, 128"
STAGES_ALLOWED = "integers 1..8"
WARPS_ALLOWED = "integers 1..32"
REGS_ALLOWED = "multiples of 8 in 24..256"
PARAM_ALLOWED = "an int, float, string or bool"
_MISSING = object()


# ------------------------------------------------------------------------------------------ errors


def _display(file: Path | None) -> str:
    if file is None:
        return "<spec>"
    try:
        return str(Path(file).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(file)


def _fmt(v: Any) -> str:
    """A value as a spec writer reads it: strings quoted, true/false, lists in brackets."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_fmt(x)}" for k, x in v.items()) + "}"
    return repr(v)


def _dotted(path: tuple) -> str:
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out


def _undotted(field: str) -> tuple:
    out: list[Any] = []
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", field):
        out.append(int(part[1:-1]) if part.startswith("[") else part)
    return tuple(out)


class SpecError(ValueError):
    """A problem with a spec file. str(e) is the full user-facing message:

        FILE[:LINE]: [FIELD: ]PROBLEM[; did you mean 'SUGGESTION'? (allowed: ALLOWED) | ; allowed: ALLOWED]
    """

    def __init__(self, file: Path | None, line: int | None, field: str, problem: str, *,
                 value: Any = None, allowed: str = "", suggestion: str | None = None):
        self.file = Path(file) if file is not None else None
        self.line = line
        self.field = field
        self.problem = problem
        self.value = value
        self.allowed = allowed
        self.suggestion = suggestion
        super().__init__(self._compose())

    def _compose(self) -> str:
        head = _display(self.file) + (f":{self.line}" if self.line else "") + ": "
        if self.field:
            head += f"{self.field}: "
        body = self.problem
        if self.suggestion is not None:
            body += f"; did you mean '{self.suggestion}'?"
            if self.allowed:
                body += f" (allowed: {self.allowed})"
        elif self.allowed:
            body += f"; allowed: {self.allowed}"
        return head + body

    def __reduce__(self):
        return (_rebuild_spec_error, (self.file, self.line, self.field, self.problem, self.value, self.allowed,
                                      self.suggestion))


def _rebuild_spec_error(file, line, field, problem, value, allowed, suggestion):
    return SpecError(file, line, field, problem, value=value, allowed=allowed, suggestion=suggestion)


class _Problem(ValueError):
    """Raised inside validation; `path` is relative to where it is raised (pydantic adds the loc)."""

    def __init__(self, problem: str, *, path: tuple = (), value: Any = _MISSING, allowed: str = "",
                 suggestion: str | None = None):
        super().__init__(problem)
        self.problem = problem
        self.path = tuple(path)
        self.value = value
        self.allowed = allowed
        self.suggestion = suggestion


def _suggest(word: Any, options, aliases: dict[str, str] | None = None) -> str | None:
    if not isinstance(word, str):
        return None
    options = [o for o in options if isinstance(o, str)]
    low = word.lower()
    if aliases and low in aliases and aliases[low] in options:
        return aliases[low]
    for o in options:
        if o.lower() == low or o.lower().replace("_", "") == low.replace("_", "").replace("-", ""):
            return o
    m = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if not m:
        lowered = {o.lower(): o for o in options}
        m = [lowered[x] for x in difflib.get_close_matches(low, list(lowered), n=1, cutoff=0.6)]
    return m[0] if m else None


# ----------------------------------------------------------------------------------- raw parsing


class _TomlLines:
    """Where each key and array item of a TOML document starts (tomllib gives no positions). The
    document has already parsed, so this scanner only follows its structure."""

    def __init__(self, text: str):
        self.s = text
        self.i = 0
        self.n = len(text)
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.lines: dict[tuple, int] = {}

    def line(self) -> int:
        return bisect.bisect_right(self.starts, self.i)

    def mark(self, path: tuple) -> None:
        self.lines.setdefault(tuple(path), self.line())

    def ws(self) -> None:
        while self.i < self.n and self.s[self.i] in " \t":
            self.i += 1

    def ws_nl(self) -> None:
        while self.i < self.n:
            c = self.s[self.i]
            if c in " \t\r\n":
                self.i += 1
            elif c == "#":
                while self.i < self.n and self.s[self.i] != "\n":
                    self.i += 1
            else:
                break

    def expect(self, tok: str) -> None:
        if not self.s.startswith(tok, self.i):
            raise ValueError(f"expected {tok!r} at {self.i}")
        self.i += len(tok)

    def string(self) -> str:
        s, start = self.s, self.i
        for delim in ('"""', "'''"):
            if s.startswith(delim, self.i):
                self.i += 3
                while self.i < self.n:
                    if delim == '"""' and s[self.i] == "\\":
                        self.i += 2
                    elif s.startswith(delim, self.i):
                        self.i += 3
                        extra = 0
                        while self.i < self.n and s[self.i] == delim[0] and extra < 2:
                            self.i += 1
                            extra += 1
                        return s[start:self.i]
                    else:
                        self.i += 1
                raise ValueError("unterminated string")
        q = s[self.i]
        self.i += 1
        while self.i < self.n and s[self.i] != q:
            self.i += 2 if (q == '"' and s[self.i] == "\\") else 1
        self.i += 1
        return s[start:self.i]

    def key(self) -> list[str]:
        parts = []
        while True:
            self.ws()
            c = self.s[self.i] if self.i < self.n else ""
            if c == '"':
                parts.append(tomllib.loads("k = " + self.string())["k"])
            elif c == "'":
                parts.append(self.string()[1:-1])
            else:
                m = re.compile(r"[A-Za-z0-9_-]+").match(self.s, self.i)
                if not m:
                    raise ValueError(f"bad key at {self.i}")
                parts.append(m.group())
                self.i = m.end()
            self.ws()
            if self.i < self.n and self.s[self.i] == ".":
                self.i += 1
                continue
            return parts

    def value(self, path: tuple) -> None:
        self.mark(path)
        c = self.s[self.i] if self.i < self.n else ""
        if c in "\"'":
            self.string()
        elif c == "[":
            self.i += 1
            idx = 0
            while True:
                self.ws_nl()
                if self.s[self.i] == "]":
                    self.i += 1
                    return
                self.value(path + (idx,))
                idx += 1
                self.ws_nl()
                if self.s[self.i] == ",":
                    self.i += 1
        elif c == "{":
            self.i += 1
            while True:
                self.ws_nl()
                if self.s[self.i] == "}":
                    self.i += 1
                    return
                k = self.key()
                for j in range(1, len(k) + 1):
                    self.mark(path + tuple(k[:j]))
                self.ws()
                self.expect("=")
                self.ws()
                self.value(path + tuple(k))
                self.ws_nl()
                if self.s[self.i] == ",":
                    self.i += 1
        else:
            while self.i < self.n and self.s[self.i] not in ",]}\n#":
                self.i += 1

    def run(self) -> dict[tuple, int]:
        current: tuple = ()
        counts: dict[tuple, int] = {}
        try:
            while True:
                self.ws_nl()
                if self.i >= self.n:
                    break
                if self.s.startswith("[[", self.i):
                    self.i += 2
                    base = tuple(self.key())
                    self.expect("]]")
                    counts[base] = counts.get(base, -1) + 1
                    for j in range(1, len(base) + 1):
                        self.mark(base[:j])
                    current = base + (counts[base],)
                    self.mark(current)
                elif self.s[self.i] == "[":
                    self.i += 1
                    current = tuple(self.key())
                    self.expect("]")
                    for j in range(1, len(current) + 1):
                        self.mark(current[:j])
                else:
                    k = self.key()
                    for j in range(1, len(k) + 1):
                        self.mark(current + tuple(k[:j]))
                    self.ws()
                    self.expect("=")
                    self.ws()
                    self.value(current + tuple(k))
        except (ValueError, IndexError, tomllib.TOMLDecodeError):
            pass     # positions found so far are still right; the rest are omitted
        return self.lines


class _YamlLoader(yaml.SafeLoader):
    """SafeLoader that also reads 1e-3 / 5e5 as floats (YAML 1.1 needs a dot)."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def _yaml_dupes(node, file: Path) -> None:
    """PyYAML keeps the last of duplicate keys silently; a spec should not."""
    stack, seen_nodes = [node], set()
    while stack:
        n = stack.pop()
        if id(n) in seen_nodes:
            continue
        seen_nodes.add(id(n))
        if isinstance(n, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for k, v in n.value:
                if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                    if k.value in seen:
                        raise SpecError(file, k.start_mark.line + 1, "",
                                        f"duplicate key '{k.value}' (first at line {seen[k.value]})")
                    seen[k.value] = k.start_mark.line + 1
                stack.append(v)
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)


def _yaml_lines(loader, node, lines: dict[tuple, int], path: tuple = (), depth: int = 0) -> None:
    if depth > 64:
        return
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            try:
                key = loader.construct_object(k, deep=True)
            except Exception:
                continue
            if not isinstance(key, (str, int, float, bool)) or key is None:
                continue
            lines[path + (key,)] = k.start_mark.line + 1
            _yaml_lines(loader, v, lines, path + (key,), depth + 1)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[path + (i,)] = item.start_mark.line + 1
            _yaml_lines(loader, item, lines, path + (i,), depth + 1)


def _read(file: Path) -> tuple[dict, dict[tuple, int], str]:
    """(data, lines, format) of one file, or SpecError."""
    fmt = FORMATS.get(file.suffix.lower())
    if fmt is None:
        raise SpecError(file, None, "", f"unknown spec format '{file.suffix or file.name}'",
                        value=file.suffix, allowed=".toml, .yaml, .yml")
    if not file.exists():
        raise SpecError(file, None, "", "file not found", value=str(file))
    if file.is_dir():
        raise SpecError(file, None, "", "is a directory, not a spec file", value=str(file))
    try:
        raw = file.read_bytes()
    except OSError as e:
        raise SpecError(file, None, "", f"cannot read the file: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise SpecError(file, line, "", f"not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if fmt == "toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            msg = str(e)
            m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
            line = int(m.group(1)) if m else getattr(e, "lineno", None)
            col = m.group(2) if m else getattr(e, "colno", None)
            reason = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", msg).strip()
            if reason:
                reason = reason[0].lower() + reason[1:]
            where = f" at column {col}" if col else ""
            raise SpecError(file, line, "", f"TOML syntax error{where}: {reason}") from None
        return data, _TomlLines(text).run(), fmt
    loader = _YamlLoader(text)
    try:
        try:
            node = loader.get_single_node()
            if node is not None:
                _yaml_dupes(node, file)
            data = loader.construct_document(node) if node is not None else None
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            line = mark.line + 1 if mark else None
            col = f" at column {mark.column + 1}" if mark else ""
            what = e.problem or "invalid YAML"
            ctx = f" ({e.context})" if e.context else ""
            raise SpecError(file, line, "", f"YAML syntax error{col}: {what}{ctx}") from None
        except yaml.YAMLError as e:
            raise SpecError(file, None, "", f"YAML error: {e}") from None
        if data is None:
            raise SpecError(file, None, "", "the file is empty", allowed="a mapping with kernel, dtypes, shapes, ...")
        if not isinstance(data, dict):
            raise SpecError(file, 1, "", f"the top level is a {type(data).__name__}, not a mapping",
                            allowed="a mapping with kernel, dtypes, shapes, ...")
        lines: dict[tuple, int] = {}
        _yaml_lines(loader, node, lines)
    finally:
        loader.dispose()
    return data, lines, fmt


# ------------------------------------------------------------------------------------ the source tree

Loc = tuple[Path, int | None, tuple]       # (file, line, the path as written in that file)


class _Tree:
    """The resolved document (after extends) with, for each path, where it was written."""

    def __init__(self, data: dict, locs: dict[tuple, Loc], top: Path, formats: dict[Path, str]):
        self.data = data
        self.locs = locs
        self.top = top
        self.formats = formats

    def where(self, path: tuple) -> tuple[Path, int | None, tuple]:
        path = tuple(path)
        for j in range(len(path), 0, -1):
            loc = self.locs.get(path[:j])
            if loc is not None:
                file, line, shown = loc
                return file, line, tuple(shown) + path[j:]
        return self.top, None, path

    def fmt(self, path: tuple) -> str:
        return self.formats.get(self.where(path)[0], "toml")

    def error(self, path: tuple, problem: str, *, value: Any = None, allowed: str = "",
              suggestion: str | None = None) -> SpecError:
        file, line, shown = self.where(path)
        return SpecError(file, line, _dotted(shown), problem, value=value, allowed=allowed, suggestion=suggestion)


def _hoist(data: dict, locs: dict[tuple, Loc], file: Path) -> None:
    """Bring dtypes/shapes written inside [kernel], and constraints written inside [kernel], [tiles],
    [swizzle], [stages] or [params] (TOML puts keys after a header into that table) to the top level,
    remembering where they were written."""

    def move(src: tuple, dst: tuple) -> None:
        for p in [p for p in locs if p[: len(src)] == src]:
            locs[dst + p[len(src):]] = locs.pop(p)

    def line_of(p: tuple) -> int | None:
        return locs[p][1] if p in locs else None

    kernel = data.get("kernel")
    if isinstance(kernel, dict):
        for key in ("dtypes", "shapes"):
            if key in kernel:
                if key in data:
                    raise SpecError(file, line_of(("kernel", key)), f"kernel.{key}",
                                    f"'{key}' is given twice: at the top level (line {line_of((key,))}) and in "
                                    f"[kernel]", allowed="one of the two")
                data[key] = kernel.pop(key)
                move(("kernel", key), (key,))
    sources: list[tuple] = []
    if "constraints" in data:
        sources.append(())
    for sec in _HOISTED_FROM:
        section = data.get(sec)
        if isinstance(section, dict) and "constraints" in section:
            sources.append((sec,))
    if not sources or sources == [()]:
        return
    if len(sources) == 1:
        sec = sources[0][0]
        data["constraints"] = data[sec].pop("constraints")
        move((sec, "constraints"), ("constraints",))
        return
    merged: list[Any] = []
    new_locs: dict[tuple, Loc] = {}
    for src in sources:
        holder = data if src == () else data[src[0]]
        items = holder.pop("constraints") if src != () else data["constraints"]
        p = src + ("constraints",)
        if not isinstance(items, list):
            raise SpecError(file, line_of(p), _dotted(p), f"{_fmt(items)} is not a list of strings",
                            value=items, allowed="a list of constraint expressions")
        if ("constraints",) not in new_locs and p in locs:
            new_locs[("constraints",)] = locs[p]
        for i, c in enumerate(items):
            if p + (i,) in locs:
                new_locs[("constraints", len(merged))] = locs[p + (i,)]
            merged.append(c)
        for q in [q for q in locs if q[: len(p)] == p]:
            del locs[q]
    data["constraints"] = merged
    locs.update(new_locs)


def _merge(base: dict, base_locs: dict[tuple, Loc], child: dict, child_locs: dict[tuple, Loc]):
    """Deep merge: tables merge key by key, everything else (lists included) is replaced by the child."""
    locs = dict(base_locs)

    def rec(b: dict, c: dict, prefix: tuple) -> dict:
        out = dict(b)
        for k, v in c.items():
            p = prefix + (k,)
            if isinstance(out.get(k), dict) and isinstance(v, dict):
                out[k] = rec(out[k], v, p)
            else:
                for q in [q for q in locs if q[: len(p)] == p]:
                    del locs[q]
                out[k] = v
        return out

    data = rec(base, child, ())
    locs.update(child_locs)
    return data, locs


def _load_tree(file: Path, chain: list[Path], formats: dict[Path, str]) -> tuple[dict, dict[tuple, Loc]]:
    data, lines, fmt = _read(file)
    formats[file] = fmt
    locs: dict[tuple, Loc] = {p: (file, line, p) for p, line in lines.items()}
    base_ref = data.pop("extends", _MISSING)
    ext_line = lines.get(("extends",))
    _hoist(data, locs, file)
    locs = {p: loc for p, loc in locs.items() if p[:1] != ("extends",)}
    if base_ref is _MISSING:
        return data, locs
    if not isinstance(base_ref, str) or not base_ref.strip():
        raise SpecError(file, ext_line, "extends", f"{_fmt(base_ref)} is not a file name", value=base_ref,
                        allowed="the path of a .toml/.yaml spec, relative to this file")
    base = (file.parent / base_ref).resolve()
    if base in chain or base == file:
        names = " -> ".join(_display(p) for p in chain + [base])
        raise SpecError(file, ext_line, "extends", f"extends cycle: {names}", value=base_ref)
    if len(chain) >= _MAX_EXTENDS:
        raise SpecError(file, ext_line, "extends", f"more than {_MAX_EXTENDS} levels of extends", value=base_ref)
    if not base.exists():
        near = None
        if base.parent.is_dir():
            names = [p.name for p in base.parent.iterdir() if p.suffix.lower() in FORMATS]
            near = next(iter(difflib.get_close_matches(base.name, names, n=1, cutoff=0.8)), None)
        raise SpecError(file, ext_line, "extends", f"base file '{base_ref}' not found (looked for {_display(base)})",
                        value=base_ref, suggestion=near)
    if base.suffix.lower() not in FORMATS:
        raise SpecError(file, ext_line, "extends", f"'{base_ref}' is not a spec file", value=base_ref,
                        allowed=".toml, .yaml, .yml")
    base_data, base_locs = _load_tree(base, chain + [base], formats)
    return _merge(base_data, base_locs, data, locs)


# ------------------------------------------------------------------------------------ the sections


def _domain_text(fmt: str, kind: str, example: Any) -> str:
    if fmt == "yaml":
        return {"values": f"{{values: {_fmt(example)}}}", "log": f"{{range: {_fmt(example)}, log: true}}",
                "step8": f"{{range: {_fmt(example)}, step: 8}}"}[kind]
    return {"values": f"{{ values = {_fmt(example)} }}", "log": f"{{ range = {_fmt(example)}, log = true }}",
            "step8": f"{{ range = {_fmt(example)}, step = 8 }}"}[kind]


def _domain_allowed(fmt: str, kinds: str) -> str:
    if fmt == "yaml":
        return f"{kinds}, {{values: [...]}} or {{range: [low, high]}}"
    return f"{kinds}, {{ values = [...] }} or {{ range = [low, high] }}"


# a value check: returns None or (problem, allowed, suggestion)
def _check_tile(v):
    if not isinstance(v, int) or isinstance(v, bool):
        return f"{_fmt(v)} is not an integer", TILE_ALLOWED, None
    if not is_power_of_two(v):
        return f"{v} is not a power of two", TILE_ALLOWED, None
    return None


def _check_swizzle(v):
    if not isinstance(v, int) or isinstance(v, bool):
        return f"{_fmt(v)} is not an integer", SWIZZLE_ALLOWED, None
    if v not in (0, 32, 64, 128):
        return f"{v} is not a swizzle width in bytes", SWIZZLE_ALLOWED, None
    return None


def _check_stages(v):
    if not isinstance(v, int) or isinstance(v, bool):
        return f"{_fmt(v)} is not an integer", STAGES_ALLOWED, None
    if not 1 <= v <= 8:
        return f"{v} stages is out of range", STAGES_ALLOWED, None
    return None


def _check_warps(v):
    if not isinstance(v, int) or isinstance(v, bool):
        return f"{_fmt(v)} is not an integer", WARPS_ALLOWED, None
    if not 1 <= v <= 32:
        return f"{v} warps is out of range", WARPS_ALLOWED + " (1024 threads per block)", None
    return None


def _check_regs(v):
    if not isinstance(v, int) or isinstance(v, bool):
        return f"{_fmt(v)} is not an integer", REGS_ALLOWED, None
    if v % 8:
        return f"{v} registers is not a multiple of 8", REGS_ALLOWED, None
    if not 24 <= v <= 256:
        return f"{v} registers is outside 24..256", REGS_ALLOWED, None
    return None


def _check_param(v):
    if isinstance(v, float) and not math.isfinite(v):
        return f"{_fmt(v)} is not a finite number", PARAM_ALLOWED, None
    if v is None or not isinstance(v, (int, float, str, bool)):
        return f"{_fmt(v)} is not a parameter value", PARAM_ALLOWED, None
    return None


_CHECKS = {"tiles": _check_tile, "swizzle": _check_swizzle, "stages": _check_stages, "params": _check_param,
           "warps": _check_warps, "registers": _check_regs}


def _same_value(a, b) -> bool:
    return type(a) is type(b) and a == b


def _parse_domain(tree: _Tree, v: Any, path: tuple, kind: str) -> Domain:
    check = _CHECKS[kind]
    fmt = tree.fmt(path)

    def fail(where: tuple, res) -> SpecError:
        problem, allowed, sugg = res
        return tree.error(where, problem, allowed=allowed, suggestion=sugg)

    if isinstance(v, list):
        raise tree.error(path, f"{_fmt(v)} is a bare list", value=v, allowed=_domain_allowed(fmt, "a single value"),
                         suggestion=_domain_text(fmt, "values", v))
    if not isinstance(v, dict):
        res = check(v)
        if res:
            raise tree.error(path, res[0], value=v, allowed=res[1], suggestion=res[2])
        return Fixed(v)
    for k in v:
        if k not in DOMAIN_KEYS:
            raise tree.error(path + (k,), f"unknown key {_fmt(k)}", value=k, allowed=", ".join(DOMAIN_KEYS),
                             suggestion=_suggest(k, DOMAIN_KEYS, _KEY_ALIASES))
    if "values" in v and "range" in v:
        raise tree.error(path, "give either 'values' or 'range', not both", value=v,
                         allowed=_domain_allowed(fmt, "a single value"))
    if "values" not in v and "range" not in v:
        raise tree.error(path, "a domain needs 'values' or 'range'", value=v,
                         allowed=_domain_allowed(fmt, "a single value"))
    if "values" in v:
        for k in ("step", "log"):
            if k in v:
                raise tree.error(path + (k,), f"'{k}' applies to a range, not to a list of values", value=v[k],
                                 allowed="values = [...] alone")
        values = v["values"]
        if not isinstance(values, list):
            raise tree.error(path + ("values",), f"{_fmt(values)} is not a list", value=values,
                             allowed="a non-empty list of values", suggestion=_fmt([values]))
        if not values:
            raise tree.error(path + ("values",), "empty list of values", value=values,
                             allowed="at least one value")
        for i, x in enumerate(values):
            if isinstance(x, (list, dict)) and kind != "params":
                raise tree.error(path + ("values", i), f"{_fmt(x)} is not a single value", value=x,
                                 allowed=check(None)[1])
            res = check(x)
            if res:
                raise tree.error(path + ("values", i), res[0], value=x, allowed=res[1], suggestion=res[2])
            for j in range(i):
                if _same_value(values[j], x):
                    raise tree.error(path + ("values", i), f"{_fmt(x)} is repeated (also values[{j}])", value=x,
                                     allowed="distinct values")
        return Choice(tuple(values))
    rng = v["range"]
    rpath = path + ("range",)
    if not isinstance(rng, list) or len(rng) != 2:
        raise tree.error(rpath, f"{_fmt(rng)} is not [low, high]", value=rng,
                         allowed="a list of two integers [low, high] (inclusive)")
    for i, b in enumerate(rng):
        if not isinstance(b, int) or isinstance(b, bool):
            allowed = "integer bounds" + (" (use values = [...] for floats, strings or bools)"
                                          if kind == "params" else "")
            raise tree.error(rpath + (i,), f"{_fmt(b)} is not an integer", value=b, allowed=allowed)
    low, high = rng
    if low > high:
        raise tree.error(rpath, f"low {low} > high {high}", value=rng, allowed="low <= high",
                         suggestion=_fmt([high, low]))
    step = v.get("step", 1)
    log = v.get("log", False)
    if not isinstance(log, bool):
        raise tree.error(path + ("log",), f"{_fmt(log)} is not true or false", value=log, allowed="true, false")
    if not isinstance(step, int) or isinstance(step, bool):
        raise tree.error(path + ("step",), f"{_fmt(step)} is not an integer", value=step, allowed="integers >= 1")
    if step <= 0:
        raise tree.error(path + ("step",), f"step {step} is not positive", value=step, allowed="integers >= 1")
    if log and "step" in v:
        raise tree.error(path + ("step",), "a log range steps by powers of two; 'step' does not apply", value=step,
                         allowed="either log = true or step = N")
    if log:
        for i, b in enumerate(rng):
            if not is_power_of_two(b):
                raise tree.error(rpath + (i,), f"{_fmt(b)} is not a power of two (a log range doubles from low "
                                 f"to high)", value=b, allowed="powers of two as bounds of a log range")
        count = high.bit_length() - low.bit_length() + 1
    else:
        count = (high - low) // step + 1
    if count > _MAX_OPTIONS:
        raise tree.error(rpath, f"{_fmt(rng)} has {count} values", value=rng,
                         allowed=f"at most {_MAX_OPTIONS} values per parameter")
    dom = IntRange(low, high, step=step, log=log)
    for x in dom.options():
        res = check(x)
        if res:
            what = f"{_fmt(rng)}" + (f" with step {step}" if step != 1 else "") + (" (log)" if log else "")
            sugg = None
            if kind == "tiles" and is_power_of_two(low) and is_power_of_two(high):
                sugg = _domain_text(fmt, "log", rng)
            elif kind == "registers" and low % 8 == 0 and high % 8 == 0:
                sugg = _domain_text(fmt, "step8", rng)
            predicate = res[0].split(" is ", 1)[1] if " is " in res[0] else res[0]
            raise tree.error(rpath, f"range {what} yields {x}, which is {predicate}", value=x, allowed=res[1],
                             suggestion=sugg)
    return dom


def _check_name(tree: _Tree, name: Any, path: tuple) -> None:
    if isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name) and name not in _RESERVED_NAMES:
        return
    sugg = None
    if isinstance(name, str):
        s = re.sub(r"\W", "_", name)
        s = "_" + s if s[:1].isdigit() else s
        if s.isidentifier() and not keyword.iskeyword(s) and s not in _RESERVED_NAMES and s != name:
            sugg = s
    raise tree.error(path, f"{_fmt(name)} is not a valid parameter name", value=name,
                     allowed="letters, digits and _, not starting with a digit, not a Python keyword or "
                             "min/max/abs", suggestion=sugg)


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


def _table(tree: _Tree, v: Any, path: tuple, what: str) -> dict:
    if isinstance(v, dict):
        for k in v:
            if not isinstance(k, str):
                raise tree.error(path, f"key {_fmt(k)} is not a string", value=k, allowed="string keys")
        return v
    kind = "a mapping" if tree.fmt(path) == "yaml" else "a table"
    raise tree.error(path, f"{_fmt(v)} is not {kind}", value=v, allowed=f"{kind} of {what}")


def _build_space(tree: _Tree) -> tuple[dict[str, Domain], dict[str, tuple]]:
    data = tree.data
    params: dict[str, Domain] = {}
    origin: dict[str, tuple] = {}

    def add(name: str, dom: Domain, path: tuple) -> None:
        if name in params:
            file, line, shown = tree.where(origin[name])
            at = _dotted(shown) + (f" (line {line})" if line else "")
            raise tree.error(path, f"parameter '{name}' is defined twice; it is already {at}", value=name,
                             allowed="distinct parameter names across tiles, swizzle, stages, warp_roles, params")
        params[name] = dom
        origin[name] = path

    for sec in ("tiles", "swizzle", "stages"):
        if sec in data:
            for name, v in _table(tree, data[sec], (sec,), "parameters").items():
                _check_name(tree, name, (sec, name))
                add(name, _parse_domain(tree, v, (sec, name), sec), (sec, name))
    if "warp_roles" in data:
        for role, body in _table(tree, data["warp_roles"], ("warp_roles",), "roles").items():
            rpath = ("warp_roles", role)
            _check_name(tree, role, rpath)
            body = _table(tree, body, rpath, "warps and registers")
            for k in body:
                if k not in ROLE_KEYS:
                    raise _unknown_key(tree, rpath, k, ROLE_KEYS, "a warp role")
            if "warps" not in body:
                raise tree.error(rpath + ("warps",), f"missing required key 'warps' in role '{role}'",
                                 allowed="warps = N (and optionally registers = R)")
            add(f"{role.upper()}_WARPS", _parse_domain(tree, body["warps"], rpath + ("warps",), "warps"),
                rpath + ("warps",))
            if "registers" in body:
                add(f"{role.upper()}_REGS", _parse_domain(tree, body["registers"], rpath + ("registers",),
                                                          "registers"), rpath + ("registers",))
    if "params" in data:
        for name, v in _table(tree, data["params"], ("params",), "parameters").items():
            _check_name(tree, name, ("params", name))
            add(name, _parse_domain(tree, v, ("params", name), "params"), ("params", name))
    return params, origin


# ----------------------------------------------------------------------------------------- models


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _need_str(v: Any, allowed: str) -> str:
    if not isinstance(v, str):
        raise _Problem(f"{_fmt(v)} is not a string", value=v, allowed=allowed)
    return v


_TEMPLATE_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_TEMPLATE_FILE = re.compile(r"^[^:]*\.py:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$|^[A-Za-z]:[^:]*\.py:[A-Za-z_]\w*$")
TEMPLATE_ALLOWED = "'package.module:ATTR' or 'path/to/file.py:ATTR'"


class KernelSection(_Model):
    """[kernel]: what is tuned."""
    name: str
    template: str
    arch: Literal["sm80", "sm90", "sm100", "cdna3"]
    description: str = ""

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


class Spec(BaseModel):
    """A loaded, validated kernel spec (see the module docstring)."""
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    name: str = ""
    source: Path = Path("<spec>")
    content_hash: str = ""
    kernel: KernelSection
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    space: SearchSpace = Field(default_factory=SearchSpace)
    constraints: list[str] = Field(default_factory=list)
    tuning: TuningSettings = Field(default_factory=TuningSettings)

    _where: dict[tuple, Loc] = PrivateAttr(default_factory=dict)
    _formats: dict[Path, str] = PrivateAttr(default_factory=dict)
    _origin: dict[str, tuple] = PrivateAttr(default_factory=dict)

    @field_validator("dtypes", mode="before")
    @classmethod
    def _dtypes(cls, v):
        if not isinstance(v, (list, tuple)):
            raise _Problem(f"{_fmt(v)} is not a list", value=v, allowed=f"a non-empty list of {DTYPES_ALLOWED}",
                           suggestion=_fmt([v]) if isinstance(v, str) and v in DTYPES else None)
        if not v:
            raise _Problem("empty list of dtypes", value=v, allowed=f"at least one of {DTYPES_ALLOWED}")
        for i, d in enumerate(v):
            if not isinstance(d, str):
                raise _Problem(f"{_fmt(d)} is not a dtype name", path=(i,), value=d, allowed=DTYPES_ALLOWED)
            if d not in DTYPES:
                raise _Problem(f"unknown dtype {_fmt(d)}", path=(i,), value=d, allowed=DTYPES_ALLOWED,
                               suggestion=_suggest(d, DTYPES, _DTYPE_ALIASES))
            if d in v[:i]:
                raise _Problem(f"{_fmt(d)} is repeated", path=(i,), value=d, allowed="distinct dtypes")
        return list(v)

    @field_validator("shapes", mode="before")
    @classmethod
    def _shapes(cls, v):
        allowed = "a non-empty list of shapes, each a list of integers >= 1, all of the same length"
        if not isinstance(v, (list, tuple)):
            raise _Problem(f"{_fmt(v)} is not a list of shapes", value=v, allowed=allowed)
        if not v:
            raise _Problem("empty list of shapes", value=v, allowed=allowed)
        out = []
        for i, s in enumerate(v):
            if isinstance(s, int) and not isinstance(s, bool):
                raise _Problem(f"{s} is not a shape", path=(i,), value=s, allowed="a list of dims, e.g. [4096, 4096]",
                               suggestion=_fmt([s]))
            if not isinstance(s, (list, tuple)) or not s:
                raise _Problem(f"{_fmt(s)} is not a shape", path=(i,), value=s,
                               allowed="a non-empty list of dims, e.g. [4096, 4096]")
            for j, d in enumerate(s):
                if not isinstance(d, int) or isinstance(d, bool):
                    raise _Problem(f"{_fmt(d)} is not an integer", path=(i, j), value=d, allowed="integers >= 1")
                if d < 1:
                    raise _Problem(f"{d} is not a positive dimension", path=(i, j), value=d,
                                   allowed="integers >= 1")
            if len(s) != len(v[0]):
                raise _Problem(f"{_fmt(s)} has {len(s)} dims but shapes[0] has {len(v[0])}", path=(i,), value=s,
                               allowed=f"every shape with {len(v[0])} dims")
            t = tuple(s)
            if t in out:
                raise _Problem(f"{_fmt(s)} is repeated (also shapes[{out.index(t)}])", path=(i,), value=s,
                               allowed="distinct shapes")
            out.append(t)
        return out

    @field_validator("constraints", mode="before")
    @classmethod
    def _constraints(cls, v):
        if isinstance(v, str):
            raise _Problem(f"{_fmt(v)} is a string, not a list", value=v, allowed="a list of expressions",
                           suggestion=json.dumps([v]))
        if not isinstance(v, (list, tuple)):
            raise _Problem(f"{_fmt(v)} is not a list", value=v, allowed="a list of expressions")
        for i, c in enumerate(v):
            if not isinstance(c, str):
                raise _Problem(f"{_fmt(c)} is not a string", path=(i,), value=c,
                               allowed="an expression in a string, e.g. \"BLOCK_M * BLOCK_N <= 32768\"")
            if not c.strip():
                raise _Problem("empty constraint", path=(i,), value=c, allowed="an expression")
        return list(v)

    @field_validator("space", mode="before")
    @classmethod
    def _space_type(cls, v):
        if isinstance(v, dict):
            return SearchSpace(dict(v.get("params", {})), list(v.get("constraints", [])))
        return v

    @model_validator(mode="after")
    def _finish(self):
        if not self.name:
            self.name = self.kernel.name
        elif self.name != self.kernel.name:
            raise _Problem(f"name {_fmt(self.name)} differs from kernel.name {_fmt(self.kernel.name)}",
                           path=("name",), value=self.name, allowed="the kernel name")
        if not self.space.constraints:
            self.space.constraints = list(self.constraints)
        elif not self.constraints:
            self.constraints = list(self.space.constraints)
        elif list(self.space.constraints) != list(self.constraints):
            raise _Problem("constraints differ from space.constraints", path=("constraints",),
                           value=self.constraints, allowed="the same list (or give only one)")
        _check_constraints(self.space)
        self.content_hash = hashlib.sha256(self.canonical_json().encode()).hexdigest()
        return self

    @field_serializer("space")
    def _ser_space(self, s: SearchSpace):
        return s.describe()

    @field_serializer("source")
    def _ser_source(self, p: Path):
        return str(p)

    # -- helpers

    def canonical(self) -> dict:
        """The resolved spec as plain data (what content_hash hashes)."""
        return {"kernel": self.kernel.model_dump(), "dtypes": list(self.dtypes),
                "shapes": [list(s) for s in self.shapes], "space": self.space.describe(),
                "tuning": self.tuning.model_dump()}

    def canonical_json(self) -> str:
        return json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def locate(self, field: Any) -> tuple[Path, int | None, str]:
        """(file, line or None, dotted field as written) of a spec field ("tiles.BLOCK_N" or a tuple)."""
        path = _undotted(field) if isinstance(field, str) else tuple(field)
        tree = _Tree({}, self._where, self.source, self._formats)
        file, line, shown = tree.where(path)
        return file, line, _dotted(shown)

    def error(self, field: Any, problem: str, *, value: Any = None, allowed: str = "",
              suggestion: str | None = None) -> SpecError:
        """A SpecError pointing at `field` of this spec (for consumers: the tuner, the CLI)."""
        file, line, shown = self.locate(field)
        return SpecError(file, line, shown, problem, value=value, allowed=allowed, suggestion=suggestion)

    def param_origin(self, name: str) -> tuple[Path, int | None, str]:
        """(file, line, field) where a flattened parameter (e.g. CONSUMER_WARPS) is declared."""
        return self.locate(self._origin.get(name, ("params", name)))


def _check_constraints(space: SearchSpace) -> None:
    """Syntax, names, string literals; then that some config satisfies them all."""
    names = list(space.params)
    for i, c in enumerate(space.constraints):
        try:
            parse_expression(c)
        except ExprError as e:
            if e.kind == "syntax":
                raise _Problem(f"{_fmt(c)} does not parse: " + str(e).split(" does not parse: ", 1)[-1],
                               path=("constraints", i), value=c,
                               allowed="a Python-style expression: " + ALLOWED_SYNTAX) from None
            raise _Problem(str(e).split("; allowed: ")[0], path=("constraints", i), value=c,
                           allowed=ALLOWED_SYNTAX) from None
        for n in expression_names(c):
            if n not in space.params:
                raise _Problem(f"unknown parameter '{n}' in {_fmt(c)}", path=("constraints", i), value=n,
                               allowed=", ".join(names) if names else "no parameters are declared",
                               suggestion=_suggest(n, names))
        for n, lit in string_comparisons(c):
            opts = space.params[n].options()
            strs = [o for o in opts if isinstance(o, str)]
            if not strs:
                raise _Problem(f"{n} is compared with the string {_fmt(lit)} in {_fmt(c)}, but its values are "
                               f"{', '.join(_fmt(o) for o in opts[:8])}", path=("constraints", i), value=lit,
                               allowed=f"values of {n}: " + ", ".join(_fmt(o) for o in opts[:8]))
            if lit not in strs:
                raise _Problem(f"{_fmt(lit)} is not a value of {n} in {_fmt(c)}", path=("constraints", i),
                               value=lit, allowed=f"values of {n}: " + ", ".join(_fmt(o) for o in opts),
                               suggestion=_suggest(lit, strs))
    if not space.constraints:
        return
    # type errors show on the first point of the product (e.g. a string parameter in arithmetic)
    first_point = {n: d.options()[0] for n, d in space.params.items()}
    for i, c in enumerate(space.constraints):
        try:
            _space.evaluate(c, first_point)
        except ExprError as e:
            shown = ", ".join(f"{n}={_fmt(first_point[n])}" for n in expression_names(c))
            raise _Problem(f"{_fmt(c)} cannot be evaluated at {shown}: " + str(e).split(" in '")[0],
                           path=("constraints", i), value=c, allowed=ALLOWED_SYNTAX) from None
    found, finished = space.first()
    if found is not None or not finished:
        return
    raw = space.raw_size()
    listed = ", ".join(_fmt(c) for c in space.constraints)
    detail = ""
    if len(space.constraints) > 1 and raw <= 100_000:
        alone = [c for c in space.constraints if SearchSpace(space.params, [c]).first()[0] is None]
        if alone:
            detail = f"; {_fmt(alone[0])} alone rejects every config"
        else:
            detail = "; each constraint alone is satisfiable, together they are not"
    raise _Problem(f"no config satisfies the constraints: {listed} ({raw} configs before constraints){detail}",
                   path=("constraints",), value=list(space.constraints))


# --------------------------------------------------------------------------------- loading


_PYDANTIC_TEXT = {
    "missing": "missing required key",
    "extra_forbidden": "unknown key",
    "string_type": "is not a string",
    "int_type": "is not an integer",
    "float_type": "is not a number",
    "bool_type": "is not true or false",
    "list_type": "is not a list",
    "tuple_type": "is not a list",
    "dict_type": "is not a table",
    "model_type": "is not a table",
}


def _convert(exc: ValidationError, tree: _Tree) -> SpecError:
    errors = exc.errors()
    err = errors[0]
    loc = tuple(err.get("loc", ()))
    inner = (err.get("ctx") or {}).get("error")
    if isinstance(inner, _Problem):
        value = inner.value if inner.value is not _MISSING else err.get("input")
        return tree.error(loc + inner.path, inner.problem, value=value, allowed=inner.allowed,
                          suggestion=inner.suggestion)
    kind = err.get("type", "")
    value = err.get("input")
    if kind == "missing":
        section = _dotted(loc[:-1]) or "the top level"
        return tree.error(loc, f"missing required key '{loc[-1]}' in {section}", allowed="", value=None)
    if kind == "extra_forbidden":
        return tree.error(loc, f"unknown key {_fmt(loc[-1])}", value=loc[-1])
    if kind in _PYDANTIC_TEXT:
        return tree.error(loc, f"{_fmt(value)} {_PYDANTIC_TEXT[kind]}", value=value)
    if kind == "literal_error":
        expected = (err.get("ctx") or {}).get("expected", "")
        return tree.error(loc, f"{_fmt(value)} is not allowed", value=value, allowed=str(expected))
    return tree.error(loc, f"{_fmt(value)}: {err.get('msg', 'invalid')}", value=value)


def _check_keys(tree: _Tree) -> None:
    data = tree.data
    for k in data:
        if not isinstance(k, str):
            raise tree.error((), f"key {_fmt(k)} is not a string", value=k, allowed=", ".join(TOP_KEYS[1:]))
        if k not in TOP_KEYS:
            raise _unknown_key(tree, (), k, TOP_KEYS[1:], "the top level")
    if "kernel" not in data:
        raise tree.error((), "missing required section 'kernel'",
                         allowed="a [kernel] table with name, template, arch (and description)")
    kernel = _table(tree, data["kernel"], ("kernel",), "name, template, arch, description")
    for k in kernel:
        if k not in KERNEL_KEYS:
            raise _unknown_key(tree, ("kernel",), k, KERNEL_KEYS, "[kernel]")
    for k in KERNEL_KEYS[:3]:
        if k not in kernel:
            allowed = {"name": "a kernel name", "template": TEMPLATE_ALLOWED, "arch": ", ".join(ARCHS)}[k]
            raise tree.error(("kernel", k), f"missing required key '{k}' in [kernel]", allowed=allowed)
    for k in ("dtypes", "shapes"):
        if k not in data:
            allowed = f"a non-empty list of {DTYPES_ALLOWED}" if k == "dtypes" else \
                "a non-empty list of shapes, e.g. [[4096, 4096, 4096]]"
            raise tree.error((k,), f"missing required key '{k}' (at the top level or in [kernel])",
                             allowed=allowed)
    if "tuning" in data:
        tuning = _table(tree, data["tuning"], ("tuning",), "tuning settings")
        fields = tuple(TuningSettings.model_fields)
        for k in tuning:
            if k not in fields:
                raise _unknown_key(tree, ("tuning",), k, fields, "[tuning]")


def load_spec(path: str | Path) -> Spec:
    """Load, resolve (extends) and validate a TOML (.toml) or YAML (.yaml/.yml) spec; SpecError on any problem."""
    file = Path(path)
    try:
        file = file.resolve()
    except OSError:
        pass
    formats: dict[Path, str] = {}
    data, locs = _load_tree(file, [file], formats)
    tree = _Tree(data, locs, file, formats)
    _check_keys(tree)
    params, origin = _build_space(tree)
    payload = {"source": file, "kernel": data["kernel"], "dtypes": data["dtypes"], "shapes": data["shapes"],
               "space": SearchSpace(params, []), "constraints": data.get("constraints", [])}
    if "tuning" in data:
        payload["tuning"] = data["tuning"]
    try:
        spec = Spec.model_validate(payload)
    except ValidationError as e:
        raise _convert(e, tree) from None
    spec._where = dict(locs)
    spec._formats = dict(formats)
    spec._origin = dict(origin)
    return spec


# ------------------------------------------------------------------------------------- templates


def _template_error(spec: Spec, problem: str, value: Any, allowed: str = "",
                    suggestion: str | None = None) -> SpecError:
    return spec.error(("kernel", "template"), problem, value=value, allowed=allowed, suggestion=suggestion)


def _where_raised(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    if not tb:
        return ""
    f = tb[-1]
    return f" (at {_display(Path(f.filename))}:{f.lineno})"


def resolve_template(spec: Spec) -> Any:
    """Import the object `kernel.template` names ("pkg.module:attr" or "path/file.py:attr"; a file path is
    looked up from the current directory, then from the spec's directory and its parents)."""
    ref = spec.kernel.template
    target, _, attr = ref.rpartition(":")
    if target.endswith(".py"):
        rel = Path(target)
        spec_dir = Path(spec.source).parent
        candidates = [rel] if rel.is_absolute() else [Path.cwd() / rel, spec_dir / rel] + \
            [p / rel for p in spec_dir.parents]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            raise _template_error(spec, f"file '{target}' not found (looked in the current directory, "
                                        f"{_display(spec_dir)} and its parents)", ref, TEMPLATE_ALLOWED)
        from .template import import_file   # one module per file, whoever loads it
        try:
            module = import_file(found)
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            raise _template_error(spec, f"importing '{target}' failed: {type(e).__name__}: {e}"
                                        f"{_where_raised(e)}", ref) from None
        where = f"'{target}'"
    else:
        try:
            module = importlib.import_module(target)
        except BaseException as e:
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            raise _template_error(spec, f"cannot import module '{target}': {type(e).__name__}: {e}"
                                        f"{_where_raised(e) if not isinstance(e, ModuleNotFoundError) else ''}",
                                  ref) from None
        where = f"module '{target}'"
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            raise _template_error(spec, f"{where} has no attribute '{part}'", ref,
                                  suggestion=(f"{target}:{s}" if (s := _suggest(part, names)) else None))
        obj = getattr(obj, part)
    return obj
