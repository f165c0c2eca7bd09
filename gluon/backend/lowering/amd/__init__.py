"""Lowering rules of the AMD-only ops, one module per architecture that introduced them."""
