"""Benchmark suites (``polycomp bench <suite>`` runs ``polycomp.benchmarks.<suite>.main``).

Speed is reported as ratios against a peer measured in the same run, never asserted in
tests.
"""
