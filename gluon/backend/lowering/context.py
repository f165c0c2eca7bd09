"""The per-kernel lowering context: `KernelLowering(kernel).run()` is one kernel's TTGIR text and ABI.

It owns everything the rules share: the SSA names (`_Names`), the layout aliases printed at the top
(`_Aliases`), the isolation scopes with their hoisted constants (`_Scope`: the function body, one per
warp partition), the emitted lines and their indentation, the spelling of types and layouts, the
kernel's parameter list and module header, and the kernel-wide facts (`_scan`: the module's warp
count, WGMMA/MFMA instruction K). `lower(op)` checks the op kind and its arch family, then calls the
op's rule from `registry.RULES` (rule modules: core, memory, control, nvidia/*, amd/*).
"""
from __future__ import annotations

import re
from typing import Any, Callable

from ...abi import LoweredKernel
from ...ir import (OPS, BarrierType, DescType, GluonError, Kernel, Op, PointerType, Region, ScalarType,
                   SmemType, TileType, TmemType, Value)
from ...types import (BlockedLayout, DotOperandLayout, DType, Layout, LinearLayout, MFMALayout, MMALayout,
                      NVMMASharedLayout, SliceLayout, SwizzledSharedLayout, TensorMemoryLayout)
from .abi import kernel_abi
from .literals import bool_literal, dims, int_array, mlir_string, scalar_literal
from .registry import RULES

__all__ = ["LoweringError", "KernelLowering"]


class LoweringError(GluonError):
    """The IR cannot be expressed in TTGIR for the kernel's target."""


# MFMA K per (operand element bits, instruction M) on CDNA3.
_MFMA_K = {32: {32: 2, 16: 4, 4: 1}, 16: {32: 8, 16: 16, 4: 4}, 8: {32: 16, 16: 32}}

_BARRIER_LAYOUT = "#ttg.swizzled_shared<{vec = 1, perPhase = 1, maxPhase = 1, order = [0]}>"
_BARE_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*\Z")


# ------------------------------------------------------------------------------ names and aliases


def _sanitize(hint: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_$.]", "_", hint or "")
    if name and name[0].isdigit():
        name = "v" + name
    return name


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
        # shape-op results (lowering/shapes.py) also held in the layout Triton inferred: value id -> (name, type, bases)
        self.inferred: dict[int, tuple] = {}
        self.insert_at = insert_at
        self.depth = depth


# ------------------------------------------------------------------------------ the lowering context


