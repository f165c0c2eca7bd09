"""Gluon IR -> Triton 3.6 TTGIR text.

`lower_kernel(kernel)` prints one `module { tt.func ... }` per kernel, in the exact dialect syntax
triton 3.6.0 parses (see ../shared/ttgir/*.ttgir for compiled references). The input must have
every register tile's layout assigned; the output is deterministic (golden tests compare it) and
readable: IR value names become SSA names (`%acc`, `%acc_1`, ...), layouts become aliases at the
top (`#blocked`, `#mma`, `#shared`, `#smem`, `#tmem`, ...) in first-use order.

How the IR maps onto TTGIR, where it is not one op for one op:

* `load`/`store`/`cp_async` take a scalar base pointer plus a tile of offsets: the lowering splats
  the pointer over the offsets' shape and layout and emits `tt.addptr` (scalar offsets: a scalar
  `tt.addptr` and a scalar load/store). A scalar mask/other/value next to tile offsets is splatted.
* Constants the lowering needs itself (`%true` predicates, the stage indices of a barrier ring,
  the zero of a negation, ...) are hoisted, deduplicated, to the top of the function body (or of
  the warp partition that needs them, since partitions are isolated from above).
* `warp_specialize`: the role with `default: True` becomes the `default` region (running on the
  module's `ttg.num-warps` warps); every other role becomes `partitionK(captures) num_warps(n)`.
  Partition regions are isolated: values they use from outside become operands of
  `ttg.warp_specialize` and block arguments of every partition, except IR `constant`s, which are
  re-materialized inside the partition. `requestedRegisters` lists one count per partition; a role
  without `registers` gets the even share of the register file (no `setmaxnreg` change for that
  warpgroup), and the default role's own `registers` is not expressible in TTGIR 3.6: Triton gives
  the default warpgroup what the partitions leave.
* `wgmma_wait` lists the accumulator and the shared buffers the dots read (the IR's deps) and
  yields one result per operand; the IR result is the first.
* `mfma` layouts given with a 2-D `instr_shape` (M, N) get their K from the operand element width
  of the dots that use them (CDNA3: 16-bit -> 32x32x8 / 16x16x16, 8-bit -> 32x32x16 / 16x16x32,
  32-bit -> 32x32x2 / 16x16x4): Triton 3.6 needs `instrShape = [M, N, K]`.
* `tmem_load` / `tmem_alloc(init)` move data between tensor memory and registers in TMEM's message
  layout (32x32b for blockM 128, 16x32bx2 for blockM 64, f32); when the IR's tile has another
  layout, the lowering loads/stores in the message layout and adds a `ttg.convert_layout`.
* A WGMMA accumulator layout (nvidia_mma v3) is printed with the instruction K its wgmma operands
  need, 256 / element bits (f16/bf16: 16, fp8: 32, tf32: 8), whatever K the IR layout carries
  (`Layout.wgmma` always says 16, which does not compile for fp8). fp8 x fp8 -> f32 wgmma gets
  `maxNumImpreciseAcc = 2**30` (Triton's sm90 default; its verifier rejects less than 32) unless
  the op's attrs give `max_num_imprecise_acc`.
"""
from __future__ import annotations

import math
import re
from typing import Any, Callable

from . import ptx_cluster, ptx_prefetch, ptx_prologue, ptx_release
from ..ir import (OPS, BarrierType, DescType, GluonError, Kernel, Module, Op, PointerType, Region,
                  ScalarType, SmemType, TileType, TmemType, Value)
from ..types import (BlockedLayout, DotOperandLayout, DType, Layout, MFMALayout, MMALayout,
                     NVMMASharedLayout, SliceLayout, SwizzledSharedLayout, TensorMemoryLayout)

__all__ = ["LoweringError", "lower_module", "lower_kernel", "lower_module_kernels"]


class LoweringError(GluonError):
    """The IR cannot be expressed in TTGIR for the kernel's target."""


# ------------------------------------------------------------------------------ entry points


def lower_module(module: Module) -> str:
    """TTGIR text of a module holding exactly one kernel."""
    if len(module.kernels) != 1:
        raise LoweringError(f"lower_module needs a module with exactly one kernel, got {len(module.kernels)}; "
                            "use lower_module_kernels() to lower each kernel into its own TTGIR module")
    return lower_kernel(module.kernels[0])


def lower_module_kernels(module: Module) -> dict[str, str]:
    """One TTGIR text per kernel of `module`, keyed by kernel name (in module order)."""
    out: dict[str, str] = {}
    for k in module.kernels:
        if k.name in out:
            raise LoweringError(f"two kernels named {k.name!r} in one module", k.loc)
        out[k.name] = lower_kernel(k)
    return out


def lower_kernel(kernel: Kernel) -> str:
    """TTGIR text (one `module { tt.func public @name ... }`) of one kernel."""
    return _KernelLowering(kernel).run()


# ------------------------------------------------------------------------------ op tables

_FLOAT_BINARY = {"add": "arith.addf", "sub": "arith.subf", "mul": "arith.mulf", "div": "arith.divf",
                 "rem": "arith.remf", "min": "arith.minnumf", "max": "arith.maxnumf"}
_SINT_BINARY = {"add": "arith.addi", "sub": "arith.subi", "mul": "arith.muli", "div": "arith.divsi",
                "floordiv": "arith.divsi", "rem": "arith.remsi", "and": "arith.andi", "or": "arith.ori",
                "xor": "arith.xori", "shl": "arith.shli", "shr": "arith.shrsi", "min": "arith.minsi",
                "max": "arith.maxsi"}
_UINT_BINARY = dict(_SINT_BINARY, div="arith.divui", floordiv="arith.divui", rem="arith.remui",
                    shr="arith.shrui", min="arith.minui", max="arith.maxui")
_CMPI_SIGNED = {"lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge", "eq": "eq", "ne": "ne"}
_CMPI_UNSIGNED = {"lt": "ult", "le": "ule", "gt": "ugt", "ge": "uge", "eq": "eq", "ne": "ne"}
_CMPF = {"lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge", "eq": "oeq", "ne": "une"}
_MATH = {"exp": "math.exp", "exp2": "math.exp2", "log": "math.log", "log2": "math.log2",
         "sqrt": "math.sqrt", "rsqrt": "math.rsqrt", "sin": "math.sin", "cos": "math.cos",
         "floor": "math.floor", "ceil": "math.ceil"}
_REDUCE_FLOAT = {"sum": "arith.addf", "max": "arith.maxnumf", "min": "arith.minnumf"}
_REDUCE_SINT = {"sum": "arith.addi", "max": "arith.maxsi", "min": "arith.minsi"}
_REDUCE_UINT = {"sum": "arith.addi", "max": "arith.maxui", "min": "arith.minui"}
_LOAD_CACHE = ("ca", "cg", "cs", "cv")
_STORE_CACHE = ("wb", "cg", "cs", "wt")
_EVICT = ("evict_normal", "evict_first", "evict_last")
_INPUT_PRECISION = ("tf32", "tf32x3", "ieee", "bf16x3", "bf16x6")

# MFMA K per (operand element bits, instruction M) on CDNA3.
_MFMA_K = {32: {32: 2, 16: 4, 4: 1}, 16: {32: 8, 16: 16, 4: 4}, 8: {32: 16, 16: 32}}

_BARRIER_LAYOUT = "#ttg.swizzled_shared<{vec = 1, perPhase = 1, maxPhase = 1, order = [0]}>"
_BARE_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*\Z")


# the PTX passes a kernel opts into (kernel attribute, pass module), in the order their cues are written
_OPT_IN_PASSES = (("tma_prefetch", ptx_prefetch), ("lean_prologue", ptx_prologue), ("lean_release", ptx_release))


def _arr(xs) -> str:
    return "[" + ", ".join(str(int(x)) for x in xs) + "]"


