"""Kernel templates shipped with gluon, written in the DSL (specs and examples build on these).

They import the DSL and the JIT (gluon.language, gluon.jit, gluon.arch, gluon.types, gluon.dtypes,
gluon.ir), never the tuner nor the package root; their tuner adapters live in gluon/tuning/templates/."""