class KernelLowering:
    """One kernel's lowering: the context every rule gets as `lw`."""

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
        self.line_locs: list = []          # per line of `lines`: the location of the op it was lowered from
        self.depth = 0
        self.scopes: list[_Scope] = []
        self.mfma_k: dict[MFMALayout, int] = {}
        self.wgmma_k: dict[MMALayout, int] = {}
        self.op: Op | None = None          # the op being lowered (for error locations)
        self.num_warps = kernel.num_warps
        self.cur_warps = kernel.num_warps     # warps running the code being lowered (partitions: theirs)
        self.in_partition = False
        self.worker_warps = 0                 # warps of the largest warp-specialized section's worker roles
        self.num_ctas = int(kernel.attrs.get("num_ctas", 1))
        self.multicast: dict[int, bool] = {}   # descriptor parameter (value id) -> whether its TMA loads multicast
        self.arg_names: dict[int, str] = {}     # kernel parameter value id -> its TTGIR argument name

    # -------------------------------------------------------------- driver

    def run(self) -> LoweredKernel:
        k = self.k
        self._scan()
        self.depth = 2
        scope = self.push_scope()
        params = self._params()
        body_start = len(self.lines)
        scope.insert_at = body_start
        for op in k.body.ops:
            if op.kind == "yield":
                raise LoweringError("yield outside a loop, branch or warp role", op.loc)
            self.lower(op)
        self.emit("tt.return")
        self.pop_scope()

        name = k.name if _BARE_ID.match(k.name) else mlir_string(k.name)
        out = self.aliases.header()
        maxnreg = self.launch_registers()
        out.append(f'module attributes {{"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = {self.num_warps} : i32, '
                   f'ttg.target = "{self.target}", "ttg.threads-per-warp" = {self.warp_size} : i32'
                   + (f', "ttg.maxnreg" = {maxnreg} : i32' if maxnreg else '') + '} {')
        out.append(f"  tt.func public @{name}({params}) attributes {{noinline = false}} {{")
        locs = [None] * sum(t.count("\n") + 1 for t in out)
        for text, loc in zip(self.lines, self.line_locs):       # an emitted entry may hold several lines
            locs += [loc] * (text.count("\n") + 1)
        out.extend(self.lines)
        out.append("  }")
        out.append("}")
        return LoweredKernel("\n".join(out) + "\n", kernel_abi(k, {vid for vid, m in self.multicast.items() if m}),
                             tuple(locs + [None, None]))

    def launch_registers(self) -> int | None:
        """Registers a thread starts with where the kernel asked for several CTAs an SM (`set_ctas_per_sm`): the
        register file over that many CTAs of all its warps (Triton pads the worker roles to whole warpgroups),
        rounded down to 8; None otherwise (Triton's default: the whole register file for one CTA)."""
        n = int(self.k.attrs.get("ctas_per_sm", 1))
        if n <= 1:
            return None
        warps = self.num_warps + -(-self.worker_warps // 4) * 4
        return min(self.arch.max_regs_per_thread, self.arch.regs_per_block // (n * warps * self.warp_size) // 8 * 8)

    def _scan(self) -> None:
        """Kernel-wide facts: module num-warps (warp_specialize default role), MFMA K sizes."""
        ws_warps = set()
        for op in self.k.walk():
            if op.kind == "warp_specialize":
                roles = op.attrs.get("roles") or []
                workers = 0
                for r in roles:
                    first, last = r["warps"]
                    if r.get("default"):
                        ws_warps.add(last - first + 1)
                    else:
                        workers += last - first + 1
                self.worker_warps = max(self.worker_warps, workers)
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

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)
        self.line_locs.append(self.op.loc if self.op is not None else None)

    def push_scope(self) -> _Scope:
        s = _Scope(len(self.lines), self.depth)
        self.scopes.append(s)
        return s

    def pop_scope(self) -> None:
        s = self.scopes.pop()
        pad = "  " * s.depth
        self.lines[s.insert_at:s.insert_at] = [pad + line for line in s.const_lines]
        self.line_locs[s.insert_at:s.insert_at] = [None] * len(s.const_lines)

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

    # -------------------------------------------------------------- operands several rule files share

    def ref_as(self, v: Value, like) -> str:
        """`v`, splatted when it is a scalar and `like` is a tile type (same shape and layout)."""
        name = self.ref(v)
        if isinstance(like, TileType) and not isinstance(v.type, TileType):
            t = TileType(v.type.dtype, like.shape, like.layout)
            s = self.names.fresh(v.name + "_splat" if v.name else "")
            self.emit(f"{s} = tt.splat {name} : {self.ty(v.type)} -> {self.ty(t)}")
            return s
        return name

    def single_stage(self, v: Value, what: str) -> None:
        """Refuse a multi-stage shared region or barrier set where one stage is needed."""
        t = v.type
        if isinstance(t, (SmemType, BarrierType)) and t.stages > 1:
            raise self.err(f"{what} %{v.name or v.id} has {t.stages} stages; index one stage first "
                           f"({'smem_index' if isinstance(t, SmemType) else 'barrier_index'})")

    def address(self, ptr: Value, offsets: Value) -> tuple[str, str]:
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
            self.emit(f"{splat} = tt.splat {base} : {self.ty(ptr.type)} -> {pty}")
            base = splat
        ptrs = self.names.fresh(f"{stem}_ptrs" if stem else "")
        self.emit(f"{ptrs} = tt.addptr {base}, {self.ref(offsets)} : {pty}, {self.ty(offsets.type)}")
        return ptrs, pty

    # -------------------------------------------------------------- types and layouts

    def ty(self, t) -> str:
        if isinstance(t, ScalarType):
            return t.dtype.mlir
        if isinstance(t, PointerType):
            return f"!tt.ptr<{t.dtype.mlir}>"
        if isinstance(t, TileType):
            return f"tensor<{dims(t.shape)}x{t.dtype.mlir}, {self.layout(t.layout)}>"
        if isinstance(t, SmemType):
            shape = (t.stages, *t.shape) if t.stages > 1 else t.shape
            return (f"!ttg.memdesc<{dims(shape)}x{t.dtype.mlir}, {self.shared_layout(t.layout, t.dtype)}, "
                    f"{self.smem()}, mutable>")
        if isinstance(t, BarrierType):
            shape = f"{t.stages}x1" if t.stages > 1 else "1"
            return f"!ttg.memdesc<{shape}xi64, {self.aliases.get('shared', _BARRIER_LAYOUT)}, {self.smem()}, mutable>"
        if isinstance(t, DescType):
            sw = t.swizzle.bytes
            lay = self.aliases.get("shared", f"#ttg.nvmma_shared<{{swizzlingByteWidth = {sw}, transposed = false, "
                                             f"elementBitWidth = {t.dtype.bits}}}>")
            return f"!tt.tensordesc<tensor<{dims(t.block_shape)}x{t.dtype.mlir}, {lay}>>"
        if isinstance(t, TmemType):
            return f"!ttg.memdesc<{dims(t.shape)}x{t.dtype.mlir}, {self.tmem_layout(t.layout)}, #ttng.tensor_memory, mutable>"
        raise self.err(f"type {t} has no TTGIR spelling")

    def ptr_ty(self, dtype: DType, like) -> str:
        """Type of a pointer (scalar) or of a tile of pointers shaped like `like`."""
        if isinstance(like, TileType):
            return f"tensor<{dims(like.shape)}x!tt.ptr<{dtype.mlir}>, {self.layout(like.layout)}>"
        return f"!tt.ptr<{dtype.mlir}>"

    def smem(self) -> str:
        return self.aliases.get("smem", "#ttg.shared_memory")

    def layout(self, lay: Layout | None) -> str:
        if lay is None:
            raise self.err("a register tile has no layout assigned; run the layout passes before lowering")
        if isinstance(lay, BlockedLayout):
            return self.aliases.get("blocked", (
                f"#ttg.blocked<{{sizePerThread = {int_array(lay.size_per_thread)}, "
                f"threadsPerWarp = {int_array(lay.threads_per_warp)}, "
                f"warpsPerCTA = {int_array(lay.warps_per_cta)}, order = {int_array(lay.order)}}}>"))
        if isinstance(lay, SliceLayout):
            return f"#ttg.slice<{{dim = {lay.dim}, parent = {self.layout(lay.parent)}}}>"
        if isinstance(lay, LinearLayout):
            parts = ", ".join(f"{k} = [{', '.join(int_array(b) for b in getattr(lay, k))}]"
                              for k in ("register", "lane", "warp"))
            return self.aliases.get("linear", f"#ttg.linear<{{{parts}, block = []}}>")
        if isinstance(lay, MMALayout):
            instr = tuple(lay.instr_shape)
            if lay.version == 3 and lay in self.wgmma_k and len(instr) == 3:
                instr = (instr[0], instr[1], self.wgmma_k[lay])
            return self.aliases.get("mma", (
                f"#ttg.nvidia_mma<{{versionMajor = {lay.version}, versionMinor = 0, "
                f"warpsPerCTA = {int_array(lay.warps_per_cta)}, instrShape = {int_array(instr)}}}>"))
        if isinstance(lay, DotOperandLayout):
            return f"#ttg.dot_op<{{opIdx = {lay.op_idx}, parent = {self.layout(lay.parent)}, kWidth = {lay.k_width}}}>"
        if isinstance(lay, MFMALayout):
            instr = tuple(lay.instr_shape)
            if len(instr) == 2:
                instr = (*instr, self.mfma_k.get(lay) or self._mfma_k(lay, 16))
            return self.aliases.get("mma", (
                f"#ttg.amd_mfma<{{version = {lay.version}, warpsPerCTA = {int_array(lay.warps_per_cta)}, "
                f"instrShape = {int_array(instr)}, isTransposed = {bool_literal(lay.transposed)}}}>"))
        raise self.err(f"{lay} is not a register layout (blocked, slice, mma, dot_operand, mfma)")

    def shared_layout(self, lay: Layout, dtype: DType) -> str:
        if isinstance(lay, NVMMASharedLayout):
            return self.aliases.get("shared", (
                f"#ttg.nvmma_shared<{{swizzlingByteWidth = {lay.swizzle.bytes}, transposed = {bool_literal(lay.transposed)}, "
                f"elementBitWidth = {dtype.bits}}}>"))
        if isinstance(lay, SwizzledSharedLayout):
            return self.aliases.get("shared", (
                f"#ttg.swizzled_shared<{{vec = {lay.vec}, perPhase = {lay.per_phase}, maxPhase = {lay.max_phase}, "
                f"order = {int_array(lay.order)}}}>"))
        raise self.err(f"shared memory needs a shared layout (Layout.swizzled / Layout.shared), got {lay}")

    def tmem_layout(self, lay: Layout) -> str:
        if not isinstance(lay, TensorMemoryLayout):
            raise self.err(f"tensor memory needs a TensorMemoryLayout, got {lay}")
        return self.aliases.get("tmem", (f"#ttng.tensor_memory_encoding<blockM = {lay.block[0]}, blockN = {lay.block[1]}, "
                                         f"colStride = {lay.col_stride}>"))

    # -------------------------------------------------------------- dispatch

    def lower(self, op: Op) -> None:
        """Lower one op through its rule in RULES, after checking its kind, arch family and layouts."""
        outer, self.op = self.op, op
        try:
            opdef = OPS.get(op.kind)
            if opdef is None:
                raise self.err("unknown op kind")
            supports = getattr(self.arch, "supports", None)
            if supports is not None and not supports(opdef.family):
                raise self.err(f"{op.kind} ({opdef.family}) is not available on {self.arch}")
            rule = RULES.get(op.kind)
            if rule is None:
                raise self.err("no TTGIR lowering for this op")
            for r in op.results:
                if isinstance(r.type, TileType) and r.type.layout is None:
                    raise self.err(f"result %{r.name or r.id} ({r.type}) has no layout assigned; "
                                   "run the layout passes before lowering")
            rule(self, op)
        finally:
            self.op = outer

    def lower_region(self, region: Region, on_yield: Callable[[Op], None]) -> None:
        """Lower a region's ops; its closing `yield` goes to the parent's `on_yield`, never to a rule."""
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
                self.lower(op)
