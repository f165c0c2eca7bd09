"""The package version, at the bottom of the import graph (the compile cache keys on it)."""
__version__ = "0.1.0"
