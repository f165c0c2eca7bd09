"""Reductions and scans with a combine function (issue 19): `gl.reduce`, `gl.argmax/argmin`,
`gl.associative_scan`, `gl.cumsum/cumprod` and `gl.histogram`, named and behaving as Triton's.

CPU: the IR op and its combine region, the TTGIR (`"tt.reduce"` / `"tt.scan"` with the traced body and
`tt.reduce.return` / `tt.scan.return`, `tt.histogram`), the argmax combine against the one Triton 3.6
itself prints, a compile for sm90 with the SASS each gives (shuffles, ballots, shared-memory atomics),
and the errors for bad arguments at the user's line. GPU (marked): each op against torch on fresh random
inputs, into poisoned outputs.
"""
import inspect
import re

import pytest

import gluon
import gluon.language as gl
from gluon.backend.machine_code import sass_instructions
from gluon.ir import GluonError
from gluon.jit import lower, run_passes
from gluon.language import PointerArg, ScalarArg

HERE = __file__
R, C = 16, 32
ARG_OPS = ("argmax", "argmin", "argmax_fast")
SCAN_OPS = ("cumsum", "cumprod", "cummax")
HIST_BINS = (16, 64, 256)
HIST_MASKS = ("none", "tail", "range")


def _absmax(a, b):
    return gl.maximum(gl.abs(a), gl.abs(b))


def _mul(a, b):
    return a * b


@gluon.jit
def reduce_kernel(out_ptr, x_ptr, OP: gl.constexpr, AXIS: gl.constexpr, R: gl.constexpr, C: gl.constexpr):
    """out[pid, :] = OP of the pid-th [R, C] block of x along AXIS (R values for AXIS=1, C for AXIS=0)."""
    pid = gl.program_id(0)
    rows = gl.arange(0, R)[:, None]
    cols = gl.arange(0, C)[None, :]
    x = gl.load(x_ptr + pid * (R * C) + rows * C + cols)
    n_out = C if AXIS == 0 else R
    if OP == "absmax":
        r = gl.reduce(x, AXIS, _absmax)
    elif OP == "prod":
        r = gl.reduce(x, AXIS, _mul)
    elif OP == "argmax":
        r = gl.argmax(x, AXIS)
    elif OP == "argmin":
        r = gl.argmin(x, AXIS)
    elif OP == "argmax_fast":
        r = gl.argmax(x, AXIS, tie_break_left=False)
    if OP == "absmax_keep":      # keep_dims: a [R, 1] column, stored through the rows' offsets
        k = gl.reduce(x, 1, _absmax, keep_dims=True)
        gl.store(out_ptr + pid * R + rows, k)
    elif OP == "argmax_all":     # axis=None: the row-major flat index over the whole block
        gl.store(out_ptr + pid, gl.argmax(x, None))
    else:
        gl.store(out_ptr + pid * n_out + gl.arange(0, n_out), r)


@gluon.jit
def scan_kernel(out_ptr, x_ptr, OP: gl.constexpr, AXIS: gl.constexpr, REVERSE: gl.constexpr, R: gl.constexpr,
                C: gl.constexpr):
    """The pid-th [R, C] block of out = OP scan of x's along AXIS."""
    offs = gl.program_id(0) * (R * C) + gl.arange(0, R)[:, None] * C + gl.arange(0, C)[None, :]
    x = gl.load(x_ptr + offs)
    if OP == "cumsum":
        y = gl.cumsum(x, AXIS, reverse=REVERSE)
    elif OP == "cumprod":
        y = gl.cumprod(x, AXIS, reverse=REVERSE)
    else:                        # "cummax": a custom combine
        y = gl.associative_scan(x, AXIS, gl.maximum, reverse=REVERSE)
    gl.store(out_ptr + offs, y)


@gluon.jit
def histogram_kernel(hist_ptr, x_ptr, n, BINS: gl.constexpr, BLOCK: gl.constexpr, MASK: gl.constexpr):
    """hist += the counts of each program's BLOCK values. MASK: "none" (n a multiple of BLOCK), "tail"
    (offs < n) or "range" (also x < BINS, for values up to 2 * BINS)."""
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK)
    if MASK == "none":
        h = gl.histogram(gl.load(x_ptr + offs), BINS)
    elif MASK == "tail":
        h = gl.histogram(gl.load(x_ptr + offs, mask=offs < n, other=0), BINS, mask=offs < n)
    else:
        x = gl.load(x_ptr + offs, mask=offs < n, other=0)
        h = gl.histogram(x, BINS, mask=(offs < n) & (x < BINS))
    gl.atomic_add(hist_ptr + gl.arange(0, BINS), h)


