"""The configs the attention GPU tests run, checked without a GPU: each of them on top of the pick it overrides
at every (head dim, key length, causal) its test calls, so a config the checks refuse (HOLD_TURNS on the short
causal pick, which has no ping-pong) fails here and not after a device call."""
import pytest

import test_attention_gpu as gpu_cases
from gluon.kernels.attention_sm90.config import choose_config, to_config

KEY_LENGTHS = (1111, 700, 2048)         # test_configs' and _check_variant's
TESTS = ("test_configs", "test_p_through_shared_memory", "test_pinned_softmax", "test_serial_and_held_turns",
         "test_row_sums_on_the_tensor_cores", "test_tree_max", "test_joint_wait")


def _cases():
    for name in TESTS:
        marks = {m.args[0]: m.args[1] for m in getattr(gpu_cases, name).pytestmark if m.name == "parametrize"}
        if "D,config" in marks:
            yield from ((name, D, config) for D, config in marks["D,config"])
        else:
            yield from ((name, D, config) for D in marks["D"] for config in marks["config"])


@pytest.mark.parametrize("name,D,config", list(_cases()))
def test_gpu_test_configs_are_valid(name, D, config):
    for skv in KEY_LENGTHS:
        for causal in (False, True):
            to_config(config, choose_config(D, skv, causal))
