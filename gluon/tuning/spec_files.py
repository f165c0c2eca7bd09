"""Reading spec files: TOML and YAML with the line of every key and item (`_TomlLines`, `_yaml_lines`),
duplicate YAML keys, `extends` chains deep-merged base first (`_load_tree`, `_merge`), dtypes/shapes
and constraints hoisted to the top level (`_hoist`), and the resolved tree (`_Tree`) that says where each
path was written, for SpecError messages.
"""
from __future__ import annotations

import bisect
import difflib
import re
from pathlib import Path
from typing import Any

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

import yaml

from .spec_errors import _MISSING, SpecError, _display, _dotted, _fmt

FORMATS = {".toml": "toml", ".yaml": "yaml", ".yml": "yaml"}
_HOISTED_FROM = ("kernel", "tiles", "swizzle", "stages", "params")   # where `constraints` may also sit
_MAX_EXTENDS = 32


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


_MAX_DEPTH = 32     # tables and lists within each other: a spec needs 4 or 5


def _too_deep(data) -> tuple | None:
    """The path of the first value nested deeper than _MAX_DEPTH (walked without recursion), or None."""
    stack = [((), data)]
    while stack:
        path, v = stack.pop()
        if len(path) > _MAX_DEPTH:
            return path
        if isinstance(v, dict):
            stack.extend((path + (k,), x) for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((path + (i,), x) for i, x in enumerate(v))
    return None


def _read(file: Path) -> tuple[dict, dict[tuple, int], str]:
    """(data, lines, format) of one file, or SpecError (a file nested too deep for the parsers included)."""
    try:
        data, lines, fmt = _parse(file)
    except RecursionError:
        raise SpecError(file, None, "", f"nested too deep to parse (tables or lists within each other); a spec "
                        f"nests at most {_MAX_DEPTH} levels") from None
    deep = _too_deep(data)
    if deep is not None:
        where = ".".join(map(str, deep[:6])) + (" ..." if len(deep) > 6 else "")
        raise SpecError(file, lines.get(deep[:1]), "", f"nested more than {_MAX_DEPTH} levels deep ({where})",
                        allowed=f"at most {_MAX_DEPTH} levels of tables and lists")
    return data, lines, fmt


def _parse(file: Path) -> tuple[dict, dict[tuple, int], str]:
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


def _table(tree: _Tree, v: Any, path: tuple, what: str) -> dict:
    if isinstance(v, dict):
        for k in v:
            if not isinstance(k, str):
                raise tree.error(path, f"key {_fmt(k)} is not a string", value=k, allowed="string keys")
        return v
    kind = "a mapping" if tree.fmt(path) == "yaml" else "a table"
    raise tree.error(path, f"{_fmt(v)} is not {kind}", value=v, allowed=f"{kind} of {what}")
