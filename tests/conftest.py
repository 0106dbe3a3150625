"""Shared test configuration: hypothesis profiles and golden files.

Golden files live under ``tests/golden/``.  ``python -m pytest --update-goldens`` rewrites
every golden that no longer matches (instead of failing) and leaves matching ones alone,
so that ``git diff tests/golden`` shows exactly the intentional changes.
"""
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=15, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=8, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("POLYCOMP_HYPOTHESIS_PROFILE", "ci"))

GOLDEN_DIR = Path(__file__).parent / "golden"


def pytest_addoption(parser):
    parser.addoption("--update-goldens", action="store_true", default=False,
                     help="rewrite the golden files under tests/golden/ that differ from "
                          "what the code now produces, instead of failing")


def pytest_configure(config):
    if config.getoption("--update-goldens"):
        # tests that still read the older switch follow the option too
        os.environ["POLYCOMP_UPDATE_GOLDEN"] = "1"


class Goldens:
    """Golden files under ``tests/golden/`` (paths relative to it).

    ``expected(name, actual, same)`` returns the stored text of ``name`` (stripped).
    With ``--update-goldens``, a file that is missing or for which ``same(stored)`` is
    false (default: the texts differ) is first rewritten with ``actual``, so that the
    comparison that follows passes; without it, a missing file fails the test with a
    hint to run the update.
    """

    def __init__(self, update: bool, root: Path = GOLDEN_DIR):
        self.update, self.root = update, root

    def path(self, name: str) -> Path:
        return self.root / name

    def expected(self, name: str, actual: str,
                 same: Callable[[str], bool] | None = None) -> str:
        if same is None:
            def same(stored: str) -> bool:
                return stored == actual.strip()
        path = self.path(name)
        stored = path.read_text() if path.exists() else None
        if self.update and (stored is None or not same(stored.strip())):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(actual.rstrip("\n") + "\n")
            stored = path.read_text()
        if stored is None:
            pytest.fail(f"golden file tests/golden/{name} is missing; run "
                        f"`python -m pytest --update-goldens` and review the new file")
        return stored.strip()


@pytest.fixture(scope="session")
def goldens(request) -> Goldens:
    return Goldens(request.config.getoption("--update-goldens"))
