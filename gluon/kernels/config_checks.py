"""What every shipped kernel's frozen config checks of its own fields, in one wording: positive ints,
flags (True/False, or 1/0 from `--set KEY=1`), unknown field names (with the nearest one), and a
`config` argument as the entry points take it (None, a whole config, or a dict of overrides); the configs'
hash, computed once (`cached_hash`); what a repeated call's fast path keys a `config` argument by
(`fast_config_key`); and a config past the shared memory, refused in its own fields (`in_config_terms`)."""
from __future__ import annotations

from contextlib import contextmanager
import dataclasses
import difflib
import numbers
from typing import Callable, Iterator, Mapping, TypeVar

from gluon.ir import GluonError
from gluon.passes.common import kib
from gluon.types import SharedMemoryError

C = TypeVar("C")


def positive_int(owner: str, name: str, v) -> int:
    """`v` as an int, or a GluonError naming `owner`'s field `name`."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v <= 0:
        raise GluonError(f"{owner} {name}={v!r}: takes a positive int")
    return int(v)


def flag(owner: str, name: str, v, takes: str = "True or False") -> bool:
    """`v` as a bool (1 and 0 count, as `--set SPLIT_WGS=1` gives them), or a GluonError saying what it takes."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    raise GluonError(f"{owner} {name}={v!r}: takes {takes}")


def known_fields(owner: str, names, fields: tuple[str, ...]) -> None:
    """A GluonError for the first of `names` that is not one of `fields`, with the nearest field."""
    for name in names:
        if name not in fields:
            near = difflib.get_close_matches(str(name), fields, n=1)
            raise GluonError(f"{owner} has no field {name!r}" + (f" (did you mean {near[0]}?)" if near else "")
                             + f"; the fields are {', '.join(fields)}")


def overridden(config: "C | Mapping | None", base: C) -> C:
    """What the public entry points take as `config`: a whole config of base's type (itself), a dict of
    overrides of `base` (users, `--set KEY=VALUE`; checked like a new config), or None (`base`)."""
    cls = type(base)
    if config is None:
        return base
    if isinstance(config, cls):
        return config
    if isinstance(config, Mapping):
        known_fields(cls.__name__, config, tuple(f.name for f in dataclasses.fields(cls)))
        return dataclasses.replace(base, **config) if config else base
    raise GluonError(f"a config is a {cls.__name__} or a dict of its fields, not {type(config).__name__}")


def cached_hash(self) -> int:
    """A frozen config's hash, computed once (`__hash__ = cached_hash` in the class body: a repeated launch keys
    its kept plan by the config, and hashing every field per call was a tenth of a loaded call's Python)."""
    h = self.__dict__.get("_hash")
    if h is None:
        h = hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)))
        object.__setattr__(self, "_hash", h)
    return h


NOT_KEYED = object()        # `fast_config_key`'s answer for a config a fast path cannot key: the full path every call


def fast_config_key(config, cls: type):
    """What a host function's cache of repeated calls keys its `config` argument by: None or a whole `cls` as
    itself, a dict of overrides by its items and their types (by content: a dict changed between calls keys a
    launch of its own; the types keep 128.0 or 1 apart from 128 or True, which the full path checks), else
    NOT_KEYED (another type, an unhashable value: the full path takes and checks it every call)."""
    if config is None or type(config) is cls:
        return config
    if type(config) is not dict:
        return NOT_KEYED
    key = (tuple(config.items()), tuple(map(type, config.values())))
    try:
        hash(key)
    except TypeError:
        return NOT_KEYED
    return key


def plan_config_key(config, base):
    """A plan cache's key of a `config` argument as the entry points take it (None, a whole config of base's
    type, a mapping of overrides): `fast_config_key`'s, so 2.0 or 1 is not 2 or True and each such call meets the
    checks; a mapping it cannot key (an unhashable value, another Mapping type) by the config it makes, checked
    here (a GluonError naming the field)."""
    key = fast_config_key(config, type(base))
    if key is NOT_KEYED:
        key = fast_config_key(dict(config), type(base)) if isinstance(config, Mapping) else NOT_KEYED
    return overridden(config, base) if key is NOT_KEYED else key


def state_without_hash(self) -> dict:
    """`__getstate__ = state_without_hash` beside `cached_hash`: pickled without it (str hashes differ between
    processes)."""
    return {k: v for k, v in self.__dict__.items() if k != "_hash"}


@contextmanager
def in_config_terms(describe: Callable[[SharedMemoryError], str]) -> Iterator[None]:
    """A SharedMemoryError from compiling a shipped kernel as one GluonError line that `describe` writes in the
    config's fields; the allocator's list of regions is for kernel writers. (The launch paths catch it with a plain
    try: this costs a generator a call.)"""
    try:
        yield
    except SharedMemoryError as e:
        raise GluonError(describe(e)) from None


def past_the_shared_memory(owner: str, fields: str, e: SharedMemoryError) -> str:
    """The head of that line: `owner`'s config `fields` and the bytes it needs against the block's."""
    return (f"{owner}: config {fields} needs {kib(e.needed)} of shared memory, more than the {kib(e.limit)} a block "
            "may use")


def stage_bytes(e: SharedMemoryError, stages: int, rings: tuple[str, ...]) -> int:
    """The bytes a stage of the rings (regions named with a prefix in `rings`) `stages` deep take in `e`."""
    return sum(size for name, size in e.regions if name.startswith(rings)) // stages


def stages_that_fit(e: SharedMemoryError, stages: int, rings: tuple[str, ...], freed: int = 0) -> int:
    """How many stages of those rings would fit, with `freed` more bytes gone (0 if none of them is among the
    regions); reckoned from the bytes a stage, so alignment may cost one more."""
    stage = stage_bytes(e, stages, rings)
    return stages - -(-(e.needed - freed - e.limit) // stage) if stage else 0
