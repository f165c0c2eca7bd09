"""The package version, in a module of its own so that subpackages (gluon.tuning.measure records it in
every results row) can read it without importing the package root."""
__version__ = "0.1.0"
