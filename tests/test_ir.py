"""The IR: builder, verifier (types, dominance, regions), printer."""
import pytest

from gluon import SM90, DType
from gluon import ir
from gluon.types import Layout


def _kernel():
    body = ir.Region()
    k = ir.Kernel("k", [], SM90, 4, body)
    n = ir.Value(ir.I32, "n")
    k.params.append(ir.Param("n", n))
    return k, ir.Builder(body), n


def test_every_op_kind_is_documented():
    assert len(ir.OPS) >= 20
    for kind, d in ir.OPS.items():
        assert d.doc and d.family, kind


def test_for_loop_with_carried_value_verifies_and_prints():
    k, b, n = _kernel()
    c0 = b.create("constant", [], [ir.I32], {"value": 0}).result
    c1 = b.create("constant", [], [ir.I32], {"value": 1}).result
    loop = b.create("for", [c0, n, c1, c0], [ir.I32], regions=[ir.Region()], names=["total"])
    body = loop.regions[0]
    i = body.add_arg(ir.I32, "i")
    acc = body.add_arg(ir.I32, "acc")
    b.push(body)
    s = b.create("binary", [acc, i], [ir.I32], {"op": "add"}).result
    b.create("yield", [s])
    b.pop()
    ir.Module([k]).verify()
    text = ir.Module([k]).pretty()
    assert "kernel @k(%n: i32) arch=sm90 num_warps=4 {" in text
    assert "%total = for %0, %n, %1, %0 : i32 (%i: i32, %acc: i32) {" in text
    assert "%2 = binary %acc, %i" in text


def test_use_outside_defining_region_is_a_dominance_error():
    k, b, n = _kernel()
    c0 = b.create("constant", [], [ir.I32], {"value": 0}).result
    loop = b.create("for", [c0, n, n], [], regions=[ir.Region()])
    body = loop.regions[0]
    body.add_arg(ir.I32, "i")
    b.push(body)
    inner = b.create("constant", [], [ir.I32], {"value": 7}, names=["inner"]).result
    b.create("yield", [])
    b.pop()
    b.loc = ir.Loc("kern.py", 12)
    b.create("binary", [inner, n], [ir.I32], {"op": "add"})
    with pytest.raises(ir.IRVerificationError) as e:
        ir.Module([k]).verify()
    assert "kern.py:12" in str(e.value) and "%inner" in str(e.value)


def test_yield_types_must_match_inits():
    k, b, n = _kernel()
    loop = b.create("for", [n, n, n, n], [ir.I32], regions=[ir.Region()])
    body = loop.regions[0]
    body.add_arg(ir.I32, "i")
    body.add_arg(ir.I32, "x")
    b.push(body)
    f = b.create("constant", [], [ir.F32], {"value": 1.0}).result
    b.create("yield", [f])
    b.pop()
    with pytest.raises(ir.IRVerificationError, match="yielded types"):
        ir.Module([k]).verify()


def test_tiles_need_power_of_two_shapes_and_layouts_when_required():
    k, b, _ = _kernel()
    b.create("arange", [], [ir.TileType(DType.i32, (96,), None)], {"start": 0, "end": 96})
    with pytest.raises(ir.IRVerificationError, match="power-of-two"):
        ir.Module([k]).verify()
    k, b, _ = _kernel()
    b.create("arange", [], [ir.TileType(DType.i32, (128,), None)], {"start": 0, "end": 128})
    ir.Module([k]).verify()
    with pytest.raises(ir.IRVerificationError, match="no register layout"):
        ir.Module([k]).verify(require_layouts=True)
    k, b, _ = _kernel()
    b.create("arange", [], [ir.TileType(DType.i32, (128,), Layout.blocked([1, 1], [4, 8], [4, 1]))],
             {"start": 0, "end": 128})
    with pytest.raises(ir.IRVerificationError, match="rank 2"):
        ir.Module([k]).verify()


def test_dot_verifier_messages():
    k, b, _ = _kernel()
    a = b.create("constant", [], [ir.TileType(DType.f16, (64, 32), None)], {"value": 1.0}).result
    bb = b.create("constant", [], [ir.TileType(DType.f16, (16, 64), None)], {"value": 1.0}).result
    acc = b.create("constant", [], [ir.TileType(DType.f32, (64, 64), None)], {"value": 0.0}).result
    op = b.create("mma", [a, bb, acc], [acc.type])
    assert "inner dimensions differ" in ir.OPS["mma"].verify(op)
