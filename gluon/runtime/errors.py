"""The runtime's one exception."""


class LaunchError(ValueError):
    """A kernel launch (or a launcher's construction) was refused.

    Raised before the GPU is touched; the message names the kernel, the argument and its source
    line (when known), what was passed and what the kernel needs.
    """
