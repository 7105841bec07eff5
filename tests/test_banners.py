"""Every file of a baked project's ``trainer/`` says in its docstring, in one wording, what is
the user's to change there (``YOURS TO CHANGE:``); inside a function that mixes the user's part
with what the run relies on, ``# --- yours to change ---`` ... ``# --- end ---`` marks it."""

from __future__ import annotations

import ast

import pytest

from conftest import BASE_IMAGES, FRAMEWORKS

BANNER = "YOURS TO CHANGE:"
OTHER_WORDINGS = ("YOU MAY MODIFY", "YOU MAY CHANGE", "You should not need to change this file.")
START, END = "# --- yours to change ---", "# --- end ---"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_trainer_file_has_the_one_banner(baked, framework):
    project = baked({"framework": framework, "base_image": BASE_IMAGES[0]})
    files = sorted((project / "trainer").glob("*.py"))
    assert len(files) >= 8, files
    for path in files:
        text = path.read_text()
        docstring = ast.get_docstring(ast.parse(text)) or ""
        assert BANNER in docstring, f"{path.name}: no {BANNER} in its docstring"
        for wording in OTHER_WORDINGS:
            assert wording not in text, f"{path.name}: {wording!r}"
        lines = [line.strip() for line in text.splitlines()]
        regions = [line for line in lines if line.startswith((START, END))]
        opened = [line.startswith(START) for line in regions]
        assert opened == [True, False] * (len(regions) // 2), f"{path.name}: {regions}"
