"""A fresh machine's `make install` resolves each variant's requirements without backtracking.

pip's resolver backtracks when the newest release of a dependency conflicts with another pin:
the Keras project's TensorFlow keeps protobuf < 5, and pip used to download 48 grpcio-status
and 15 google-api-core releases (minutes) before it found ones that accept it. The bounds in the
generated requirements-dev.txt name them; this reads pip's output and report of the `make
install` that `make demo` runs in a fresh venv (its own pip; conftest's ``fresh_demo``, which
tests/test_generated.py runs its tiers in) and fails on any backtracking. Needs the package index.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from conftest import FRESH_DEMO_FRAMEWORKS

pytestmark = pytest.mark.index

BACKTRACKING = "pip is looking at multiple versions"
# "Downloading grpcio_status-1.62.3-py3-none-any.whl" or "Using cached ...": a release fetched
# from the index (a local find-links file is "Processing", once for each package that needs it).
FETCHED = re.compile(r"^\s*(?:Downloading|Using cached) (?:\S*/)?([A-Za-z0-9_.]+?)-\d")


@pytest.mark.parametrize("framework", FRESH_DEMO_FRAMEWORKS)
def test_make_install_resolves_without_backtracking(fresh_demo, framework):
    demo = fresh_demo(framework)
    output = demo.result.stdout + demo.result.stderr
    # pip's part of the demo's output: up to its summary line, before the training logs.
    installed = re.search(r"^Successfully installed .*$", output, re.M)
    assert installed, "make install did not finish:\n" + output[-4000:]
    pip_output = output[: installed.end()]
    report = json.loads(demo.pip_report.read_text())
    assert report["install"], "pip's report lists nothing installed"
    fetched = Counter(
        match.group(1).lower().replace("_", "-")
        for line in pip_output.splitlines()
        if (match := FETCHED.match(line))
    )
    several = {name: count for name, count in fetched.items() if count > 1}
    assert BACKTRACKING not in output and several == {}, several or pip_output[-4000:]
