"""polycomp: a polyhedral tensor compiler built on islpy."""
from .errors import *  # noqa: F401,F403
from .frontend.dsl import (  # noqa: F401
    Kernel,
    Tensor,
    abs,
    cast,
    compute,
    eq,
    erf,
    exp,
    log,
    max,
    min,
    ne,
    reduce_axis,
    rsqrt,
    select,
    sigmoid,
    sqrt,
    sum,
    sym,
    tanh,
    tensor_expr,
    where,
)
from .version import __version__  # noqa: F401
