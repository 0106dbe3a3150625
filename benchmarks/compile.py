"""``polycomp bench compile``: the compile-time suite (see :mod:`.compile_time`)."""
from .compile_time import main

__all__ = ["main"]
