"""The typed kernel ABI: what a compiled kernel takes, stated once, by the layer that knows.

The lowering turns the IR into TTGIR text and, beside it, a `KernelABI`: for every parameter its kind
(pointer, scalar, TMA descriptor, constexpr), `DType`, divisibility, descriptor tile, swizzle and TMA
box, and where the launch takes its value from (the caller's argument i, dimension d of argument i, or
a keyword); plus the PTX passes the kernel asks for and its cluster size. The compile step stores the
ABI with the binary (and in the disk cache); the runtime's `Launcher` plans every argument from it.
Nobody parses a TTGIR signature, and no parameter's origin is recovered from its name.

Each TMA descriptor parameter expands, in the binary's parameter list, into the CUtensorMap followed by
the tensor's shape (`rank` i32) and strides (`rank` i64): `KernelParam.launch_types`.

This module imports only the vocabularies (dtypes, types, arch), so every layer may read it.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Sequence

from .arch import TMA_SWIZZLE_MODE, tma_box_problem
from .dtypes import DType
from .types import ParamSource, SourceKind


class ABIError(ValueError):
    """A parameter description that no kernel can have (a bug in whoever built it)."""


class ParamKind(enum.Enum):
    POINTER = "pointer"          # a global tensor passed by address
    SCALAR = "scalar"            # a Python number
    TENSORDESC = "tensordesc"    # a TMA descriptor the launcher builds from a tensor
    CONSTEXPR = "constexpr"      # a compile-time value: specialized into the binary, not passed


@dataclass(frozen=True)
class KernelParam:
    """One kernel parameter as every layer after the lowering sees it.

    `divisibility` 16: the binary assumes a 16-byte aligned pointer or an integer multiple of 16
    (`tt.divisibility`), and the launcher refuses values that break it. `rank`: the tensor rank a pointer
    parameter's kernel assumes (None: any). `needs_contiguous`: the kernel indexes the tensor as dense
    row-major. Descriptors: the `block_shape` tile moved, its `swizzle_bytes`, the TMA `box` it moves in
    (arch.tma_box_shape), and `multicast` when its loads go to every CTA of a cluster. `loc` is
    "file.py:LINE" for messages; `value` a constexpr's value."""

    name: str
    kind: ParamKind
    dtype: DType | None = None
    source: ParamSource | None = None
    divisibility: int = 1
    rank: int | None = None
    needs_contiguous: bool = False
    block_shape: tuple[int, ...] | None = None
    swizzle_bytes: int = 0
    box: tuple[int, ...] | None = None
    multicast: bool = False
    loc: str | None = None
    value: Any = None

    def __post_init__(self):
        if not isinstance(self.kind, ParamKind):
            raise ABIError(f"parameter {self.name!r}: kind must be a ParamKind, got {self.kind!r}")
        if self.kind is ParamKind.CONSTEXPR:
            return
        if not isinstance(self.dtype, DType):
            raise ABIError(f"parameter {self.name!r}: dtype must be a DType, got {self.dtype!r}")
        if self.kind is ParamKind.SCALAR and self.dtype.launcher_scalar is None:
            raise ABIError(f"parameter {self.name!r}: a scalar of dtype {self.dtype.name} cannot be passed to a "
                           "kernel (Triton's launcher has no such scalar type)")
        if self.kind is ParamKind.TENSORDESC:
            if self.block_shape is None or not 1 <= len(self.block_shape) <= 5:
                raise ABIError(f"parameter {self.name!r}: a TMA descriptor needs a block_shape of rank 1..5, "
                               f"got {self.block_shape!r}")
            object.__setattr__(self, "block_shape", tuple(int(b) for b in self.block_shape))
            if self.swizzle_bytes not in TMA_SWIZZLE_MODE:
                raise ABIError(f"parameter {self.name!r}: swizzle_bytes must be 0, 32, 64 or 128, "
                               f"got {self.swizzle_bytes!r}")
            if self.box is None or len(self.box) != len(self.block_shape):
                raise ABIError(f"parameter {self.name!r}: box {self.box!r} does not match block_shape "
                               f"{self.block_shape}")
            object.__setattr__(self, "box", tuple(int(b) for b in self.box))
            problem = tma_box_problem(self.box, self.dtype.bytes, self.swizzle_bytes)
            if problem is not None:
                raise ABIError(f"parameter {self.name!r}: {problem}")
            if self.rank is None:
                object.__setattr__(self, "rank", len(self.block_shape))

    @property
    def launch_types(self) -> list[str]:
        """This parameter's entries in the binary's parameter list, in Triton's launcher vocabulary."""
        if self.kind is ParamKind.POINTER:
            return ["*" + (self.dtype.triton or "i8")]
        if self.kind is ParamKind.SCALAR:
            return [self.dtype.launcher_scalar]
        if self.kind is ParamKind.TENSORDESC:
            return ["nvTmaDesc"] + ["i32"] * self.rank + ["i64"] * self.rank
        return []

    # -- JSON (the disk cache and built artifacts keep the ABI beside the binary)
    def to_json(self) -> dict:
        d: dict = {"name": self.name, "kind": self.kind.value}
        if self.dtype is not None:
            d["dtype"] = self.dtype.name
        if self.source is not None:
            d["source"] = {k: v for k, v in (("kind", self.source.kind.value), ("index", self.source.index),
                                             ("axis", self.source.axis), ("name", self.source.name)) if v is not None}
        for key in ("divisibility", "rank", "needs_contiguous", "swizzle_bytes", "multicast", "loc"):
            d[key] = getattr(self, key)
        for key in ("block_shape", "box"):
            if getattr(self, key) is not None:
                d[key] = list(getattr(self, key))
        if self.kind is ParamKind.CONSTEXPR:
            v = self.value
            d["value"] = v if v is None or isinstance(v, (bool, int, float, str)) else repr(v)
        return d

    @staticmethod
    def from_json(d: dict) -> "KernelParam":
        src = d.get("source")
        return KernelParam(
            name=d["name"], kind=ParamKind(d["kind"]), dtype=DType[d["dtype"]] if "dtype" in d else None,
            source=ParamSource(SourceKind(src["kind"]), src.get("index"), src.get("axis"), src.get("name"))
            if src else None,
            divisibility=int(d.get("divisibility", 1)), rank=d.get("rank"),
            needs_contiguous=bool(d.get("needs_contiguous", False)),
            block_shape=tuple(d["block_shape"]) if "block_shape" in d else None,
            swizzle_bytes=int(d.get("swizzle_bytes", 0)), box=tuple(d["box"]) if "box" in d else None,
            multicast=bool(d.get("multicast", False)), loc=d.get("loc"), value=d.get("value"))


