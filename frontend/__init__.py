"""Front ends: the @tensor_expr DSL, its operator library, and the C SCoP reader."""
from .dsl import *  # noqa: F401,F403
from .dsl import __all__  # noqa: F401
