"""Rules of the core register ops: program ids, constants, elementwise arithmetic and casts, tile
shapes (splat, arange, expand_dims, broadcast), layout conversion and reductions."""
from __future__ import annotations

from ...ir import Op, ScalarType, TileType
from ...types import DType
from .context import KernelLowering
from .literals import scalar_literal
from .registry import rule

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


def _axis(lw: KernelLowering, op: Op) -> str:
    axis = op.attrs.get("axis", 0)
    if axis in (0, 1, 2):
        return "xyz"[axis]
    if axis in ("x", "y", "z"):
        return axis
    raise lw.err(f"axis must be 0, 1 or 2, got {axis!r}")


@rule("program_id")
def lower_program_id(lw: KernelLowering, op: Op) -> None:
    lw.emit(f"{lw.define(op.result, 'pid')} = tt.get_program_id {_axis(lw, op)} : i32")


@rule("num_programs")
def lower_num_programs(lw: KernelLowering, op: Op) -> None:
    lw.emit(f"{lw.define(op.result, 'nprogs')} = tt.get_num_programs {_axis(lw, op)} : i32")


@rule("constant")
def lower_constant(lw: KernelLowering, op: Op) -> None:
    r = op.result
    t = r.type
    if not isinstance(t, (ScalarType, TileType)):
        raise lw.err(f"a constant must be a scalar or a tile, got {t}")
    try:
        lit = scalar_literal(op.attrs["value"], t.dtype)
    except (ValueError, OverflowError) as e:
        raise lw.err(str(e)) from None
    if not r.name:   # anonymous constants are hoisted and shared, as Triton prints them
        lw.alias_value(r, lw.const_like(op.attrs["value"], t))
        return
    if isinstance(t, TileType):
        lw.emit(f"{lw.define(r, 'cst')} = arith.constant dense<{lit}> : {lw.ty(t)}")
    elif t.dtype == DType.i1:
        lw.emit(f"{lw.define(r, lit)} = arith.constant {lit}")
    else:
        hint = f"c{lit}_{t.dtype.mlir}".replace("-", "m") if t.dtype.is_int else "cst"
        lw.emit(f"{lw.define(r, hint)} = arith.constant {lit} : {t.dtype.mlir}")


@rule("binary")
def lower_binary(lw: KernelLowering, op: Op) -> None:
    a, b = op.operands
    kind = op.attrs["op"]
    t = op.result.type
    dt = a.type.dtype
    ty = lw.ty(t)
    if dt.is_float:
        if kind == "floordiv":
            q = lw.names.fresh(op.result.name)
            lw.emit(f"{q} = arith.divf {lw.ref(a)}, {lw.ref(b)} : {ty}")
            lw.emit(f"{lw.define(op.result)} = math.floor {q} : {ty}")
            return
        mn = _FLOAT_BINARY.get(kind)
    else:
        mn = (_SINT_BINARY if dt.is_signed and dt != DType.i1 else _UINT_BINARY).get(kind)
    if mn is None:
        raise lw.err(f"binary op {kind!r} is not defined for {dt.name}")
    lw.emit(f"{lw.define(op.result)} = {mn} {lw.ref(a)}, {lw.ref(b)} : {ty}")


@rule("cmp")
def lower_cmp(lw: KernelLowering, op: Op) -> None:
    a, b = op.operands
    pred = op.attrs["pred"]
    dt = a.type.dtype
    if dt.is_float:
        p, mn = _CMPF.get(pred), "arith.cmpf"
    else:
        p, mn = (_CMPI_SIGNED if dt.is_signed and dt != DType.i1 else _CMPI_UNSIGNED).get(pred), "arith.cmpi"
    if p is None:
        raise lw.err(f"unknown comparison {pred!r}")
    lw.emit(f"{lw.define(op.result)} = {mn} {p}, {lw.ref(a)}, {lw.ref(b)} : {lw.ty(a.type)}")


@rule("unary")
def lower_unary(lw: KernelLowering, op: Op) -> None:
    (x,) = op.operands
    kind = op.attrs["op"]
    t = op.result.type
    dt = x.type.dtype
    ty = lw.ty(t)
    res = op.result
    if kind == "neg":
        # -0.0 - x is an exact negation (arith.negf on tensors does not lower in triton 3.6).
        zero = lw.const_like(-0.0 if dt.is_float else 0, x.type)
        mn = "arith.subf" if dt.is_float else "arith.subi"
        lw.emit(f"{lw.define(res)} = {mn} {zero}, {lw.ref(x)} : {ty}")
    elif kind == "not":
        if dt.is_float:
            raise lw.err("'not' needs an integer or i1 operand")
        ones = lw.const_like(True if dt == DType.i1 else -1, x.type)
        lw.emit(f"{lw.define(res)} = arith.xori {lw.ref(x)}, {ones} : {ty}")
    elif kind == "abs":
        mn = "math.absf" if dt.is_float else "math.absi"
        lw.emit(f"{lw.define(res)} = {mn} {lw.ref(x)} : {ty}")
    elif kind in _MATH:
        if not dt.is_float:
            raise lw.err(f"{kind} needs a floating-point operand, got {dt.name}")
        lw.emit(f"{lw.define(res)} = {_MATH[kind]} {lw.ref(x)} : {ty}")
    else:
        raise lw.err(f"unknown unary op {kind!r}")