def _ttgir(kernel, *args, **kw) -> str:
    return lower(run_passes(kernel.trace(*args, **kw))).ttgir


def _reduce_ttgir(dt, op, axis=1, odt=None) -> str:
    return _ttgir(reduce_kernel, PointerArg(odt or dt), PointerArg(dt), OP=op, AXIS=axis, R=R, C=C)


def _regions(text: str, mnemonic: str) -> list[str]:
    """The combine regions of every `"mnemonic"(...)` op: the lines from `^bb0` to the `.return`."""
    return re.findall(r'"' + re.escape(mnemonic) + r'"\(.*\n(\s*\^bb0.*\n(?:.*\n)*?\s*' + re.escape(mnemonic)
                      + r'\.return .*)\n', text)


def _body_ops(region: str) -> list[str]:
    """The op mnemonics of a combine region, in order (arith.cmpf ogt, ...), without the block header."""
    out = []
    for line in region.splitlines()[1:]:
        m = re.match(r"\s*(?:%[\w.]+ = )?([\w.]+)(?: (eq|ne|[ou]?[lg][te]|oeq|une|s[lg][te]|u[lg][te]),)?", line)
        out.append(m.group(1) + (" " + m.group(2) if m.group(2) else ""))
    return out


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


# ------------------------------------------------------------------ trace, IR, TTGIR


def test_reduce_traces_the_combine_into_its_region():
    m = reduce_kernel.trace(PointerArg(gl.float32), PointerArg(gl.float32), OP="absmax", AXIS=1, R=R, C=C)
    (op,) = [o for o in m.kernel.walk() if o.kind == "reduce_fn"]
    body = op.regions[0]
    assert [str(a.type) for a in body.args] == ["f32", "f32"]
    assert [o.kind for o in body.ops] == ["unary", "unary", "binary", "yield"]
    assert op.attrs == {"axis": 1} and op.results[0].type.shape == (R,)
    m.verify()


def test_reduce_lowers_to_tt_reduce_with_the_body():
    text = _reduce_ttgir(gl.float32, "absmax")
    (region,) = _regions(text, "tt.reduce")
    assert _body_ops(region) == ["math.absf", "math.absf", "arith.maxnumf", "tt.reduce.return"]
    assert re.search(r'%red = "tt.reduce"\(%\w+\) <\{axis = 1 : i32\}> \(\{\n\s*\^bb0\(%x_l: f32, %x_r: f32\):', text)
    assert re.search(r"\}\) : \(tensor<16x32xf32, #blocked>\) -> tensor<16xf32, #ttg.slice<\{dim = 1, parent = "
                     r"#blocked\}>>", text)
    text0 = _reduce_ttgir(gl.int32, "prod", axis=0)
    (region0,) = _regions(text0, "tt.reduce")
    assert _body_ops(region0) == ["arith.muli", "tt.reduce.return"]
    assert "-> tensor<32xi32, #ttg.slice<{dim = 0, parent = #blocked}>>" in text0


def test_keep_dims_and_axis_none():
    m = reduce_kernel.trace(PointerArg(gl.float32), PointerArg(gl.float32), OP="absmax_keep", AXIS=1, R=R, C=C)
    (op,) = [o for o in m.kernel.walk() if o.kind == "expand_dims" and o.operands[0].owner.kind == "reduce_fn"]
    assert op.results[0].type.shape == (R, 1)
    text = _reduce_ttgir(gl.float32, "argmax_all", odt=gl.int32)
    # axis=None: the last axis, then the first, on (value, flat index) pairs, down to two scalars
    assert len(_regions(text, "tt.reduce")) == 2
    assert re.search(r"-> \(f32, i32\)\n", text)
    assert "arith.muli" in text           # the flat index: row * C + col


def test_reduce_over_every_axis_keeping_dims():
    @gluon.jit
    def total(out_ptr, x_ptr):
        offs = gl.arange(0, 16)[:, None] * 8 + gl.arange(0, 8)[None, :]
        t = gl.load(x_ptr + offs)
        gl.store(out_ptr + offs, t - gl.reduce(t, None, lambda a, b: a + b, keep_dims=True))

    m = total.trace(PointerArg(gl.float32), PointerArg(gl.float32))
    reds = [o for o in m.kernel.walk() if o.kind == "reduce_fn"]
    assert [o.attrs["axis"] for o in reds] == [1, 0] and str(reds[-1].results[0].type) == "f32"
    (splat,) = [o for o in m.kernel.walk() if o.kind == "splat" and o.operands[0] is reds[-1].results[0]]
    assert splat.results[0].type.shape == (1, 1)
    assert len(_regions(_ttgir(total, PointerArg(gl.float32), PointerArg(gl.float32)), "tt.reduce")) == 2


