"""NVIDIA architectures' builtins, one module per generation: `ampere` (SM80), `hopper` (SM90),
`blackwell` (SM100), and `ptx` (inline PTX templates, every NVIDIA arch)."""
from . import ampere, blackwell, hopper, ptx  # noqa: F401
