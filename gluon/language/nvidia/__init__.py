"""NVIDIA architectures' builtins, one module per generation: `ampere` (SM80), `hopper` (SM90),
`blackwell` (SM100)."""
from . import ampere, blackwell, hopper  # noqa: F401