@pytest.mark.parametrize("op,dt,want", [
    ("argmax", gl.float32, ["arith.cmpf ogt", "arith.cmpf oeq", "arith.cmpi slt", "arith.andi", "arith.ori",
                            "arith.select", "arith.select", "tt.reduce.return"]),
    ("argmin", gl.float32, ["arith.cmpf olt", "arith.cmpf oeq", "arith.cmpi slt", "arith.andi", "arith.ori",
                            "arith.select", "arith.select", "tt.reduce.return"]),
    ("argmax_fast", gl.float32, ["arith.cmpf ogt", "arith.select", "arith.select", "tt.reduce.return"]),
    ("argmax", gl.int32, ["arith.cmpi sgt", "arith.cmpi eq", "arith.cmpi slt", "arith.andi", "arith.ori",
                          "arith.select", "arith.select", "tt.reduce.return"]),
    ("argmin", gl.uint32, ["arith.cmpi ult", "arith.cmpi eq", "arith.cmpi slt", "arith.andi", "arith.ori",
                           "arith.select", "arith.select", "tt.reduce.return"]),
])
def test_argmax_argmin_reduce_value_index_pairs(op, dt, want):
    text = _reduce_ttgir(dt, op, odt=gl.int32)
    (region,) = _regions(text, "tt.reduce")
    assert _body_ops(region) == want
    e = dt.mlir
    assert re.search(rf"\^bb0\(%\w+: {e}, %\w+: i32, %\w+: {e}, %\w+: i32\):", region)
    assert re.search(r"= \"tt.reduce\"\(%\w+, %\w+\) <\{axis = 1 : i32\}>", text)
    assert (f"-> (tensor<16x{e}, #ttg.slice<{{dim = 1, parent = #blocked}}>>, "
            "tensor<16xi32, #ttg.slice<{dim = 1, parent = #blocked}>>)") in text


def test_argmax_combine_is_the_one_triton_prints():
    """Triton 3.6's own `tl.argmax` (compiled here, for sm90, without a GPU): the same combine ops."""
    triton = pytest.importorskip("triton")
    tl = pytest.importorskip("triton.language")
    from triton.backends.compiler import GPUTarget

    @triton.jit
    def ref(x_ptr, i_ptr):
        x = tl.load(x_ptr + tl.arange(0, 16)[:, None] * 32 + tl.arange(0, 32)[None, :])
        tl.store(i_ptr + tl.arange(0, 16), tl.argmax(x, 1))

    src = triton.compiler.ASTSource(fn=ref, signature={"x_ptr": "*fp32", "i_ptr": "*i32"}, constexprs={})
    theirs = triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm["ttgir"]
    theirs = re.sub(r" loc\([^()]*(?:\([^()]*\)[^()]*)*\)", "", theirs)
    (their_region,) = _regions(theirs, "tt.reduce")
    (our_region,) = _regions(_reduce_ttgir(gl.float32, "argmax", odt=gl.int32), "tt.reduce")
    assert sorted(_body_ops(our_region)) == sorted(_body_ops(their_region))


@pytest.mark.parametrize("op,dt,body,elt", [
    ("cumsum", gl.float32, ["arith.addf"], "f32"),
    ("cumsum", gl.int32, ["arith.addi"], "i32"),
    ("cumsum", gl.int8, ["arith.addi"], "i32"),           # Triton sums narrow ints in int32
    ("cumsum", gl.bfloat16, ["arith.addf"], "f32"),       # ... and bf16 in fp32
    ("cumprod", gl.float32, ["arith.mulf"], "f32"),
    ("cummax", gl.uint32, ["arith.maxui"], "i32"),
])
@pytest.mark.parametrize("axis,reverse", [(0, False), (1, True)])
def test_scans_lower_to_tt_scan(op, dt, body, elt, axis, reverse):
    odt = {"i8": gl.int32, "bf16": gl.float32}.get(dt.name, dt)
    text = _ttgir(scan_kernel, PointerArg(odt), PointerArg(dt), OP=op, AXIS=axis, REVERSE=reverse, R=R, C=C)
    (region,) = _regions(text, "tt.scan")
    assert _body_ops(region) == body + ["tt.scan.return"]
    rev = "true" if reverse else "false"
    assert re.search(rf'%scan = "tt.scan"\(%\w+\) <\{{axis = {axis} : i32, reverse = {rev}\}}> \(\{{', text)
    # the scan keeps its input's shape and layout
    assert f"}}) : (tensor<16x32x{elt}, #blocked>) -> tensor<16x32x{elt}, #blocked>" in text