@rule("cast")
def lower_cast(lw: KernelLowering, op: Op) -> None:
    (x,) = op.operands
    res = op.result
    if isinstance(x.type, TileType) != isinstance(res.type, TileType) or \
            isinstance(res.type, TileType) and (x.type.shape, x.type.layout) != (res.type.shape, res.type.layout):
        raise lw.err(f"cast changes only the element type; {x.type} -> {res.type} changes shape or layout "
                     "(use convert_layout)")
    rounding = op.attrs.get("rounding", "rtne")
    if rounding not in ("rtne", "rtz"):
        raise lw.err(f"rounding {rounding!r} is neither 'rtne' nor 'rtz'")
    name = _cast(lw, lw.ref(x), x.type, res.type, res.name, rounding)
    lw.alias_value(res, name)


def _cast(lw: KernelLowering, val: str, st, dt_type, hint: str, rounding: str = "rtne") -> str:
    """Emit the ops converting `val` of type `st` to `dt_type`; returns the new SSA name. `rounding` is the
    float downcast's (the last step's, where it takes several)."""
    src, dst = st.dtype, dt_type.dtype
    if src.mlir == dst.mlir:
        return val
    ty_s, ty_d = lw.ty(st), lw.ty(dt_type)

    def step(mn: str, attrs: str = "", sep: str = " to ") -> str:
        name = lw.names.fresh(hint)
        lw.emit(f"{name} = {mn} {val}{attrs} : {ty_s}{sep}{ty_d}")
        return name

    fp8 = (DType.f8e4m3, DType.f8e5m2)
    if src.is_float and dst.is_float:
        if src in fp8 or dst in fp8:
            if src in fp8 and dst in fp8:      # fp8 -> fp8 goes through f16
                mid = _like(st, DType.f16)
                return _cast(lw, _cast(lw, val, st, mid, hint), mid, dt_type, hint)
            if dst in fp8 and src == DType.f64 or src in fp8 and dst == DType.f64:
                mid = _like(st, DType.f32)
                return _cast(lw, _cast(lw, val, st, mid, hint), mid, dt_type, hint, rounding)
            narrowing = dst.bits < src.bits
            return step("tt.fp_to_fp", f", rounding = {rounding}" if narrowing else "", " -> ")
        if src.bits == dst.bits or (src in (DType.f16, DType.bf16) and dst != DType.f32) \
                or (dst in (DType.f16, DType.bf16) and src != DType.f32):
            # f16 <-> bf16, f16/bf16 <-> f64: through f32, as Triton does.
            mid = _like(st, DType.f32)
            return _cast(lw, _cast(lw, val, st, mid, hint), mid, dt_type, hint, rounding)
        if rounding == "rtz" and dst.bits < src.bits:
            return step("tt.fp_to_fp", ", rounding = rtz", " -> ")
        return step("arith.extf" if dst.bits > src.bits else "arith.truncf")
    if src.is_int and dst.is_float:
        if dst in fp8:
            mid = _like(dt_type, DType.f32)
            return _cast(lw, _cast(lw, val, st, mid, hint), mid, dt_type, hint)
        unsigned = not src.is_signed or src == DType.i1
        return step("arith.uitofp" if unsigned else "arith.sitofp")
    if src.is_float and dst.is_int:
        if dst == DType.i1:
            zero = lw.const_like(0.0, st)
            name = lw.names.fresh(hint)
            lw.emit(f"{name} = arith.cmpf une, {val}, {zero} : {ty_s}")
            return name
        if src in fp8:
            mid = _like(st, DType.f32)
            return _cast(lw, _cast(lw, val, st, mid, hint), mid, dt_type, hint)
        return step("arith.fptosi" if dst.is_signed else "arith.fptoui")
    # int -> int
    if dst == DType.i1:
        zero = lw.const_like(0, st)
        name = lw.names.fresh(hint)
        lw.emit(f"{name} = arith.cmpi ne, {val}, {zero} : {ty_s}")
        return name
    if dst.bits > src.bits:
        unsigned = not src.is_signed or src == DType.i1
        return step("arith.extui" if unsigned else "arith.extsi")
    return step("arith.trunci")


