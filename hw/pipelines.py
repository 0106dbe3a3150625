"""Dispatch to the per-target pipelines (:mod:`polycomp.hw.cpu.pipeline`,
:mod:`polycomp.hw.cuda.pipeline`).

A pipeline module provides ``schedule_passes(target, options)`` (passes run after the
initial schedule), ``ir_passes(func, target, options)`` (IR the interpreter can still
run) and ``codegen(func, target, options) -> (final IR, source)``.
"""
from __future__ import annotations

from polycomp.errors import TargetError
from polycomp.scheduler.isl_scheduler import IslSchedulerPass
from polycomp.scheduler.program_order import ProgramOrderPass

from .target import Target


def _module(target: Target):
    if target.kind == "cuda":
        from .cuda import pipeline
        return pipeline
    if target.kind == "c":
        from .cpu import pipeline
        return pipeline
    raise TargetError(f"no pipeline for target kind {target.kind!r}")


def schedule_passes(target: Target, options: dict) -> list:
    passes = [ProgramOrderPass()]
    if options.get("isl_scheduler"):
        passes.append(IslSchedulerPass())
    return passes + _module(target).schedule_passes(target, options)


def ir_pipeline(func, target: Target, options: dict):
    return _module(target).ir_passes(func, target, options)


def codegen(func, target: Target, options: dict):
    return _module(target).codegen(func, target, options)