def test_tuple_scan_takes_and_returns_pairs():
    @gluon.jit
    def pair_scan(out_ptr, x_ptr):
        offs = gl.arange(0, 128)
        x = gl.load(x_ptr + offs)
        s, c = gl.associative_scan((x, offs), 0, lambda a, i, b, j: (a + b, i + j))
        gl.store(out_ptr + offs, s * c.to(gl.float32))

    text = _ttgir(pair_scan, PointerArg(gl.float32), PointerArg(gl.float32))
    assert re.search(r'%scan, %scan_1 = "tt.scan"\(%\w+, %\w+\) <\{axis = 0 : i32, reverse = false\}>', text)
    (region,) = _regions(text, "tt.scan")
    assert _body_ops(region) == ["arith.addf", "arith.addi", "tt.scan.return"]


def test_constants_of_a_combine_stay_inside_its_region():
    @gluon.jit
    def scaled(out_ptr, x_ptr):
        offs = gl.arange(0, 128)
        gl.store(out_ptr, gl.reduce(gl.load(x_ptr + offs), 0, lambda a, b: a + 0.5 * b))

    text = _ttgir(scaled, PointerArg(gl.float32), PointerArg(gl.float32))
    (region,) = _regions(text, "tt.reduce")
    assert re.search(r"%\w+ = arith.constant 5.0+e-01 : f32", region), region
    assert "-> f32\n" in text


@gluon.jit
def scan_layout_kernel(out_ptr, LAYOUT: gl.constexpr):
    """A scan of tiles in a slice layout or a WGMMA accumulator, which Triton 3.6 does not scan itself."""
    if LAYOUT == "slice":
        v = gl.arange(0, 64, layout=gl.Layout.slice(1, gl.Layout.blocked([1, 4], [4, 8], [4, 1]))).to(gl.float32)
        s = gl.cumsum(v, 0)
        gl.store(out_ptr + gl.arange(0, 64), s)
    else:
        t = gl.full([64, 64], 1.0, gl.float32, layout=gl.Layout.wgmma((4, 1), 64))
        s = gl.cumsum(t, 1)
        gl.store(out_ptr + gl.arange(0, 64)[:, None] * 64 + gl.arange(0, 64)[None, :], s)


@pytest.mark.parametrize("layout", ["slice", "wgmma"])
def test_scan_of_a_non_blocked_tile_runs_blocked_and_converts_back(layout):
    m = run_passes(scan_layout_kernel.trace(PointerArg(gl.float32), LAYOUT=layout))
    ops = list(m.kernel.walk())
    i = next(k for k, o in enumerate(ops) if o.kind == "scan")
    scan = ops[i]
    assert type(scan.operands[0].type.layout).__name__ == "BlockedLayout"
    assert ops[i - 1].kind == "convert_layout" and ops[i - 1].results[0] is scan.operands[0]
    back = next(o for o in ops[i + 1:] if o.kind == "convert_layout")
    assert back.operands[0] is scan.results[0]
    assert back.results[0].type.layout == ops[i - 1].operands[0].type.layout     # the input's layout again
    ck = scan_layout_kernel.compile(PointerArg(gl.float32), LAYOUT=layout, arch="sm90", num_warps=4)
    assert ck.spills == 0 and sass_instructions(ck.sass()).get("SHFL.UP", 0) >= 1


@pytest.mark.parametrize("mask", ["none", "tail", "range"])
def test_histogram_lowers_to_tt_histogram(mask):
    text = _ttgir(histogram_kernel, PointerArg(gl.int32), PointerArg(gl.int32), ScalarArg(gl.int32), BINS=64,
                  BLOCK=512, MASK=mask)
    ops = r"%\w+" if mask == "none" else r"%\w+, %\w+"
    assert re.search(rf"%hist = tt.histogram {ops} : tensor<512xi32, #blocked\d*> -> tensor<64xi32, #blocked\d*>\n",
                     text), text