def _wgmma_bases(warps_m: int, n: int) -> dict[str, list[list[int]]]:
    """The linear layout (Triton's #ttg.linear bases, [row, col]) of one WGMMA accumulator tile per warp:
    16 x n per warp, warps stacked along M. A thread holds 2 adjacent columns of rows r and r + 8 in
    every 8-column group; lanes take columns 2, 4 and rows 1, 2, 4; warps 16-row blocks."""
    register = [[0, 1], [8, 0]] + [[0, 8 << i] for i in range((n // 8).bit_length() - 1)]
    lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]]
    warp = [[16 << i, 0] for i in range(warps_m.bit_length() - 1)]
    return {"register": register, "lane": lane, "warp": warp}


def _linear(bases: dict[str, list[list[int]]]) -> str:
    parts = ", ".join(f"{k} = [{', '.join(_arr(b) for b in bases[k])}]" for k in ("register", "lane", "warp"))
    return f"#ttg.linear<{{{parts}, block = []}}>"


def _bool(b: bool) -> str:
    return "true" if b else "false"


def _dims(shape) -> str:
    return "x".join(str(int(d)) for d in shape)


def _sanitize(hint: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_$.]", "_", hint or "")
    if name and name[0].isdigit():
        name = "v" + name
    return name


# ------------------------------------------------------------------------------ literals

_FLOAT_SPECIAL = {  # dtype -> (+inf, -inf, nan) bit patterns, as MLIR hexadecimal float literals
    DType.f32: ("0x7F800000", "0xFF800000", "0x7FC00000"),
    DType.f64: ("0x7FF0000000000000", "0xFFF0000000000000", "0x7FF8000000000000"),
    DType.f16: ("0x7C00", "0xFC00", "0x7E00"),
    DType.bf16: ("0x7F80", "0xFF80", "0x7FC0"),
    DType.f8e5m2: ("0x7C", "0xFC", "0x7E"),
    DType.f8e4m3: (None, None, "0x7F"),
}


def float_literal(value: float, dtype: DType = DType.f32) -> str:
    """An MLIR float literal for `value`: `1.000000e+00` (MLIR's own style) when that is exactly
    the value, else Python's shortest round-tripping decimal (`0.1234567891`); inf and nan as the
    target type's hexadecimal bit pattern (`0xFF800000`)."""
    v = float(value)
    if math.isnan(v) or math.isinf(v):
        pinf, ninf, nan = _FLOAT_SPECIAL.get(dtype, _FLOAT_SPECIAL[DType.f32])
        lit = nan if math.isnan(v) else (pinf if v > 0 else ninf)
        if lit is None:
            raise ValueError(f"{dtype.name} cannot represent {v}")
        return lit
    s = f"{v:.6e}"
    if float(s) == v:
        return s
    s = repr(v)
    mant, _, exp = s.partition("e")
    if "." not in mant:
        mant += ".0"
    return mant + ("e" + exp if exp else "")


def int_literal(value: Any, dtype: DType) -> str:
    """An integer literal that fits the signless MLIR type (unsigned values wrap to signed)."""
    v = int(value)
    bits = dtype.bits
    if bits == 1:
        return _bool(bool(v))
    v &= (1 << bits) - 1
    if v >= 1 << (bits - 1):
        v -= 1 << bits
    return str(v)


def scalar_literal(value: Any, dtype: DType) -> str:
    if dtype == DType.i1:
        return _bool(bool(value))
    if dtype.is_float:
        return float_literal(value, dtype)
    return int_literal(value, dtype)


# ------------------------------------------------------------------------------ names and aliases


class _Names:
    """Unique SSA names for the whole function: the IR's names, suffixed `_1`, `_2` when taken,
    numbers for anonymous values."""

    def __init__(self):
        self.taken: set[str] = set()
        self.suffix: dict[str, int] = {}
        self.next_num = 0

    def fresh(self, hint: str = "") -> str:
        base = _sanitize(hint)
        if not base:
            while str(self.next_num) in self.taken:
                self.next_num += 1
            name = str(self.next_num)
            self.next_num += 1
        else:
            name, k = base, self.suffix.get(base, 0)
            while name in self.taken:
                k += 1
                name = f"{base}_{k}"
            self.suffix[base] = k
        self.taken.add(name)
        return "%" + name


class _Aliases:
    """Attribute aliases (`#blocked1 = #ttg.blocked<...>`) in first-use order."""

    def __init__(self):
        self.by_body: dict[str, str] = {}
        self.defs: list[tuple[str, str]] = []
        self.count: dict[str, int] = {}

    def get(self, kind: str, body: str) -> str:
        alias = self.by_body.get(body)
        if alias is None:
            n = self.count.get(kind, 0)
            self.count[kind] = n + 1
            alias = f"#{kind}{n if n else ''}"
            self.by_body[body] = alias
            self.defs.append((alias, body))
        return alias

    def header(self) -> list[str]:
        return [f"{a} = {b}" for a, b in self.defs]


class _Scope:
    """An isolation scope (the function body, or one warp partition): its value names and the
    constants hoisted to its start."""

    def __init__(self, insert_at: int, depth: int):
        self.env: dict[int, str] = {}
        self.consts: dict[tuple[str, str], str] = {}
        self.const_lines: list[str] = []
        self.insert_at = insert_at
        self.depth = depth


# ------------------------------------------------------------------------------ the lowering


class _KernelLowering:
    def __init__(self, kernel: Kernel):
        self.k = kernel
        arch = kernel.arch
        if arch is None or not hasattr(arch, "target_string"):
            raise LoweringError(f"kernel {kernel.name!r} has no target architecture (kernel.arch = {arch!r})", kernel.loc)
        self.arch = arch
        self.target = arch.target_string
        self.warp_size = int(arch.warp_size)
        self.names = _Names()
        self.aliases = _Aliases()
        self.lines: list[str] = []
        self.depth = 0
        self.scopes: list[_Scope] = []
        self.mfma_k: dict[MFMALayout, int] = {}
        self.wgmma_k: dict[MMALayout, int] = {}
        self.op: Op | None = None          # the op being lowered (for error locations)
        self.num_warps = kernel.num_warps
        self.cur_warps = kernel.num_warps     # warps running the code being lowered (partitions: theirs)
        self.in_partition = False
        self.num_ctas = int(kernel.attrs.get("num_ctas", 1))
        self.multicast: dict[str, bool] = {}   # descriptor argument -> whether its TMA loads multicast
        self.arg_names: dict[int, str] = {}     # kernel parameter value id -> its TTGIR argument name

    # -------------------------------------------------------------- driver

    def run(self) -> str:
        k = self.k
        self._scan()
        self.depth = 2
        scope = self._push_scope()
        params = self._params()
        body_start = len(self.lines)
        scope.insert_at = body_start
        for op in k.body.ops:
            if op.kind == "yield":
                raise LoweringError("yield outside a loop, branch or warp role", op.loc)
            self._lower(op)
        self._emit("tt.return")
        self._pop_scope()

        name = k.name if _BARE_ID.match(k.name) else '"' + k.name.replace('"', '\\"') + '"'
        out = self.aliases.header()
        if self.num_ctas > 1:   # what the PTX cluster pass needs; a comment, so the text stays plain TTGIR
            out.insert(0, ptx_cluster.header(self.num_ctas, sorted(d for d, m in self.multicast.items() if m)))
        for attr, ptx_pass in _OPT_IN_PASSES:       # each asked-for pass's cue (gl.set_<attr>)
            if k.attrs.get(attr):
                out.insert(0, ptx_pass.header())
        out.append(f'module attributes {{"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = {self.num_warps} : i32, '
                   f'ttg.target = "{self.target}", "ttg.threads-per-warp" = {self.warp_size} : i32}} {{')
        out.append(f"  tt.func public @{name}({params}) attributes {{noinline = false}} {{")
        out.extend(self.lines)
        out.append("  }")
        out.append("}")
        return "\n".join(out) + "\n"

    def _scan(self) -> None:
        """Kernel-wide facts: module num-warps (warp_specialize default role), MFMA K sizes."""
        ws_warps = set()
        for op in self.k.walk():
            if op.kind == "warp_specialize":
                roles = op.attrs.get("roles") or []
                for r in roles:
                    if r.get("default"):
                        first, last = r["warps"]
                        ws_warps.add(last - first + 1)
            if op.kind == "wgmma" and len(op.operands) >= 3:
                a, acc = op.operands[0].type, op.operands[2].type
                lay = getattr(acc, "layout", None)
                if isinstance(lay, MMALayout) and lay.version == 3 and getattr(a, "dtype", None) is not None:
                    k = 256 // max(8, a.dtype.bits)
                    if self.wgmma_k.setdefault(lay, k) != k:
                        raise LoweringError(f"the wgmma accumulator layout {lay} is used with operands of different "
                                            "widths; give each its own layout (instrShape K differs)", op.loc)
            if op.kind == "mfma" and len(op.operands) >= 3:
                a, acc = op.operands[0].type, op.operands[2].type
                lay = getattr(acc, "layout", None)
                if isinstance(lay, MFMALayout) and getattr(a, "dtype", None) is not None:
                    self.mfma_k.setdefault(lay, self._mfma_k(lay, a.dtype.bits))
        if len(ws_warps) > 1:
            raise LoweringError(f"warp_specialize ops of kernel {self.k.name!r} disagree on the default role's "
                                f"warp count ({sorted(ws_warps)}); it is the module's ttg.num-warps", self.k.loc)
        if ws_warps:
            self.num_warps = ws_warps.pop()
        self.cur_warps = self.num_warps

    @staticmethod
    def _mfma_k(lay: MFMALayout, bits: int) -> int:
        m = lay.instr_shape[0]
        return _MFMA_K.get(bits, _MFMA_K[16]).get(m, _MFMA_K[16][32])

    def _params(self) -> str:
        out = []
        scope = self.scopes[-1]
        for p in self.k.params:
            t = p.value.type
            name = self.names.fresh(p.name or p.value.name)
            scope.env[p.value.id] = name
            self.arg_names[p.value.id] = name[1:]
            div = f" {{tt.divisibility = {int(p.divisibility)} : i32}}" if p.divisibility and p.divisibility > 1 else ""
            if isinstance(t, PointerType):
                out.append(f"{name}: {self.ty(t)}{div}")
            elif isinstance(t, ScalarType):
                out.append(f"{name}: {t.dtype.mlir}{div if t.dtype.is_int else ''}")
            elif isinstance(t, DescType):
                out.append(f"{name}: {self.ty(t)}")
                rank = len(t.block_shape)
                base = name[1:]
                for i in range(rank):
                    out.append(f"{self.names.fresh(f'{base}_{i}')}: i32")
                for i in range(rank):
                    out.append(f"{self.names.fresh(f'{base}_{rank + i}')}: i64")
            else:
                raise LoweringError(f"kernel parameter {p.name!r} has type {t}, which cannot be a TTGIR kernel "
                                    "argument (pointers, scalars and TMA descriptors can)", p.loc or self.k.loc)
        return ", ".join(out)

    # -------------------------------------------------------------- emission helpers

    def _emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def _push_scope(self) -> _Scope:
        s = _Scope(len(self.lines), self.depth)
        self.scopes.append(s)
        return s

    def _pop_scope(self) -> None:
        s = self.scopes.pop()
        pad = "  " * s.depth
        self.lines[s.insert_at:s.insert_at] = [pad + line for line in s.const_lines]

    @property
    def env(self) -> dict[int, str]:
        return self.scopes[-1].env

    def err(self, msg: str) -> LoweringError:
        op = self.op
        where = f"{op.kind}: " if op is not None else ""
        return LoweringError(f"{where}{msg} (target {self.target})", op.loc if op is not None else self.k.loc)

    def ref(self, v: Value) -> str:
        name = self.env.get(v.id)
        if name is None:
            raise self.err(f"operand %{v.name or v.id} is not visible here (defined in another region, "
                           "or used before its definition)")
        return name

    def define(self, v: Value, hint: str = "") -> str:
        name = self.names.fresh(v.name or hint)
        self.env[v.id] = name
        return name

    def alias_value(self, v: Value, name: str) -> None:
        self.env[v.id] = name

    def const(self, lit: str, ty: str, hint: str) -> str:
        """A constant hoisted to the start of the current isolation scope (deduplicated)."""
        scope = self.scopes[-1]
        key = (lit, ty)
        name = scope.consts.get(key)
        if name is None:
            name = self.names.fresh(hint)
            scope.consts[key] = name
            tail = "" if ty == "i1" and lit in ("true", "false") else f" : {ty}"
            scope.const_lines.append(f"{name} = arith.constant {lit}{tail}")
        return name

    def true(self) -> str:
        return self.const("true", "i1", "true")

    def i32(self, v: int) -> str:
        return self.const(str(v), "i32", f"c{v}_i32" if v >= 0 else f"cm{-v}_i32")

    def const_like(self, value: Any, t) -> str:
        """A hoisted constant of type `t` (scalar or tile) holding `value`."""
        lit = scalar_literal(value, t.dtype)
        if isinstance(t, TileType):
            return self.const(f"dense<{lit}>", self.ty(t), "cst")
        if t.dtype == DType.i1:
            return self.const(lit, "i1", lit)
        if t.dtype.is_int:
            return self.const(lit, t.dtype.mlir, f"c{lit}_{t.dtype.mlir}".replace("-", "m"))
        return self.const(lit, t.dtype.mlir, "cst")

    # -------------------------------------------------------------- types and layouts

    def ty(self, t) -> str:
        if isinstance(t, ScalarType):
            return t.dtype.mlir
        if isinstance(t, PointerType):
            return f"!tt.ptr<{t.dtype.mlir}>"
        if isinstance(t, TileType):
            return f"tensor<{_dims(t.shape)}x{t.dtype.mlir}, {self.layout(t.layout)}>"
        if isinstance(t, SmemType):
            shape = (t.stages, *t.shape) if t.stages > 1 else t.shape
            return (f"!ttg.memdesc<{_dims(shape)}x{t.dtype.mlir}, {self.shared_layout(t.layout, t.dtype)}, "
                    f"{self.smem()}, mutable>")
        if isinstance(t, BarrierType):
            shape = f"{t.stages}x1" if t.stages > 1 else "1"
            return f"!ttg.memdesc<{shape}xi64, {self.aliases.get('shared', _BARRIER_LAYOUT)}, {self.smem()}, mutable>"
        if isinstance(t, DescType):
            sw = t.swizzle.bytes
            lay = self.aliases.get("shared", f"#ttg.nvmma_shared<{{swizzlingByteWidth = {sw}, transposed = false, "
                                             f"elementBitWidth = {t.dtype.bits}}}>")
            return f"!tt.tensordesc<tensor<{_dims(t.block_shape)}x{t.dtype.mlir}, {lay}>>"
        if isinstance(t, TmemType):
            return f"!ttg.memdesc<{_dims(t.shape)}x{t.dtype.mlir}, {self.tmem_layout(t.layout)}, #ttng.tensor_memory, mutable>"
        raise self.err(f"type {t} has no TTGIR spelling")

    def ptr_ty(self, dtype: DType, like) -> str:
        """Type of a pointer (scalar) or of a tile of pointers shaped like `like`."""
        if isinstance(like, TileType):
            return f"tensor<{_dims(like.shape)}x!tt.ptr<{dtype.mlir}>, {self.layout(like.layout)}>"
        return f"!tt.ptr<{dtype.mlir}>"

    def smem(self) -> str:
        return self.aliases.get("smem", "#ttg.shared_memory")

    def layout(self, lay: Layout | None) -> str:
        if lay is None:
            raise self.err("a register tile has no layout assigned; run the layout passes before lowering")
        if isinstance(lay, BlockedLayout):
            return self.aliases.get("blocked", (
                f"#ttg.blocked<{{sizePerThread = {_arr(lay.size_per_thread)}, threadsPerWarp = {_arr(lay.threads_per_warp)}, "
                f"warpsPerCTA = {_arr(lay.warps_per_cta)}, order = {_arr(lay.order)}}}>"))
        if isinstance(lay, SliceLayout):
            return f"#ttg.slice<{{dim = {lay.dim}, parent = {self.layout(lay.parent)}}}>"
        if isinstance(lay, MMALayout):
            instr = tuple(lay.instr_shape)
            if lay.version == 3 and lay in self.wgmma_k and len(instr) == 3:
                instr = (instr[0], instr[1], self.wgmma_k[lay])
            return self.aliases.get("mma", (
                f"#ttg.nvidia_mma<{{versionMajor = {lay.version}, versionMinor = 0, warpsPerCTA = {_arr(lay.warps_per_cta)}, "
                f"instrShape = {_arr(instr)}}}>"))
        if isinstance(lay, DotOperandLayout):
            return f"#ttg.dot_op<{{opIdx = {lay.op_idx}, parent = {self.layout(lay.parent)}, kWidth = {lay.k_width}}}>"
        if isinstance(lay, MFMALayout):
            instr = tuple(lay.instr_shape)
            if len(instr) == 2:
                instr = (*instr, self.mfma_k.get(lay) or self._mfma_k(lay, 16))
            return self.aliases.get("mma", (
                f"#ttg.amd_mfma<{{version = {lay.version}, warpsPerCTA = {_arr(lay.warps_per_cta)}, "
                f"instrShape = {_arr(instr)}, isTransposed = {_bool(lay.transposed)}}}>"))
        raise self.err(f"{lay} is not a register layout (blocked, slice, mma, dot_operand, mfma)")

    def shared_layout(self, lay: Layout, dtype: DType) -> str:
        if isinstance(lay, NVMMASharedLayout):
            return self.aliases.get("shared", (
                f"#ttg.nvmma_shared<{{swizzlingByteWidth = {lay.swizzle.bytes}, transposed = {_bool(lay.transposed)}, "
                f"elementBitWidth = {dtype.bits}}}>"))
        if isinstance(lay, SwizzledSharedLayout):
            return self.aliases.get("shared", (
                f"#ttg.swizzled_shared<{{vec = {lay.vec}, perPhase = {lay.per_phase}, maxPhase = {lay.max_phase}, "
                f"order = {_arr(lay.order)}}}>"))
        raise self.err(f"shared memory needs a shared layout (Layout.swizzled / Layout.shared), got {lay}")

    def tmem_layout(self, lay: Layout) -> str:
        if not isinstance(lay, TensorMemoryLayout):
            raise self.err(f"tensor memory needs a TensorMemoryLayout, got {lay}")
        return self.aliases.get("tmem", (f"#ttng.tensor_memory_encoding<blockM = {lay.block[0]}, blockN = {lay.block[1]}, "
                                         f"colStride = {lay.col_stride}>"))

    # -------------------------------------------------------------- dispatch

    def _lower(self, op: Op) -> None:
        outer, self.op = self.op, op
        try:
            opdef = OPS.get(op.kind)
            if opdef is None:
                raise self.err("unknown op kind")
            supports = getattr(self.arch, "supports", None)
            if supports is not None and not supports(opdef.family):
                raise self.err(f"{op.kind} ({opdef.family}) is not available on {self.arch}")
            fn: Callable[[Op], None] | None = getattr(self, "_op_" + op.kind, None)
            if fn is None:
                raise self.err("no TTGIR lowering for this op")
            for r in op.results:
                if isinstance(r.type, TileType) and r.type.layout is None:
                    raise self.err(f"result %{r.name or r.id} ({r.type}) has no layout assigned; "
                                   "run the layout passes before lowering")
            fn(op)
        finally:
            self.op = outer

    def _lower_region(self, region: Region, on_yield: Callable[[Op], None]) -> None:
        ops = region.ops
        for i, op in enumerate(ops):
            if op.kind == "yield":
                if i != len(ops) - 1:
                    raise LoweringError("yield must be the last op of its region", op.loc)
                outer, self.op = self.op, op
                try:
                    on_yield(op)
                finally:
                    self.op = outer
            else:
                self._lower(op)

    # -------------------------------------------------------------- arithmetic

    def _axis(self, op: Op) -> str:
        axis = op.attrs.get("axis", 0)
        if axis in (0, 1, 2):
            return "xyz"[axis]
        if axis in ("x", "y", "z"):
            return axis
        raise self.err(f"axis must be 0, 1 or 2, got {axis!r}")

    def _op_program_id(self, op: Op) -> None:
        self._emit(f"{self.define(op.result, 'pid')} = tt.get_program_id {self._axis(op)} : i32")

    def _op_num_programs(self, op: Op) -> None:
        self._emit(f"{self.define(op.result, 'nprogs')} = tt.get_num_programs {self._axis(op)} : i32")

    def _op_constant(self, op: Op) -> None:
        r = op.result
        t = r.type
        if not isinstance(t, (ScalarType, TileType)):
            raise self.err(f"a constant must be a scalar or a tile, got {t}")
        try:
            lit = scalar_literal(op.attrs["value"], t.dtype)
        except (ValueError, OverflowError) as e:
            raise self.err(str(e)) from None
        if not r.name:   # anonymous constants are hoisted and shared, as Triton prints them
            self.alias_value(r, self.const_like(op.attrs["value"], t))
            return
        if isinstance(t, TileType):
            self._emit(f"{self.define(r, 'cst')} = arith.constant dense<{lit}> : {self.ty(t)}")
        elif t.dtype == DType.i1:
            self._emit(f"{self.define(r, lit)} = arith.constant {lit}")
        else:
            hint = f"c{lit}_{t.dtype.mlir}".replace("-", "m") if t.dtype.is_int else "cst"
            self._emit(f"{self.define(r, hint)} = arith.constant {lit} : {t.dtype.mlir}")

    def _op_binary(self, op: Op) -> None:
        a, b = op.operands
        kind = op.attrs["op"]
        t = op.result.type
        dt = a.type.dtype
        ty = self.ty(t)
        if dt.is_float:
            if kind == "floordiv":
                q = self.names.fresh(op.result.name)
                self._emit(f"{q} = arith.divf {self.ref(a)}, {self.ref(b)} : {ty}")
                self._emit(f"{self.define(op.result)} = math.floor {q} : {ty}")
                return
            mn = _FLOAT_BINARY.get(kind)
        else:
            mn = (_SINT_BINARY if dt.is_signed and dt != DType.i1 else _UINT_BINARY).get(kind)
        if mn is None:
            raise self.err(f"binary op {kind!r} is not defined for {dt.name}")
        self._emit(f"{self.define(op.result)} = {mn} {self.ref(a)}, {self.ref(b)} : {ty}")

    def _op_cmp(self, op: Op) -> None:
        a, b = op.operands
        pred = op.attrs["pred"]
        dt = a.type.dtype
        if dt.is_float:
            p, mn = _CMPF.get(pred), "arith.cmpf"
        else:
            p, mn = (_CMPI_SIGNED if dt.is_signed and dt != DType.i1 else _CMPI_UNSIGNED).get(pred), "arith.cmpi"
        if p is None:
            raise self.err(f"unknown comparison {pred!r}")
        self._emit(f"{self.define(op.result)} = {mn} {p}, {self.ref(a)}, {self.ref(b)} : {self.ty(a.type)}")

    def _op_unary(self, op: Op) -> None:
        (x,) = op.operands
        kind = op.attrs["op"]
        t = op.result.type
        dt = x.type.dtype
        ty = self.ty(t)
        res = op.result
        if kind == "neg":
            # -0.0 - x is an exact negation (arith.negf on tensors does not lower in triton 3.6).
            zero = self.const_like(-0.0 if dt.is_float else 0, x.type)
            mn = "arith.subf" if dt.is_float else "arith.subi"
            self._emit(f"{self.define(res)} = {mn} {zero}, {self.ref(x)} : {ty}")
        elif kind == "not":
            if dt.is_float:
                raise self.err("'not' needs an integer or i1 operand")
            ones = self.const_like(True if dt == DType.i1 else -1, x.type)
            self._emit(f"{self.define(res)} = arith.xori {self.ref(x)}, {ones} : {ty}")
        elif kind == "abs":
            mn = "math.absf" if dt.is_float else "math.absi"
            self._emit(f"{self.define(res)} = {mn} {self.ref(x)} : {ty}")
        elif kind in _MATH:
            if not dt.is_float:
                raise self.err(f"{kind} needs a floating-point operand, got {dt.name}")
            self._emit(f"{self.define(res)} = {_MATH[kind]} {self.ref(x)} : {ty}")
        else:
            raise self.err(f"unknown unary op {kind!r}")

    def _op_cast(self, op: Op) -> None:
        (x,) = op.operands
        res = op.result
        if isinstance(x.type, TileType) != isinstance(res.type, TileType) or \
                isinstance(res.type, TileType) and (x.type.shape, x.type.layout) != (res.type.shape, res.type.layout):
            raise self.err(f"cast changes only the element type; {x.type} -> {res.type} changes shape or layout "
                           "(use convert_layout)")
        name = self._cast(self.ref(x), x.type, res.type, res.name)
        self.alias_value(res, name)

    def _cast(self, val: str, st, dt_type, hint: str) -> str:
        """Emit the ops converting `val` of type `st` to `dt_type`; returns the new SSA name."""
        src, dst = st.dtype, dt_type.dtype
        if src.mlir == dst.mlir:
            return val
        ty_s, ty_d = self.ty(st), self.ty(dt_type)

        def step(mn: str, attrs: str = "", sep: str = " to ") -> str:
            name = self.names.fresh(hint)
            self._emit(f"{name} = {mn} {val}{attrs} : {ty_s}{sep}{ty_d}")
            return name

        fp8 = (DType.f8e4m3, DType.f8e5m2)
        if src.is_float and dst.is_float:
            if src in fp8 or dst in fp8:
                if src in fp8 and dst in fp8:      # fp8 -> fp8 goes through f16
                    mid = _like(st, DType.f16)
                    return self._cast(self._cast(val, st, mid, hint), mid, dt_type, hint)
                if dst in fp8 and src == DType.f64 or src in fp8 and dst == DType.f64:
                    mid = _like(st, DType.f32)
                    return self._cast(self._cast(val, st, mid, hint), mid, dt_type, hint)
                narrowing = dst.bits < src.bits
                return step("tt.fp_to_fp", ", rounding = rtne" if narrowing else "", " -> ")
            if src.bits == dst.bits or (src in (DType.f16, DType.bf16) and dst != DType.f32) \
                    or (dst in (DType.f16, DType.bf16) and src != DType.f32):
                # f16 <-> bf16, f16/bf16 <-> f64: through f32, as Triton does.
                mid = _like(st, DType.f32)
                return self._cast(self._cast(val, st, mid, hint), mid, dt_type, hint)
            return step("arith.extf" if dst.bits > src.bits else "arith.truncf")
        if src.is_int and dst.is_float:
            if dst in fp8:
                mid = _like(dt_type, DType.f32)
                return self._cast(self._cast(val, st, mid, hint), mid, dt_type, hint)
            unsigned = not src.is_signed or src == DType.i1
            return step("arith.uitofp" if unsigned else "arith.sitofp")
        if src.is_float and dst.is_int:
            if dst == DType.i1:
                zero = self.const_like(0.0, st)
                name = self.names.fresh(hint)
                self._emit(f"{name} = arith.cmpf une, {val}, {zero} : {ty_s}")
                return name
            if src in fp8:
                mid = _like(st, DType.f32)
                return self._cast(self._cast(val, st, mid, hint), mid, dt_type, hint)
            return step("arith.fptosi" if dst.is_signed else "arith.fptoui")
        # int -> int
        if dst == DType.i1:
            zero = self.const_like(0, st)
            name = self.names.fresh(hint)
            self._emit(f"{name} = arith.cmpi ne, {val}, {zero} : {ty_s}")
            return name
        if dst.bits > src.bits:
            unsigned = not src.is_signed or src == DType.i1
            return step("arith.extui" if unsigned else "arith.extsi")
        return step("arith.trunci")

    def _as(self, v: Value, like) -> str:
        """`v`, splatted when it is a scalar and `like` is a tile type (same shape and layout)."""
        name = self.ref(v)
        if isinstance(like, TileType) and not isinstance(v.type, TileType):
            t = TileType(v.type.dtype, like.shape, like.layout)
            s = self.names.fresh(v.name + "_splat" if v.name else "")
            self._emit(f"{s} = tt.splat {name} : {self.ty(v.type)} -> {self.ty(t)}")
            return s
        return name

    def _op_select(self, op: Op) -> None:
        c, a, b = op.operands
        t = op.result.type
        if isinstance(t, TileType):
            cty = TileType(DType.i1, t.shape, t.layout)
            cs, as_, bs = self._as(c, t), self._as(a, t), self._as(b, t)
            self._emit(f"{self.define(op.result)} = arith.select {cs}, {as_}, {bs} : {self.ty(cty)}, {self.ty(t)}")
        else:
            self._emit(f"{self.define(op.result)} = arith.select {self.ref(c)}, {self.ref(a)}, {self.ref(b)} : {self.ty(t)}")

    def _op_splat(self, op: Op) -> None:
        (x,) = op.operands
        if isinstance(x.type, TileType):
            raise self.err("splat needs a scalar operand (use broadcast for tiles)")
        self._emit(f"{self.define(op.result)} = tt.splat {self.ref(x)} : {self.ty(x.type)} -> {self.ty(op.result.type)}")

    def _op_arange(self, op: Op) -> None:
        start, end = int(op.attrs["start"]), int(op.attrs["end"])
        t = op.result.type
        if t.dtype != DType.i32:
            raise self.err(f"arange produces i32 tiles, the result is {t}")
        self._emit(f"{self.define(op.result)} = tt.make_range {{end = {end} : i32, start = {start} : i32}} : {self.ty(t)}")

    def _op_expand_dims(self, op: Op) -> None:
        (x,) = op.operands
        self._emit(f"{self.define(op.result)} = tt.expand_dims {self.ref(x)} {{axis = {int(op.attrs['axis'])} : i32}} : "
                   f"{self.ty(x.type)} -> {self.ty(op.result.type)}")

    def _op_broadcast(self, op: Op) -> None:
        (x,) = op.operands
        t = op.result.type
        if not isinstance(x.type, TileType):
            self._emit(f"{self.define(op.result)} = tt.splat {self.ref(x)} : {self.ty(x.type)} -> {self.ty(t)}")
        elif x.type == t:
            self.alias_value(op.result, self.ref(x))
        else:
            self._emit(f"{self.define(op.result)} = tt.broadcast {self.ref(x)} : {self.ty(x.type)} -> {self.ty(t)}")

    def _op_convert_layout(self, op: Op) -> None:
        (x,) = op.operands
        t = op.result.type
        if x.type == t:
            self.alias_value(op.result, self.ref(x))
            return
        self._emit(f"{self.define(op.result)} = ttg.convert_layout {self.ref(x)} : {self.ty(x.type)} -> {self.ty(t)}")

    def _op_split_cols(self, op: Op) -> None:
        """Triton's own form of it (what tl.reshape + tl.permute + tl.split of an accumulator compile
        to): reshape [M, N] -> [M, 2, N/2] (the top column bit becomes the middle dim), move it last, split.
        The intermediate layouts are the accumulator's linear layout with that bit moved; the halves
        come out in the WGMMA layout of width N/2 (the same linear layout, which Triton accepts)."""
        (x,) = op.operands
        m, n = x.type.shape
        lay = x.type.layout
        h = n // 2
        bases = _wgmma_bases(lay.warps_per_cta[0], n)
        mid = {k: [[r, c // h, c % h] for r, c in v] for k, v in bases.items()}           # [M, 2, N/2]
        last = {k: [[r, c, a] for r, a, c in v] for k, v in mid.items()}                # [M, N/2, 2]
        dt = x.type.dtype.mlir
        t3 = f"tensor<{m}x2x{h}x{dt}, {_linear(mid)}>"
        t3t = f"tensor<{m}x{h}x2x{dt}, {_linear(last)}>"
        r, tr = self.names.fresh("split"), self.names.fresh("split")
        self._emit(f"{r} = tt.reshape {self.ref(x)} : {self.ty(x.type)} -> {t3}")
        self._emit(f"{tr} = tt.trans {r} {{order = array<i32: 0, 2, 1>}} : {t3} -> {t3t}")
        lo, hi = self.define(op.results[0], "lo"), self.define(op.results[1], "hi")
        self._emit(f"{lo}, {hi} = tt.split {tr} : {t3t} -> {self.ty(op.results[0].type)}")

    def _op_reduce(self, op: Op) -> None:
        (x,) = op.operands
        axis = int(op.attrs["axis"])
        kind = op.attrs["op"]
        dt = x.type.dtype
        table = _REDUCE_FLOAT if dt.is_float else (_REDUCE_SINT if dt.is_signed and dt != DType.i1 else _REDUCE_UINT)
        mn = table.get(kind)
        if mn is None:
            raise self.err(f"unknown reduction {kind!r}")
        res = op.result
        name = self.define(res, "red")
        base = name[1:]
        elt = dt.mlir
        lhs, rhs, out = (self.names.fresh(base) for _ in range(3))
        self._emit(f'{name} = "tt.reduce"({self.ref(x)}) <{{axis = {axis} : i32}}> ({{')
        self._emit(f"^bb0({lhs}: {elt}, {rhs}: {elt}):")
        self.depth += 1
        self._emit(f"{out} = {mn} {lhs}, {rhs} : {elt}")
        self._emit(f"tt.reduce.return {out} : {elt}")
        self.depth -= 1
        self._emit(f"}}) : ({self.ty(x.type)}) -> {self.ty(res.type)}")

    # -------------------------------------------------------------- global memory

    def _address(self, ptr: Value, offsets: Value) -> tuple[str, str]:
        """splat + addptr of a scalar base pointer and offsets; returns (pointer(s) name, their type)."""
        if not isinstance(ptr.type, PointerType):
            raise self.err(f"the first operand must be a global pointer, got {ptr.type}")
        if not isinstance(offsets.type, (TileType, ScalarType)) or not offsets.type.dtype.is_int:
            raise self.err(f"offsets must be integers, got {offsets.type}")
        pty = self.ptr_ty(ptr.type.dtype, offsets.type)
        stem = ptr.name[:-4] if ptr.name.endswith("_ptr") else ptr.name
        base = self.ref(ptr)
        if isinstance(offsets.type, TileType):
            splat = self.names.fresh(f"{ptr.name}_splat" if ptr.name else "")
            self._emit(f"{splat} = tt.splat {base} : {self.ty(ptr.type)} -> {pty}")
            base = splat
        ptrs = self.names.fresh(f"{stem}_ptrs" if stem else "")
        self._emit(f"{ptrs} = tt.addptr {base}, {self.ref(offsets)} : {pty}, {self.ty(offsets.type)}")
        return ptrs, pty

    def _cache_attrs(self, op: Op, allowed_cache: tuple[str, ...]) -> str:
        cache = str(op.attrs.get("cache") or "").lstrip(".")
        evict = str(op.attrs.get("evict") or "").lstrip(".")
        if cache and cache not in allowed_cache:
            raise self.err(f"cache modifier {cache!r} is not one of {', '.join(allowed_cache)}")
        if evict and evict not in _EVICT:
            raise self.err(f"eviction policy {evict!r} is not one of {', '.join(_EVICT)}")
        if evict == "evict_normal":
            evict = ""
        if cache == "cg" and evict and self.arch.backend == "cuda":
            raise self.err(f"cache='cg' bypasses L1, so it cannot be combined with evict={evict!r} (ptxas rejects it)")
        out = ""
        if cache:
            out += f" cacheModifier = {cache}"
        if evict:
            out += f" evictionPolicy = {evict}"
        return out

    def _op_load(self, op: Op) -> None:
        ptr, offsets, *rest = op.operands
        has_mask = bool(op.attrs.get("has_mask", len(rest) >= 1))
        has_other = bool(op.attrs.get("has_other", len(rest) >= 2))
        mask = rest.pop(0) if has_mask and rest else None
        other = rest.pop(0) if has_other and rest else None
        res = op.result
        t = res.type
        if isinstance(offsets.type, TileType) != isinstance(t, TileType):
            raise self.err(f"offsets {offsets.type} and result {t} must both be tiles or both scalars")
        if t.dtype.mlir != ptr.type.dtype.mlir:
            raise self.err(f"loading {ptr.type} yields {ptr.type.dtype.name}, not {t.dtype.name}")
        ptrs, pty = self._address(ptr, offsets)
        args = ptrs
        if mask is not None:
            args += ", " + self._as(mask, offsets.type)
            if other is not None:
                args += ", " + self._as(other, t)
        attrs = self._cache_attrs(op, _LOAD_CACHE)
        self._emit(f"{self.define(res)} = tt.load {args}{attrs} : {pty}")

    def _op_store(self, op: Op) -> None:
        ptr, offsets, value, *rest = op.operands
        has_mask = bool(op.attrs.get("has_mask", len(rest) >= 1))
        mask = rest[0] if has_mask and rest else None
        if value.type.dtype.mlir != ptr.type.dtype.mlir:
            raise self.err(f"storing {value.type.dtype.name} through {ptr.type}")
        ptrs, pty = self._address(ptr, offsets)
        args = f"{ptrs}, {self._as(value, offsets.type)}"
        if mask is not None:
            args += ", " + self._as(mask, offsets.type)
        attrs = self._cache_attrs(op, _STORE_CACHE)
        self._emit(f"tt.store {args}{attrs} : {pty}")

    # -------------------------------------------------------------- shared memory

    def _single(self, v: Value, what: str) -> None:
        t = v.type
        if isinstance(t, (SmemType, BarrierType)) and t.stages > 1:
            raise self.err(f"{what} %{v.name or v.id} has {t.stages} stages; index one stage first "
                           f"({'smem_index' if isinstance(t, SmemType) else 'barrier_index'})")

    def _op_smem_alloc(self, op: Op) -> None:
        res = op.result
        t = res.type
        if not isinstance(t, SmemType):
            raise self.err(f"smem_alloc must produce shared memory, got {t}")
        if op.operands:
            (init,) = op.operands
            if t.stages > 1:
                raise self.err("an initial value needs a single-stage region")
            self._emit(f"{self.define(res, 'smem')} = ttg.local_alloc {self.ref(init)} : ({self.ty(init.type)}) -> {self.ty(t)}")
        else:
            self._emit(f"{self.define(res, 'smem')} = ttg.local_alloc : () -> {self.ty(t)}")

    def _op_smem_index(self, op: Op) -> None:
        smem, stage = op.operands
        if not isinstance(smem.type, SmemType) or smem.type.stages <= 1:
            raise self.err(f"smem_index needs a multi-stage shared region, got {smem.type}")
        self._emit(f"{self.define(op.result)} = ttg.memdesc_index {self.ref(smem)}[{self.ref(stage)}] : "
                   f"{self.ty(smem.type)} -> {self.ty(op.result.type)}")

    def _op_smem_reinterpret(self, op: Op) -> None:
        (smem,) = op.operands
        self._emit(f"{self.define(op.result)} = ttg.memdesc_reinterpret {self.ref(smem)} : "
                   f"{self.ty(smem.type)} -> {self.ty(op.result.type)}")

    def _op_smem_load(self, op: Op) -> None:
        (smem,) = op.operands
        self._single(smem, "shared region")
        self._emit(f"{self.define(op.result)} = ttg.local_load {self.ref(smem)} : {self.ty(smem.type)} -> {self.ty(op.result.type)}")

    def _op_smem_store(self, op: Op) -> None:
        tile, smem = op.operands
        self._single(smem, "shared region")
        self._emit(f"ttg.local_store {self.ref(tile)}, {self.ref(smem)} : {self.ty(tile.type)} -> {self.ty(smem.type)}")

    def _op_smem_trans(self, op: Op) -> None:
        (smem,) = op.operands
        st, rt = smem.type, op.result.type
        self._single(smem, "shared region")
        order = tuple(int(i) for i in op.attrs.get("order", tuple(reversed(range(len(st.shape))))))
        want_shape = tuple(st.shape[i] for i in order)
        lay = st.layout
        if isinstance(lay, NVMMASharedLayout):
            want = NVMMASharedLayout(tuple(want_shape), lay.swizzle, not lay.transposed)
            same = isinstance(rt.layout, NVMMASharedLayout) and (rt.layout.swizzle, rt.layout.transposed) == (want.swizzle, want.transposed)
        elif isinstance(lay, SwizzledSharedLayout):
            want = SwizzledSharedLayout(lay.vec, lay.per_phase, lay.max_phase, tuple(order.index(o) for o in lay.order))
            same = rt.layout == want
        else:
            want, same = None, False
        if tuple(rt.shape) != want_shape or not same:
            raise self.err(f"the transposed view of {st} by order {list(order)} is {want_shape} with layout {want} "
                           f"(what Triton infers), but the IR says {rt}")
        self._emit(f"{self.define(op.result)} = ttg.memdesc_trans {self.ref(smem)} {{order = array<i32: {', '.join(map(str, order))}>}} : "
                   f"{self.ty(st)} -> {self.ty(rt)}")

    # -------------------------------------------------------------- mbarriers

    def _op_barrier_alloc(self, op: Op) -> None:
        res = op.result
        t = res.type
        if not isinstance(t, BarrierType):
            raise self.err(f"barrier_alloc must produce barriers, got {t}")
        count = int(op.attrs.get("count", t.count))
        ty = self.ty(t)
        name = self.define(res, "bar")
        self._emit(f"{name} = ttg.local_alloc : () -> {ty}")
        if t.stages == 1:
            self._emit(f"ttng.init_barrier {name}, {count} : {ty}")
            return
        one = self.ty(t.stage())
        for s in range(t.stages):
            b = self.names.fresh()
            self._emit(f"{b} = ttg.memdesc_index {name}[{self.i32(s)}] : {ty} -> {one}")
            self._emit(f"ttng.init_barrier {b}, {count} : {one}")

    def _op_barrier_index(self, op: Op) -> None:
        bars, stage = op.operands
        if not isinstance(bars.type, BarrierType) or bars.type.stages <= 1:
            raise self.err(f"barrier_index needs a multi-stage barrier set, got {bars.type}")
        self._emit(f"{self.define(op.result)} = ttg.memdesc_index {self.ref(bars)}[{self.ref(stage)}] : "
                   f"{self.ty(bars.type)} -> {self.ty(op.result.type)}")

    def _pred(self, op: Op, idx: int) -> str:
        return self.ref(op.operands[idx]) if len(op.operands) > idx else self.true()

    def _op_barrier_expect(self, op: Op) -> None:
        bar = op.operands[0]
        self._single(bar, "barrier")
        self._emit(f"ttng.barrier_expect {self.ref(bar)}, {int(op.attrs['bytes'])}, {self._pred(op, 1)} : {self.ty(bar.type)}")

    def _op_barrier_arrive(self, op: Op) -> None:
        bar = op.operands[0]
        self._single(bar, "barrier")
        count = int(op.attrs.get("count", 1))
        if op.attrs.get("cluster"):
            if self.num_ctas < 2:
                raise self.err("arrive(cluster=True) in a kernel without a cluster (set_cluster)")
            count = ptx_cluster.ARRIVE_SENTINEL   # the PTX cluster pass turns it into one arrive per CTA
        self._emit(f"ttng.arrive_barrier {self.ref(bar)}, {count}, {self._pred(op, 1)} : {self.ty(bar.type)}")

    def _op_barrier_wait(self, op: Op) -> None:
        bar, phase = op.operands[:2]
        self._single(bar, "barrier")
        if phase.type != ScalarType(DType.i32):
            raise self.err(f"the phase must be an i32 scalar, got {phase.type}")
        self._emit(f"ttng.wait_barrier {self.ref(bar)}, {self.ref(phase)}, {self._pred(op, 2)} : {self.ty(bar.type)}")

    # -------------------------------------------------------------- TMA, fences, cp.async

    def _coords(self, vals: list[Value]) -> str:
        for v in vals:
            if v.type != ScalarType(DType.i32):
                raise self.err(f"TMA coordinates must be i32 scalars, got {v.type}")
        return ", ".join(self.ref(v) for v in vals)

    def _op_tma_load(self, op: Op) -> None:
        desc, dst, bar, *coords = op.operands
        if not isinstance(desc.type, DescType):
            raise self.err(f"the first operand must be a TMA descriptor, got {desc.type}")
        if len(coords) != len(desc.type.block_shape):
            raise self.err(f"{len(coords)} coordinates for a rank-{len(desc.type.block_shape)} descriptor")
        self._single(dst, "destination")
        self._single(bar, "barrier")
        mc = bool(op.attrs.get("multicast"))
        if mc and self.num_ctas < 2:
            raise self.err("tma_load(multicast=True) in a kernel without a cluster (set_cluster)")
        d = self.arg_names.get(desc.id)
        if d is None:
            raise self.err("a TMA load's descriptor must be a kernel argument")
        if self.multicast.setdefault(d, mc) != mc:
            raise self.err(f"TMA loads through {self.ref(desc)} both multicast and not; the PTX cluster pass makes a "
                           "descriptor's loads all multicast or none: use a second global tensor argument")
        self._emit(f"ttng.async_tma_copy_global_to_local {self.ref(desc)}[{self._coords(coords)}] {self.ref(dst)}, "
                   f"{self.ref(bar)}, {self.true()} : {self.ty(desc.type)}, {self.ty(bar.type)} -> {self.ty(dst.type)}")

    def _op_tma_store(self, op: Op) -> None:
        desc, src, *coords = op.operands
        if not isinstance(desc.type, DescType):
            raise self.err(f"the first operand must be a TMA descriptor, got {desc.type}")
        if len(coords) != len(desc.type.block_shape):
            raise self.err(f"{len(coords)} coordinates for a rank-{len(desc.type.block_shape)} descriptor")
        self._single(src, "source")
        self._emit(f"ttng.async_tma_copy_local_to_global {self.ref(desc)}[{self._coords(coords)}] {self.ref(src)} : "
                   f"{self.ty(desc.type)}, {self.ty(src.type)}")

    def _op_tma_store_wait(self, op: Op) -> None:
        self._emit(f"ttng.async_tma_store_wait {{pendings = {int(op.attrs.get('pendings', 0))} : i32}}")

    def _op_fence_async_shared(self, op: Op) -> None:
        self._emit(f"ttng.fence_async_shared {{bCluster = {_bool(bool(op.attrs.get('cluster', False)))}}}")

    def _op_thread_barrier(self, op: Op) -> None:
        self._emit("gpu.barrier")

    def _op_cluster_rank(self, op: Op) -> None:
        self._emit(f'{self.define(op.result)} = tt.elementwise_inline_asm "mov.u32 $0, %cluster_ctarank;" '
                   '{constraints = "=r", packed_element = 1 : i32, pure = true} -> i32')

    def _op_cluster_sync(self, op: Op) -> None:
        # fence.mbarrier_init: this thread's mbarrier.init ops are visible cluster-wide after the barrier
        fence = self.names.fresh()
        self._emit(f'{fence} = tt.elementwise_inline_asm "fence.mbarrier_init.release.cluster; mov.u32 $0, 0;" '
                   '{constraints = "=r", packed_element = 1 : i32, pure = false} -> i32')
        self._emit("ttng.cluster_arrive {relaxed = false}")
        self._emit("ttng.cluster_wait")

    def _op_cp_async(self, op: Op) -> None:
        ptr, offsets, dst, *rest = op.operands
        has_mask = bool(op.attrs.get("has_mask", len(rest) >= 1))
        mask = rest[0] if has_mask and rest else None
        if not isinstance(offsets.type, TileType):
            raise self.err("cp_async needs a tile of offsets")
        if not isinstance(dst.type, SmemType):
            raise self.err(f"cp_async copies into shared memory, got {dst.type}")
        self._single(dst, "destination")
        ptrs, pty = self._address(ptr, offsets)
        m = f" mask {self._as(mask, offsets.type)}" if mask is not None else ""
        tok = self.define(op.results[0], "tok") if op.results else self.names.fresh("tok")
        memdesc = self.ty(dst.type)[len("!ttg.memdesc"):]
        self._emit(f"{tok} = ttg.async_copy_global_to_local {ptrs}, {self.ref(dst)}{m} : {pty} -> {memdesc}")

    def _op_cp_async_commit(self, op: Op) -> None:
        tok = self.define(op.results[0], "tok") if op.results else self.names.fresh("tok")
        self._emit(f"{tok} = ttg.async_commit_group")

    def _op_cp_async_wait(self, op: Op) -> None:
        tok = self.define(op.results[0], "tok") if op.results else self.names.fresh("tok")
        self._emit(f"{tok} = ttg.async_wait {{num = {int(op.attrs.get('num', 0))} : i32}}")

    # -------------------------------------------------------------- tensor cores

    def _dot(self, op: Op, default_precision: str | None) -> None:
        a, b, acc = op.operands[:3]
        for v, i in ((a, 0), (b, 1)):
            lay = getattr(v.type, "layout", None)
            if not isinstance(v.type, TileType) or not isinstance(lay, DotOperandLayout) or lay.op_idx != i:
                raise self.err(f"operand {'AB'[i]} must be a register tile with a dot_operand(op_idx={i}) layout, got {v.type}")
        prec = op.attrs.get("input_precision", default_precision)
        if prec is not None and prec not in _INPUT_PRECISION:
            raise self.err(f"input_precision {prec!r} is not one of {', '.join(_INPUT_PRECISION)}")
        p = f", inputPrecision = {prec}" if prec and prec != "ieee" else ""
        self._emit(f"{self.define(op.result, 'acc')} = tt.dot {self.ref(a)}, {self.ref(b)}, {self.ref(acc)}{p} : "
                   f"{self.ty(a.type)} * {self.ty(b.type)} -> {self.ty(op.result.type)}")

    def _op_mma(self, op: Op) -> None:
        self._dot(op, "tf32")

    def _op_mfma(self, op: Op) -> None:
        self._dot(op, None)

    def _op_wgmma(self, op: Op) -> None:
        a, b, acc = op.operands[:3]
        if not isinstance(b.type, SmemType):
            raise self.err(f"wgmma reads B from shared memory, got {b.type}")
        if not isinstance(a.type, (SmemType, TileType)):
            raise self.err(f"wgmma reads A from shared memory or registers, got {a.type}")
        self._single(a, "A operand")
        self._single(b, "B operand")
        if len(op.operands) > 3:
            use_c = self.ref(op.operands[3])
        else:
            use_c = self.const_like(bool(op.attrs.get("use_acc", True)), ScalarType(DType.i1))
        attrs = "inputPrecision = 0 : i32" + (", isAsync = true" if op.attrs.get("is_async", False) else "")
        imprecise = op.attrs.get("max_num_imprecise_acc")
        if imprecise is None and a.type.dtype in (DType.f8e4m3, DType.f8e5m2) and acc.type.dtype == DType.f32:
            imprecise = 1 << 30   # Triton's sm90 default: accumulate fp8 products in full f32 precision
        if imprecise:
            attrs += f", maxNumImpreciseAcc = {int(imprecise)} : i32"
        self._emit(f"{self.define(op.result, 'acc')} = ttng.warp_group_dot {self.ref(a)}, {self.ref(b)}, {self.ref(acc)}, "
                   f"{use_c} {{{attrs}}} : {self.ty(a.type)} * {self.ty(b.type)} -> {self.ty(op.result.type)}")

    def _op_wgmma_wait(self, op: Op) -> None:
        vals = op.operands
        name = self.names.fresh(op.result.name or vals[0].name or "acc")
        n = len(vals)
        lhs = f"{name}:{n}" if n > 1 else name
        self.alias_value(op.result, f"{name}#0" if n > 1 else name)
        self._emit(f"{lhs} = ttng.warp_group_dot_wait {', '.join(self.ref(v) for v in vals)} "
                   f"{{pendings = {int(op.attrs.get('pendings', 0))} : i32}} : {', '.join(self.ty(v.type) for v in vals)}")

    def _tmem_message_layout(self, t: TmemType) -> BlockedLayout | None:
        """The register layout of TMEM's 32x32b (blockM 128) / 16x32bx2 (blockM 64) messages for the
        warps running this code, as a blocked layout (what Triton's get_tmem_reg_layout computes as a
        linear layout); None where we do not know it (then the IR's layout is used as is)."""
        lay = t.layout
        warps = self.cur_warps
        if not isinstance(lay, TensorMemoryLayout) or len(t.shape) != 2 or warps % 4 or t.dtype.bits != 32:
            return None
        m, n = t.shape
        col_groups = warps // 4
        if m != lay.block[0] or n % col_groups:
            return None
        if m == 128:
            return BlockedLayout((1, n // col_groups), (32, 1), (4, col_groups), (0, 1))
        if m == 64 and n % (2 * col_groups) == 0:
            return BlockedLayout((1, n // (2 * col_groups)), (16, 2), (4, col_groups), (0, 1))
        return None

    @staticmethod
    def _same_distribution(a: Layout, b: Layout) -> bool:
        if a == b:
            return True
        # with one warp column and one thread column, `order` does not change who holds what
        return (isinstance(a, BlockedLayout) and isinstance(b, BlockedLayout)
                and (a.size_per_thread, a.threads_per_warp, a.warps_per_cta) == (b.size_per_thread, b.threads_per_warp, b.warps_per_cta)
                and a.threads_per_warp[1] == 1 and a.warps_per_cta[1] == 1)

    def _op_tmem_alloc(self, op: Op) -> None:
        res = op.result
        t = res.type
        if not isinstance(t, TmemType):
            raise self.err(f"tmem_alloc must produce tensor memory, got {t}")
        if op.operands:
            (init,) = op.operands
            val, vty = self.ref(init), init.type
            msg = self._tmem_message_layout(t)
            if msg is not None and isinstance(vty, TileType) and not self._same_distribution(vty.layout, msg):
                cty = TileType(vty.dtype, vty.shape, msg)
                conv = self.names.fresh(f"{init.name}_tmem" if init.name else "")
                self._emit(f"{conv} = ttg.convert_layout {val} : {self.ty(vty)} -> {self.ty(cty)}")
                val, vty = conv, cty
            self._emit(f"{self.define(res, 'tmem')} = ttng.tmem_alloc {val} : ({self.ty(vty)}) -> {self.ty(t)}")
        else:
            self._emit(f"{self.define(res, 'tmem')} = ttng.tmem_alloc : () -> {self.ty(t)}")

    def _op_tmem_load(self, op: Op) -> None:
        """tmem_load into the IR's layout; when that is not the TMEM message layout (Triton's verifier
        rejects it), load in the message layout and convert."""
        (tm,) = op.operands
        res = op.result
        rt = res.type
        msg = self._tmem_message_layout(tm.type)
        if msg is None or self._same_distribution(rt.layout, msg):
            self._emit(f"{self.define(res)} = ttng.tmem_load {self.ref(tm)} : {self.ty(tm.type)} -> {self.ty(rt)}")
            return
        mty = TileType(rt.dtype, rt.shape, msg)
        raw = self.names.fresh(f"{res.name}_tmem" if res.name else "")
        self._emit(f"{raw} = ttng.tmem_load {self.ref(tm)} : {self.ty(tm.type)} -> {self.ty(mty)}")
        self._emit(f"{self.define(res)} = ttg.convert_layout {raw} : {self.ty(mty)} -> {self.ty(rt)}")

    def _op_tcgen05_mma(self, op: Op) -> None:
        a, b, d, *rest = op.operands
        self._single(a, "A operand")
        self._single(b, "B operand")
        use_d = self.const_like(bool(op.attrs.get("use_acc", True)), ScalarType(DType.i1))
        tok = self.define(op.results[0], "tok") if op.results else self.names.fresh("tok")
        types = f"{self.ty(a.type)}, {self.ty(b.type)}, {self.ty(d.type)}"
        head = f"{tok} = ttng.tc_gen5_mma {self.ref(a)}, {self.ref(b)}, {self.ref(d)}[], {use_d}, {self.true()}"
        if rest:
            bar = rest[0]
            self._single(bar, "barrier")
            self._emit(f"{head}, {self.ref(bar)}[{self.true()}] {{is_async}} : {types}, {self.ty(bar.type)}")
        else:
            self._emit(f"{head} : {types}")

    # -------------------------------------------------------------- control flow

    def _op_for(self, op: Op) -> None:
        lb, ub, step, *inits = op.operands
        body = op.regions[0]
        if len(body.args) != 1 + len(inits):
            raise self.err(f"the body has {len(body.args)} arguments for {len(inits)} loop-carried values")
        for v in (ub, step):
            if v.type != lb.type or not isinstance(lb.type, ScalarType) or not lb.type.dtype.is_int:
                raise self.err(f"lower bound, upper bound and step must be integer scalars of one type, got "
                               f"{lb.type}, {ub.type}, {step.type}")
        init_refs = [self.ref(v) for v in inits]
        res = [self.define(r) for r in op.results]
        iv = self.define(body.args[0], "iv")
        carried = [self.define(a) for a in body.args[1:]]
        head = f"{', '.join(res)} = " if res else ""
        line = f"{head}scf.for {iv} = {self.ref(lb)} to {self.ref(ub)} step {self.ref(step)}"
        if inits:
            types = ", ".join(self.ty(v.type) for v in inits)
            line += f" iter_args({', '.join(f'{c} = {i}' for c, i in zip(carried, init_refs))}) -> ({types})"
        self._emit(f"{line} : {self.ty(lb.type)} {{")
        self.depth += 1

        def on_yield(y: Op) -> None:
            if [v.type for v in y.operands] != [v.type for v in inits]:
                raise self.err("the loop body yields types that differ from the loop-carried values")
            if y.operands:
                self._emit(f"scf.yield {', '.join(self.ref(v) for v in y.operands)} : "
                           f"{', '.join(self.ty(v.type) for v in y.operands)}")

        if inits and (not body.ops or body.ops[-1].kind != "yield"):
            raise self.err("a loop with carried values must end its body with yield")
        self._lower_region(body, on_yield)
        self.depth -= 1
        self._emit("}")

    def _op_if(self, op: Op) -> None:
        cond = op.operands[0]
        if cond.type != ScalarType(DType.i1):
            raise self.err(f"the condition must be an i1 scalar, got {cond.type}")
        regions = op.regions
        if op.results and len(regions) != 2:
            raise self.err("an if with results needs then and else regions")
        res = [self.define(r) for r in op.results]
        head = f"{', '.join(res)} = " if res else ""
        types = f" -> ({', '.join(self.ty(r.type) for r in op.results)})" if res else ""
        self._emit(f"{head}scf.if {self.ref(cond)}{types} {{")

        def on_yield(y: Op) -> None:
            if [v.type for v in y.operands] != [r.type for r in op.results]:
                raise self.err("a branch yields types that differ from the if's results")
            if y.operands:
                self._emit(f"scf.yield {', '.join(self.ref(v) for v in y.operands)} : "
                           f"{', '.join(self.ty(v.type) for v in y.operands)}")

        for i, reg in enumerate(regions[:2]):
            if op.results and (not reg.ops or reg.ops[-1].kind != "yield"):
                raise self.err("each branch of an if with results must end with yield")
            if i == 1:
                if not op.results and all(o.kind == "yield" for o in reg.ops):
                    break
                self._emit("} else {")
            self.depth += 1
            self._lower_region(reg, on_yield)
            self.depth -= 1
        self._emit("}")

    def _op_yield(self, op: Op) -> None:  # pragma: no cover - yields are handled by their parent
        raise self.err("yield outside a loop, branch or warp role")

    # -------------------------------------------------------------- warp specialization

    def _op_warp_specialize(self, op: Op) -> None:
        if self.in_partition:
            raise self.err("warp_specialize cannot nest inside a warp partition")
        roles = op.attrs.get("roles")
        if not roles or len(roles) != len(op.regions):
            raise self.err(f"attrs['roles'] must list one role per region ({len(op.regions)} regions)")
        defaults = [i for i, r in enumerate(roles) if r.get("default")]
        if len(defaults) != 1:
            raise self.err(f"exactly one role must have default=True, found {len(defaults)}")
        d = defaults[0]
        parts = [(r, reg) for i, (r, reg) in enumerate(zip(roles, op.regions)) if i != d]
        warps = []
        for r, _ in parts:
            first, last = r["warps"]
            warps.append(int(last) - int(first) + 1)
            if warps[-1] < 1:
                raise self.err(f"role {r.get('role')!r} has warps {r['warps']}: (first, last) inclusive, last >= first")

        caps, remats = self._captures([reg for _, reg in parts])
        cap_refs = [self.ref(v) for v in caps]
        cap_types = [self.ty(v.type) for v in caps]

        regs = [r.get("registers") for r, _ in parts]
        attr = ""
        if any(x is not None for x in regs):
            share = self._even_register_share(sum(warps))
            regs = [int(x) if x is not None else share for x in regs]
            attr = f" attributes {{requestedRegisters = array<i32: {', '.join(map(str, regs))}>}}"

        res = [self.define(r) for r in op.results]
        head = f"{', '.join(res)} = " if res else ""
        self._emit(f"{head}ttg.warp_specialize({', '.join(cap_refs)}){attr}")
        self._emit("default {")
        self.depth += 1
        default_region = op.regions[d]
        yielded: list[Value] = []

        def on_default_yield(y: Op) -> None:
            yielded.extend(y.operands)

        self._lower_region(default_region, on_default_yield)
        if [v.type for v in yielded] != [r.type for r in op.results]:
            raise self.err("the default role must yield exactly the warp_specialize op's results")
        if yielded:
            self._emit(f"ttg.warp_yield {', '.join(self.ref(v) for v in yielded)} : "
                       f"{', '.join(self.ty(v.type) for v in yielded)}")
        else:
            self._emit("ttg.warp_yield")
        self.depth -= 1

        for idx, ((role, reg), nw, remat) in enumerate(zip(parts, warps, remats)):
            scope = self._push_scope()
            scope.depth = self.depth + 1
            args = []
            for v, t in zip(caps, cap_types):
                name = self.names.fresh(v.name or "arg")
                scope.env[v.id] = name
                args.append(f"{name}: {t}")
            self._emit("}")
            self._emit(f"partition{idx}({', '.join(args)}) num_warps({nw}) {{")
            self.depth += 1
            scope.insert_at = len(self.lines)
            self.in_partition = True
            self.cur_warps = nw
            for c in remat:
                self._lower(c)

            def on_part_yield(y: Op, role=role) -> None:
                if y.operands:
                    raise self.err(f"the warp role {role.get('role')!r} cannot yield values; only the default role can")

            try:
                self._lower_region(reg, on_part_yield)
            finally:
                self.in_partition = False
                self.cur_warps = self.num_warps
            self._emit("ttg.warp_return")
            self.depth -= 1
            self._pop_scope()
        rtypes = [self.ty(r.type) for r in op.results]
        rt = rtypes[0] if len(rtypes) == 1 else f"({', '.join(rtypes)})"
        self._emit(f"}} : ({', '.join(cap_types)}) -> {rt}")

    def _captures(self, regions: list[Region]) -> tuple[list[Value], list[list[Op]]]:
        """Values the partition regions use from outside (first-use order, shared by all
        partitions), and per partition the IR constants to re-materialize inside it."""
        caps: list[Value] = []
        seen: set[int] = set()
        remats: list[list[Op]] = []
        for region in regions:
            defined: set[int] = set()
            remat: list[Op] = []
            remat_ids: set[int] = set()

            def visit(r: Region) -> None:
                defined.update(a.id for a in r.args)
                for o in r.ops:
                    for v in o.operands:
                        if v.id in defined:
                            continue
                        owner = v.owner
                        if isinstance(owner, Op) and owner.kind == "constant":
                            if owner.results[0].id not in remat_ids:
                                remat_ids.add(owner.results[0].id)
                                remat.append(owner)
                        elif v.id not in seen:
                            seen.add(v.id)
                            caps.append(v)
                    for sub in o.regions:
                        visit(sub)
                    defined.update(x.id for x in o.results)

            visit(region)
            remats.append(remat)
        return caps, remats

    def _even_register_share(self, partition_warps: int) -> int:
        """Registers per thread when the register file is split evenly over all warps Triton
        launches (default warps + partition warps padded to whole warpgroups), as its
        allocate-warp-groups pass computes it: asking for this leaves a warpgroup unchanged."""
        total = self.num_warps + -(-partition_warps // 4) * 4
        regs = int(getattr(self.arch, "regs_per_block", 65536))
        share = regs // total // self.warp_size // 8 * 8
        return max(24, min(256, share))


def _like(t, dtype: DType):
    """`t` (scalar or tile) with element type `dtype`."""
    if isinstance(t, TileType):
        return TileType(dtype, t.shape, t.layout)
    return ScalarType(dtype)
