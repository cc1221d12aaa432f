"""How `make test` spreads the suite over pytest-xdist's workers (`-n 2 --dist loadgroup`):

* each module is one unit of work, run whole by one worker, so its module fixtures (a server, a
  stage) start once; modules that share something costlier say so with one
  `pytest.mark.xdist_group(name)` and run as one unit;
* the units start longest first, by the seconds each module took in a serial run
  (tests/durations.json), so that no long module is left to start last while the other worker
  idles. A module missing there counts as long (it is new: better early than last).

Refresh the durations from a serial run's JUnit report:
`pytest --junitxml=/tmp/serial.xml && python -m tests.scheduling /tmp/serial.xml`.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

import pytest

__all__ = ["group_of", "longest_first"]

DURATIONS = Path(__file__).with_name("durations.json")
GROUP_MARK = "xdist_group"


def _module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def group_of(item: pytest.Item) -> str:
    """The unit of work an item belongs to: its module's group, or its module."""
    mark = item.get_closest_marker(GROUP_MARK)
    if mark is not None:
        return str(mark.args[0] if mark.args else mark.kwargs["name"])
    return _module_of(item)


def longest_first(items: list[pytest.Item]) -> None:
    """Mark each item with its unit of work and order the units longest first (in place; a
    unit's own items keep their order)."""
    seconds: dict[str, float] = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    unknown = max(seconds.values(), default=0.0)
    groups = [group_of(item) for item in items]
    modules_of: dict[str, set[str]] = {}
    for item, group in zip(items, groups, strict=True):
        modules_of.setdefault(group, set()).add(_module_of(item))
        if item.get_closest_marker(GROUP_MARK) is None:
            item.add_marker(pytest.mark.xdist_group(group))
    weight = {
        group: sum(seconds.get(module, unknown) for module in modules)
        for group, modules in modules_of.items()
    }
    order = {id(item): (-weight[group], group) for item, group in zip(items, groups, strict=True)}
    items.sort(key=lambda item: order[id(item)])


def _durations(report: Path) -> dict[str, float]:
    """Seconds per module (set-up, call and teardown) in a JUnit report."""
    total: defaultdict[str, float] = defaultdict(float)
    for case in ElementTree.parse(report).iter("testcase"):
        module = case.get("classname", "").split(".")
        # classname: tests.test_x or tests.test_x.TestClass
        path = "/".join(module[:2]) + ".py" if len(module) >= 2 else ""
        total[path] += float(case.get("time", 0))
    return {module: round(s, 1) for module, s in sorted(total.items()) if module}


if __name__ == "__main__":
    DURATIONS.write_text(json.dumps(_durations(Path(sys.argv[1])), indent=1) + "\n")