def test_ir_verifier_checks_the_ops():
    m = reduce_kernel.trace(PointerArg(gl.float32), PointerArg(gl.float32), OP="absmax", AXIS=1, R=R, C=C)
    (op,) = [o for o in m.kernel.walk() if o.kind == "reduce_fn"]
    op.attrs["axis"] = 2
    with pytest.raises(GluonError, match=r"reduce_fn: attrs\['axis'\] must be in 0..1, got 2"):
        m.verify()
    op.attrs["axis"] = 1
    op.regions[0].ops.pop()              # no yield
    with pytest.raises(GluonError, match="the combine region must end with a yield of f32"):
        m.verify()
    h = histogram_kernel.trace(PointerArg(gl.int32), PointerArg(gl.int32), ScalarArg(gl.int32), BINS=64, BLOCK=512,
                               MASK="none")
    (hop,) = [o for o in h.kernel.walk() if o.kind == "histogram"]
    hop.attrs["num_bins"] = 48
    with pytest.raises(GluonError, match=r"histogram: attrs\['num_bins'\] must be a positive power of two, got 48"):
        h.verify()


# ------------------------------------------------------------------ compile for sm90: the SASS


def _sass(ck) -> dict:
    return sass_instructions(ck.sass())


def test_warp_reduce_compiles_to_butterfly_shuffles():
    ck = reduce_kernel.compile(PointerArg(gl.float32), PointerArg(gl.float32), OP="absmax", AXIS=1, R=R, C=C,
                               arch="sm90", num_warps=4)
    ops = _sass(ck)
    # a row's 32 values: 4 per thread, 8 lanes: three butterfly rounds of |a| max |b|
    assert ops.get("SHFL.BFLY", 0) >= 3 and ops.get("FMNMX", 0) >= 3, sorted(ops.items())
    assert ck.spills == 0


def test_argmax_compiles_and_reduces_across_warps_through_shared_memory():
    ck = reduce_kernel.compile(PointerArg(gl.int32), PointerArg(gl.float32), OP="argmax", AXIS=0, R=R, C=C,
                               arch="sm90", num_warps=4)
    ops = _sass(ck)
    assert ops.get("SHFL.BFLY", 0) >= 2 and ops.get("STS", 0) and ops.get("LDS", 0), sorted(ops.items())


def test_scan_compiles_to_shuffles_up():
    ck = scan_kernel.compile(PointerArg(gl.float32), PointerArg(gl.float32), OP="cumsum", AXIS=1, REVERSE=False,
                             R=R, C=C, arch="sm90", num_warps=4)
    ops = _sass(ck)
    assert ops.get("SHFL.UP", 0) >= 3 and ops.get("FADD", 0) >= 3, sorted(ops.items())


def test_histogram_compiles_to_ballots_and_shared_atomics():
    ck = histogram_kernel.compile(PointerArg(gl.int32), PointerArg(gl.int32), ScalarArg(gl.int32), BINS=64,
                                  BLOCK=512, MASK="range", arch="sm90", num_warps=4)
    ops = _sass(ck)
    assert ops.get("VOTE.ANY", 0) and ops.get("POPC", 0) and ops.get("ATOMS.ADD", 0), sorted(ops.items())


def _gpu_launches(torch):
    """Every (kernel, args, constexprs) the GPU tests below launch, with CPU tensors standing in."""
    f32, i32 = torch.zeros(4 * R * C, dtype=torch.float32), torch.zeros(4 * R * C, dtype=torch.int32)
    out = []
    for axis in (0, 1):
        out += [(reduce_kernel, (f32, f32), {"OP": op, "AXIS": axis}) for op in ("absmax", "prod")]
        out += [(reduce_kernel, (i32, x), {"OP": op, "AXIS": axis}) for op in ARG_OPS for x in (f32, i32)]
    out += [(reduce_kernel, (f32, f32), {"OP": "absmax_keep", "AXIS": 1}),
            (reduce_kernel, (i32, i32), {"OP": "argmax_all", "AXIS": 1})]
    out += [(scan_kernel, (x, x), {"OP": op, "AXIS": axis, "REVERSE": rev})
            for op in SCAN_OPS for axis in (0, 1) for rev in (False, True) for x in (f32, i32)]
    for kern, args, kw in out:
        kw.update(R=R, C=C)
    out += [(histogram_kernel, (i32, i32, 1000), {"BINS": bins, "BLOCK": 1024, "MASK": mask})
            for bins in HIST_BINS for mask in HIST_MASKS]
    return out


def test_the_gpu_tests_kernels_specialize_and_compile_from_torch_tensors():
    """The launch path of every GPU test below, without launching: CPU tensors stand in for CUDA ones."""
    torch = pytest.importorskip("torch")
    for kern, args, kw in _gpu_launches(torch):
        ck = kern[(2,)].compiled(*args, arch="sm90", **kw)
        assert ck.spills == 0 and ck.registers > 0, (kern.name, kw)


