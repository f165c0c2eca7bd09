"""Compiler passes over Gluon IR, run in order by gluon.jit (see PIPELINE there)."""
