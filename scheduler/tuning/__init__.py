"""Auto-tuning: search spaces generated from a target's data (:mod:`.space`)."""
from .space import CpuPoint, GemmShape, cpu_space

__all__ = ["CpuPoint", "GemmShape", "cpu_space"]