# ------------------------------------------------------------------ errors at the user's line


@gluon.jit
def bad_kernel(x_ptr, i_ptr, WHAT: gl.constexpr):
    offs = gl.arange(0, 16)[:, None] * 32 + gl.arange(0, 32)[None, :]
    x = gl.load(x_ptr + offs)
    xi = gl.load(i_ptr + offs)
    if WHAT == "axis":
        gl.reduce(x, 2, _mul)
    elif WHAT == "axis_gpu":
        gl.cumsum(x, axis=gl.program_id(0))
    elif WHAT == "count":
        gl.reduce((x, xi), 1, lambda a, i, b, j: a + b)
    elif WHAT == "dtype":
        gl.associative_scan(xi, 1, lambda a, b: (a + b).to(gl.float32))
    elif WHAT == "tile":
        gl.reduce(x, 1, lambda a, b: gl.zeros([4], gl.float32))
    elif WHAT == "capture":
        y = gl.program_id(0).to(gl.float32)
        gl.reduce(x, 0, lambda a, b: a + b + y)
    elif WHAT == "not_callable":
        gl.reduce(x, 0, 3)
    elif WHAT == "shapes":
        gl.reduce((x, gl.arange(0, 16)[:, None]), 1, lambda a, i, b, j: (a + b, i + j))
    elif WHAT == "load":
        gl.reduce(x, 1, lambda a, b: gl.load(x_ptr) + b)
    elif WHAT == "bins":
        gl.histogram(gl.arange(0, 128), 10)
    elif WHAT == "hist_float":
        gl.histogram(gl.load(x_ptr + gl.arange(0, 128)), 16)
    elif WHAT == "hist_i8":
        gl.histogram(gl.arange(0, 128).to(gl.int8), 16)
    elif WHAT == "hist_mask":
        gl.histogram(gl.arange(0, 128), 16, mask=gl.arange(0, 128))
    elif WHAT == "reverse":
        gl.cumprod(x, 1, reverse=1)


@pytest.mark.parametrize("what,line,msg", [
    ("axis", "gl.reduce(x, 2, _mul)", "reduce: axis=2 is out of range for a rank-2 tile; it must be in -2..1"),
    ("axis_gpu", "gl.cumsum(x, axis=", "cumsum: axis must be a Python int in -2..1"),
    ("count", "lambda a, i, b, j: a + b)", "reduce: combine_fn returned 1 value(s) for 2 input(s); it must return a "
                                           "tuple of 2 values, one per input"),
    ("dtype", "(a + b).to(gl.float32)", "associative_scan: combine_fn's result 0 is f32, but input 0 is i32; return "
                                        "the combined value in its input's dtype (gl.cast(v, gl.int32))"),
    ("tile", "gl.zeros([4]", "reduce: combine_fn's result 0 is a tile tile<4xf32>; it combines scalars"),
    ("capture", "a + b + y)", "reduce: combine_fn uses a GPU value from outside it (made at {HERE}:{y}"),
    ("not_callable", "gl.reduce(x, 0, 3)", "reduce: combine_fn must be a function of 2 GPU scalars, got int 3"),
    ("shapes", "gl.reduce((x, gl.arange", "reduce: the tuple's tiles must have one shape, x[0] is (16, 32) and x[1] "
                                          "is (16, 1)"),
    ("load", "gl.load(x_ptr) + b)", "reduce: combine_fn may only compute on its arguments (arithmetic, comparisons, "
                                    "gl.where, casts), but it traced a load op"),
    ("bins", "gl.histogram(gl.arange(0, 128), 10)", "histogram: num_bins=10 must be a positive power of two (the "
                                                    "result is a tile); use 16 bins"),
    ("hist_float", "gl.histogram(gl.load(", "histogram: x must be a 1-D tile of integers (the bin of each element), "
                                           "got tile<128xf32>"),
    ("hist_i8", "gl.histogram(gl.arange(0, 128).to(gl.int8), 16)", "histogram: x is i8, and Triton 3.6 lowers "
                                                                 "tt.histogram only on 32-bit integers; cast it first"),
    ("hist_mask", "mask=gl.arange(0, 128))", "histogram: mask must be a boolean (i1) tile or scalar, got i32"),
    ("reverse", "reverse=1)", "cumprod: reverse must be True or False (a Python bool), got 1"),
])
def test_bad_arguments_are_gluon_errors_at_the_users_line(what, line, msg):
    with pytest.raises(GluonError) as e:
        bad_kernel.trace(PointerArg(gl.float32), PointerArg(gl.int32), WHAT=what)
    text = str(e.value)
    # an op the combine traced is reported at its own line, in the combine function
    where = "<lambda>" if what in ("capture", "load") else "bad_kernel"
    assert text.startswith(f"{HERE}:{_line_of(bad_kernel, line)} (in {where}): "), text
    assert msg.format(HERE=HERE, y=_line_of(bad_kernel, "y = gl.program_id(0)")) in text, text


