"""The package stays in rooms a reader can take in: no source module over 400 lines."""

from __future__ import annotations

from pathlib import Path

import vertex_trainer_tools

MAX_LINES = 400


def test_no_source_module_is_over_400_lines():
    root = Path(vertex_trainer_tools.__file__).parent
    long = {
        str(path.relative_to(root)): lines
        for path in sorted(root.rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"over {MAX_LINES} lines: {long}"
