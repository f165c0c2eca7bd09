"""AMD architectures' builtins: `cdna3` (gfx942)."""
from . import cdna3  # noqa: F401