# ------------------------------------------------------------------ on the GPU


def _cuda():
    import torch
    return torch, "cuda"


BLOCKS = 37          # programs, each one [R, C] block


def _blocks(x):
    return x.view(BLOCKS, R, C)


@pytest.mark.gpu
@pytest.mark.parametrize("axis", [0, 1])
def test_gpu_reduce_with_custom_combines(axis):
    torch, dev = _cuda()
    x = torch.randn(BLOCKS * R * C, device=dev, dtype=torch.float32) * 3
    out = torch.full((BLOCKS * (C if axis == 0 else R),), float("nan"), device=dev)
    reduce_kernel[(BLOCKS,)](out, x, OP="absmax", AXIS=axis, R=R, C=C)
    torch.cuda.synchronize()
    assert torch.equal(out.view(BLOCKS, -1), _blocks(x).abs().amax(dim=axis + 1))     # max is exact
    g = 1 + 0.05 * torch.randn(BLOCKS * R * C, device=dev, dtype=torch.float32)      # a product near 1
    out.fill_(float("nan"))
    reduce_kernel[(BLOCKS,)](out, g, OP="prod", AXIS=axis, R=R, C=C)
    torch.cuda.synchronize()
    want = _blocks(g).double().prod(dim=axis + 1).float()
    torch.testing.assert_close(out.view(BLOCKS, -1), want, rtol=2e-5, atol=0)


@pytest.mark.gpu
def test_gpu_reduce_keep_dims():
    torch, dev = _cuda()
    x = torch.randn(BLOCKS * R * C, device=dev)
    out = torch.full((BLOCKS * R,), float("nan"), device=dev)
    reduce_kernel[(BLOCKS,)](out, x, OP="absmax_keep", AXIS=1, R=R, C=C)
    torch.cuda.synchronize()
    assert torch.equal(out.view(BLOCKS, R), _blocks(x).abs().amax(dim=2))


def _first_index(x, dim: int, largest: bool):
    """The smallest index of the max (min) along dim: torch.argmax's answer, computed without relying on it."""
    torch = pytest.importorskip("torch")
    best = x.amax(dim=dim, keepdim=True) if largest else x.amin(dim=dim, keepdim=True)
    shape = [1] * x.dim()
    shape[dim] = x.shape[dim]
    idx = torch.arange(x.shape[dim], device=x.device).view(shape).expand_as(x)
    return torch.where(x == best, idx, x.shape[dim]).amin(dim=dim).to(torch.int32)


@pytest.mark.gpu
@pytest.mark.parametrize("op", ARG_OPS)
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_gpu_argmax_argmin_with_ties(op, axis, dtype):
    torch, dev = _cuda()
    # few distinct values: most rows and columns hold their max (min) several times
    x = torch.randint(-4, 5, (BLOCKS * R * C,), device=dev).to(getattr(torch, dtype))
    out = torch.full((BLOCKS * (C if axis == 0 else R),), 0x5A5A5A5A, device=dev, dtype=torch.int32)
    reduce_kernel[(BLOCKS,)](out, x, OP=op, AXIS=axis, R=R, C=C)
    torch.cuda.synchronize()
    got = out.view(BLOCKS, -1)
    if op == "argmax_fast":          # any index of a max
        assert bool(((got >= 0) & (got < x.view(BLOCKS, R, C).shape[axis + 1])).all())
        picked = _blocks(x).gather(axis + 1, got.long().unsqueeze(axis + 1)).squeeze(axis + 1)
        assert torch.equal(picked, _blocks(x).amax(dim=axis + 1))
    else:
        want = _first_index(_blocks(x), axis + 1, op == "argmax")
        assert torch.equal(got, want)
        assert torch.equal(got.long(), getattr(torch, op)(_blocks(x).float(), dim=axis + 1))


