"""SpecError and what its messages are made of: the value as a spec writer reads it (`_fmt`), dotted
field paths, the file as shown (relative to the working directory), and "did you mean" suggestions.

`_Problem` is raised inside the pydantic validators (gluon.tuning.spec) with a path relative to the
field; load_spec turns it into a SpecError that names the file and line. Needs only the standard
library (the tuner imports SpecError from here without loading pydantic or PyYAML).
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

_MISSING = object()


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
