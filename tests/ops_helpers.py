"""Helpers shared by the operator-library tests: compiled kernels cached per pytest
session (CUDA compilation of the larger operators takes seconds, and both the
simulation and the nvcc tests need it)."""
from polycomp.driver import build, compile_kernel, interpret
from polycomp.frontend.ops import OPS

_COMPILED: dict = {}
_RUNNERS: dict = {}


def compiled(name: str, dtype: str, target: str, options: dict | None = None):
    """``compile_kernel(OPS[name].kernel(dtype), target, options)``, cached."""
    key = (name, dtype, target, tuple(sorted((options or {}).items())))
    if key not in _COMPILED:
        _COMPILED[key] = compile_kernel(OPS[name].kernel(dtype), target, options)
    return _COMPILED[key]


def runner(name: str, dtype: str, path: str):
    """A callable running op ``name`` for ``dtype`` along ``path``: ``"interpreter"``
    (program-order IR), ``"c"`` (gcc + ctypes) or ``"cuda-ir"`` (the CUDA pipeline's IR
    through :func:`polycomp.driver.interpret`)."""
    key = (name, dtype, path)
    if key not in _RUNNERS:
        if path == "interpreter":
            ck = compiled(name, dtype, "c", {"parallel": False})
            _RUNNERS[key] = lambda *xs: interpret(ck, *xs)
        elif path == "c":
            _RUNNERS[key] = build(OPS[name].kernel(dtype), "c")
        elif path == "cuda-ir":
            ck = compiled(name, dtype, "cuda")
            _RUNNERS[key] = lambda *xs: interpret(ck, *xs)
        else:
            raise ValueError(path)
    return _RUNNERS[key]