def _like(t, dtype: DType):
    """`t` (scalar or tile) with element type `dtype`."""
    if isinstance(t, TileType):
        return TileType(dtype, t.shape, t.layout)
    return ScalarType(dtype)


@rule("fma")
def lower_fma(lw: KernelLowering, op: Op) -> None:
    a, b, c = (lw.ref(v) for v in op.operands)
    lw.emit(f"{lw.define(op.result)} = math.fma {a}, {b}, {c} : {lw.ty(op.result.type)}")


@rule("select")
def lower_select(lw: KernelLowering, op: Op) -> None:
    c, a, b = op.operands
    t = op.result.type
    if isinstance(t, TileType):
        cty = TileType(DType.i1, t.shape, t.layout)
        cs, as_, bs = lw.ref_as(c, t), lw.ref_as(a, t), lw.ref_as(b, t)
        lw.emit(f"{lw.define(op.result)} = arith.select {cs}, {as_}, {bs} : {lw.ty(cty)}, {lw.ty(t)}")
    else:
        lw.emit(f"{lw.define(op.result)} = arith.select {lw.ref(c)}, {lw.ref(a)}, {lw.ref(b)} : {lw.ty(t)}")


@rule("splat")
def lower_splat(lw: KernelLowering, op: Op) -> None:
    (x,) = op.operands
    if isinstance(x.type, TileType):
        raise lw.err("splat needs a scalar operand (use broadcast for tiles)")
    lw.emit(f"{lw.define(op.result)} = tt.splat {lw.ref(x)} : {lw.ty(x.type)} -> {lw.ty(op.result.type)}")


@rule("arange")
def lower_arange(lw: KernelLowering, op: Op) -> None:
    start, end = int(op.attrs["start"]), int(op.attrs["end"])
    t = op.result.type
    if t.dtype != DType.i32:
        raise lw.err(f"arange produces i32 tiles, the result is {t}")
    lw.emit(f"{lw.define(op.result)} = tt.make_range {{end = {end} : i32, start = {start} : i32}} : {lw.ty(t)}")


@rule("expand_dims")
def lower_expand_dims(lw: KernelLowering, op: Op) -> None:
    (x,) = op.operands
    lw.emit(f"{lw.define(op.result)} = tt.expand_dims {lw.ref(x)} {{axis = {int(op.attrs['axis'])} : i32}} : "
            f"{lw.ty(x.type)} -> {lw.ty(op.result.type)}")


@rule("broadcast")
def lower_broadcast(lw: KernelLowering, op: Op) -> None:
    (x,) = op.operands
    t = op.result.type
    if not isinstance(x.type, TileType):
        lw.emit(f"{lw.define(op.result)} = tt.splat {lw.ref(x)} : {lw.ty(x.type)} -> {lw.ty(t)}")
    elif x.type == t:
        lw.alias_value(op.result, lw.ref(x))
    else:
        lw.emit(f"{lw.define(op.result)} = tt.broadcast {lw.ref(x)} : {lw.ty(x.type)} -> {lw.ty(t)}")


@rule("convert_layout")
def lower_convert_layout(lw: KernelLowering, op: Op) -> None:
    (x,) = op.operands
    t = op.result.type
    if x.type == t:
        lw.alias_value(op.result, lw.ref(x))
        return
    lw.emit(f"{lw.define(op.result)} = ttg.convert_layout {lw.ref(x)} : {lw.ty(x.type)} -> {lw.ty(t)}")


@rule("reduce")
def lower_reduce(lw: KernelLowering, op: Op) -> None:
    (x,) = op.operands
    axis = int(op.attrs["axis"])
    kind = op.attrs["op"]
    dt = x.type.dtype
    table = _REDUCE_FLOAT if dt.is_float else (_REDUCE_SINT if dt.is_signed and dt != DType.i1 else _REDUCE_UINT)
    mn = table.get(kind)
    if mn is None:
        raise lw.err(f"unknown reduction {kind!r}")
    res = op.result
    name = lw.define(res, "red")
    base = name[1:]
    elt = dt.mlir
    lhs, rhs, out = (lw.names.fresh(base) for _ in range(3))
    lw.emit(f'{name} = "tt.reduce"({lw.ref(x)}) <{{axis = {axis} : i32}}> ({{')
    lw.emit(f"^bb0({lhs}: {elt}, {rhs}: {elt}):")
    lw.depth += 1
    lw.emit(f"{out} = {mn} {lhs}, {rhs} : {elt}")
    lw.emit(f"tt.reduce.return {out} : {elt}")
    lw.depth -= 1
    lw.emit(f"}}) : ({lw.ty(x.type)}) -> {lw.ty(res.type)}")
