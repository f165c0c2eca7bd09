"""The benchmark scripts' argument parsing, on the CPU (the benchmarks themselves need a GPU)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.gemm import _kernels, _parse_configs, _split_names  # noqa: E402


def test_configs_parse_ints_booleans_and_strings():
    assert _parse_configs(";SPLIT_WGS=False,BLOCK_N=128,EPILOGUE=direct;PINGPONG=True") == [
        {}, {"SPLIT_WGS": False, "BLOCK_N": 128, "EPILOGUE": "direct"}, {"PINGPONG": True}]


def test_kernel_names_carry_their_configs():
    names = _split_names("ws,ws[BLOCK_N=128,STAGES=5],tile")
    assert names == ["ws", "ws[BLOCK_N=128,STAGES=5]", "tile"]
    ks = _kernels(_parse_configs(";BLOCK_N=128,STAGES=5"))
    assert set(ks) == {"tile", "ws", "ws[BLOCK_N=128,STAGES=5]"}
