"""polycomp: a polyhedral tensor compiler built on islpy."""
from .errors import *  # noqa: F401,F403
from .frontend.dsl import (sym, Tensor, tensor_expr, compute, reduce_axis, sum, max, min,  # noqa: F401
                           exp, log, sqrt, rsqrt, tanh, erf, abs, sigmoid, select, where,
                           eq, ne, cast, Kernel)

__version__ = "0.1.0"