def _source_plan(i: int, src) -> tuple:
    """Runtime parameter `i`'s source as plain values, read on every launch: (0, index) an argument,
    (1, index, axis) an extent of one, (2, name) a keyword."""
    if src is None or src.kind is SourceKind.ARG:
        return (0, i if src is None else src.index)
    if src.kind is SourceKind.DIM:
        return (1, src.index, src.axis)
    return (2, src.name)


def unexpected_keywords(kernel: str, kwargs, sizes: Sequence[str]) -> str | None:
    """The error for a launch's keywords that are none of the kernel's sizes by keyword (Python's wording for an
    unexpected keyword argument), or None: what KernelABI.bind and the interpreter's binding both say."""
    unknown = [k for k in kwargs if k not in sizes]
    if not unknown:
        return None
    return (f"kernel {kernel} got unexpected keyword argument{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))}" + (f" (its sizes by keyword: {', '.join(sizes)})" if sizes else ""))


@dataclass(frozen=True)
class KernelABI:
    """A compiled kernel's calling convention: its TTGIR function `name`, the `target` it was lowered for
    (backend, arch, warp size), its parameters in order, the CTAs of a cluster, the opt-in PTX
    passes (by name, in the order they run after the cluster pass) its binary is compiled with, and the SASS
    passes its cubin goes through after ptxas (backend/sass_passes.py),
    whether it is launched as a programmatic dependent (`launch_pdl`: it calls `griddep_wait`), and how many of
    its CTAs an SM must hold at once (`ctas_per_sm`, `set_ctas_per_sm`: the compile step checks the binary)."""

    name: str
    target: tuple
    params: tuple[KernelParam, ...]
    num_ctas: int = 1
    ptx_passes: tuple[str, ...] = ()
    loc: str | None = None
    launch_pdl: bool = False
    ctas_per_sm: int = 1
    sass_passes: tuple[str, ...] = ()
    _runtime: tuple = field(default=(), init=False, repr=False, compare=False)
    _sources: tuple = field(default=(), init=False, repr=False, compare=False)
    _in_place: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "target", tuple(self.target))
        object.__setattr__(self, "_runtime", tuple(p for p in self.params if p.kind is not ParamKind.CONSTEXPR))
        object.__setattr__(self, "_sources", tuple(_source_plan(i, p.source) for i, p in enumerate(self._runtime)))
        object.__setattr__(self, "_in_place", all(src == (0, i) for i, src in enumerate(self._sources)))

    @property
    def args_in_place(self) -> bool:
        """Whether each runtime parameter takes the call's argument in its own position (a SIMT kernel;
        no sizes read off shapes or keywords): then a call's arguments are the launch's as they are."""
        return self._in_place

    @property
    def runtime_params(self) -> tuple[KernelParam, ...]:
        """The parameters a launch passes (constexprs are in the binary)."""
        return self._runtime

    @property
    def constexprs(self) -> dict[str, Any]:
        return {p.name: p.value for p in self.params if p.kind is ParamKind.CONSTEXPR}

    def launch_index(self, name: str) -> int:
        """The position of runtime parameter `name` in the binary's (expanded) parameter list: what the PTX
        of the kernel calls `<kernel>_param_<index>`."""
        pos = 0
        for p in self._runtime:
            if p.name == name:
                return pos
            pos += len(p.launch_types)
        raise KeyError(name)

    @property
    def launch_types(self) -> list[str]:
        return [t for p in self._runtime for t in p.launch_types]

    def bind(self, args: Sequence[Any], kwargs: dict) -> list:
        """The value of every runtime parameter for a call with the caller's `args` and keyword sizes,
        taken from each parameter's source (a parameter without one takes the next argument)."""
        if kwargs:                      # a misspelt constexpr or size would otherwise be dropped without a word
            bad = unexpected_keywords(self.name, kwargs, [src[1] for src in self._sources if src[0] == 2])
            if bad:
                raise TypeError(bad)
        out = []
        for src in self._sources:
            kind = src[0]
            if kind == 0:
                out.append(args[src[1]])
            elif kind == 1:
                a = args[src[1]]
                shape = a.shape if hasattr(a, "shape") else a.__cuda_array_interface__["shape"]
                out.append(int(shape[src[2]]))
            else:
                name = src[1]
                if name not in kwargs:
                    raise TypeError(f"kernel {self.name} needs the size '{name}': pass {name}=... to the launch")
                out.append(kwargs[name])
        return out

    def to_json(self) -> dict:
        return {"name": self.name, "target": list(self.target), "params": [p.to_json() for p in self.params],
                "num_ctas": self.num_ctas, "ptx_passes": list(self.ptx_passes), "loc": self.loc,
                **({"launch_pdl": True} if self.launch_pdl else {}),
                **({"ctas_per_sm": self.ctas_per_sm} if self.ctas_per_sm > 1 else {}),
                **({"sass_passes": list(self.sass_passes)} if self.sass_passes else {})}

    @staticmethod
    def from_json(d: dict) -> "KernelABI":
        return KernelABI(d["name"], tuple(d["target"]), tuple(KernelParam.from_json(p) for p in d["params"]),
                         int(d.get("num_ctas", 1)), tuple(d.get("ptx_passes", ())), d.get("loc"),
                         bool(d.get("launch_pdl", False)), int(d.get("ctas_per_sm", 1)),
                         tuple(d.get("sass_passes", ())))


@dataclass(frozen=True)
class LoweredKernel:
    """What the lowering hands the compile step: the TTGIR text and its ABI; `line_locs[i]` is the source
    location of the IR op that TTGIR line i + 1 was lowered from (None for the module's own lines, hoisted
    constants, or TTGIR read back from a cache), so a compiler error at a TTGIR line can name the user's."""

    ttgir: str
    abi: KernelABI
    line_locs: tuple = field(default=(), compare=False, repr=False)

    def loc_of_line(self, line: int):
        """The source location TTGIR line `line` (1-based) was lowered from, or None."""
        return self.line_locs[line - 1] if 1 <= line <= len(self.line_locs) else None

    @property
    def name(self) -> str:
        return self.abi.name

    @property
    def target(self) -> tuple:
        return self.abi.target
