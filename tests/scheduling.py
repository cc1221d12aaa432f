"""How `make test` spreads the suite over pytest-xdist's workers (`-n 2`):

* each module is one unit of work, run whole by one worker, so its module fixtures (a server, a
  stage) start once; modules that share something costlier are one unit together (GROUPS);
* the units start longest first, by the seconds each module took in a run of the suite
  (tests/durations.json), so that no long module is left to start last while the other worker
  idles. A module missing there counts as long (it is new: better early than last).

xdist's own `--dist loadgroup` would read `xdist_group` marks, but it renames the tests to do it,
which pytest 9 no longer lets a plugin do; this scheduler (conftest's
`pytest_xdist_make_scheduler`) groups by the tests' ids instead.

Refresh the durations from a run's JUnit report:
`python -m tests.scheduling .cache/test-report.xml` after `make test` (whose main phase writes
that report), or with any `pytest --junitxml` report.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

__all__ = ["N8N_ASSISTANT_GROUP", "UnitScheduling", "longest_first", "unit_of"]

DURATIONS = Path(__file__).with_name("durations.json")

# The modules that hold conversations with n8n's own assistant share one such n8n
# (tests/sandbox_api_fixtures.py: n8n_assistant).
N8N_ASSISTANT_GROUP = "n8n-with-its-assistant"
GROUPS = {
    "tests/test_differential.py": N8N_ASSISTANT_GROUP,
    "tests/test_n8n_bridge_reference.py": N8N_ASSISTANT_GROUP,
    "tests/test_sandbox_api_e2e.py": N8N_ASSISTANT_GROUP,
}


def _module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its module's group, or its module."""
    module = _module_of(nodeid)
    return GROUPS.get(module, module)


def longest_first(items: list[pytest.Item]) -> None:
    """Order the units of work longest first (in place; a unit's own tests keep their order).
    Every worker collects the same order, which the scheduler hands out front to back."""
    seconds: dict[str, float] = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    unknown = max(seconds.values(), default=0.0)
    modules: dict[str, set[str]] = defaultdict(set)
    for item in items:
        modules[unit_of(item.nodeid)].add(_module_of(item.nodeid))
    weight = {
        unit: sum(seconds.get(module, unknown) for module in members)
        for unit, members in modules.items()
    }
    items.sort(key=lambda item: (-weight[unit_of(item.nodeid)], unit_of(item.nodeid)))


class UnitScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist has no types
    """xdist's scope scheduling (a scope goes whole to one worker, scopes in the order
    collected) with our units as the scopes."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)


def _durations(report: Path) -> dict[str, float]:
    """Seconds per module (set-up, call and teardown) in a JUnit report."""
    total: defaultdict[str, float] = defaultdict(float)
    for case in ElementTree.parse(report).iter("testcase"):
        # classname: tests.test_x, or tests.test_x.TestClass
        parts = case.get("classname", "").split(".")
        if len(parts) >= 2:
            total["/".join(parts[:2]) + ".py"] += float(case.get("time", 0))
    return {module: round(s, 1) for module, s in sorted(total.items())}


if __name__ == "__main__":
    DURATIONS.write_text(json.dumps(_durations(Path(sys.argv[1])), indent=1) + "\n")