@pytest.mark.gpu
def test_gpu_argmax_over_the_whole_tile():
    torch, dev = _cuda()
    x = torch.randint(-50, 50, (BLOCKS * R * C,), device=dev, dtype=torch.int32)
    out = torch.full((BLOCKS,), 0x5A5A5A5A, device=dev, dtype=torch.int32)
    reduce_kernel[(BLOCKS,)](out, x, OP="argmax_all", AXIS=1, R=R, C=C)
    torch.cuda.synchronize()
    assert torch.equal(out, _first_index(x.view(BLOCKS, R * C), 1, True))


@pytest.mark.gpu
@pytest.mark.parametrize("op", SCAN_OPS)
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_gpu_scans_match_torch(op, axis, reverse, dtype):
    torch, dev = _cuda()
    n = BLOCKS * R * C
    if op == "cumprod":            # products that stay in range: near 1 (fp32), -1/1/2 (int32)
        x = (1 + 0.05 * torch.randn(n, device=dev)) if dtype == "float32" else \
            torch.tensor([-1, 1, 2], device=dev)[torch.randint(0, 3, (n,), device=dev)]
    else:
        x = torch.randn(n, device=dev) * 4 if dtype == "float32" else torch.randint(-1000, 1000, (n,), device=dev)
    tdt = getattr(torch, dtype)
    x = x.to(tdt)
    out = torch.full((n,), float("nan"), device=dev) if dtype == "float32" else \
        torch.full((n,), 0x5A5A5A5A, device=dev, dtype=torch.int32)
    scan_kernel[(BLOCKS,)](out, x, OP=op, AXIS=axis, REVERSE=reverse, R=R, C=C)
    torch.cuda.synchronize()
    d = axis + 1
    xb = _blocks(x).flip(d) if reverse else _blocks(x)
    if op == "cumsum":
        want = xb.double().cumsum(d) if dtype == "float32" else xb.cumsum(d, dtype=torch.int32)
    elif op == "cumprod":
        want = xb.double().cumprod(d) if dtype == "float32" else xb.cumprod(d, dtype=torch.int32)
    else:
        want = xb.cummax(d).values
    want = (want.flip(d) if reverse else want).to(tdt)
    got = _blocks(out)
    if dtype == "int32" or op == "cummax":
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("bins", HIST_BINS)
@pytest.mark.parametrize("mask", HIST_MASKS)
def test_gpu_histogram_matches_bincount(bins, mask):
    torch, dev = _cuda()
    block = 1024
    n = 64 * block if mask == "none" else 64 * block + 517
    hi = 2 * bins if mask == "range" else bins
    x = torch.randint(0, hi, (n,), device=dev, dtype=torch.int32)
    hist = torch.zeros(bins, device=dev, dtype=torch.int32)
    histogram_kernel[(-(-n // block),)](hist, x, n, BINS=bins, BLOCK=block, MASK=mask)
    torch.cuda.synchronize()
    kept = x[x < bins].long()
    assert torch.equal(hist, torch.bincount(kept, minlength=bins).to(torch.int32))
    assert int(hist.sum()) == kept.numel()


@gluon.jit
def both_axes_kernel(x_ptr, z_ptr, N: gl.constexpr):
    """z = max over rows + argmax over columns + a custom reduce over rows: three reductions along two
    axes of one tile meet in one elementwise sum."""
    r = gl.arange(0, N)
    t = gl.load(x_ptr + r[:, None] * N + r[None, :])
    s = gl.max(t, 0) + gl.argmax(t, 1).to(gl.float32) + gl.reduce(t, 0, lambda a, b: gl.minimum(a, b))
    gl.store(z_ptr + r, s)


def test_reductions_along_different_axes_meet_through_a_conversion():
    """Their results have different natural layouts (slices of the tile along 0 and 1): each reduces into its
    own slice and a convert_layout brings them together (was a GluonError 'reduce result must be in ...')."""
    t = _ttgir(both_axes_kernel, PointerArg(gl.float32), PointerArg(gl.float32), N=32, arch="sm90", num_warps=4)
    assert t.count("ttg.convert_layout") >= 1 and t.count('"tt.reduce"') == 3
    ck = both_axes_kernel.compile(PointerArg(gl.float32), PointerArg(gl.float32), N=32, arch="sm90", num_warps=4)
    assert ck.spills == 0


@pytest.mark.gpu
def test_reductions_along_different_axes_on_the_gpu():
    torch = pytest.importorskip("torch")
    x = torch.randn(32, 32, device="cuda")
    z = torch.full((32,), float("nan"), device="cuda")
    both_axes_kernel[(1,)](x, z, N=32, num_warps=4)
    want = x.max(0).values + x.argmax(1).float() + x.min(0).values
    assert torch.equal(z, want)
