"""polycomp's version (a leaf module: the artifact cache keys on it)."""
__version__ = "0.1.0"
