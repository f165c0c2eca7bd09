"""Lowering rules of the NVIDIA-only ops, one module per architecture that introduced them."""
