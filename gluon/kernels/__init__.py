"""Kernel templates shipped with gluon, written in the DSL (specs and examples build on these)."""
