"""Backends: lowering of gluon IR to Triton TTGIR and compilation of TTGIR to GPU binaries."""
