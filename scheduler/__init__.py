"""Schedule-tree passes (one per file) and the pass manager that runs them per target."""
from .pass_base import Pass, ScheduleContext  # noqa: F401
from .pass_manager import PassManager, PassRecord  # noqa: F401
