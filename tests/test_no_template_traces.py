"""A baked project holds no trace of how the template is built: no references to the template's
own notes, benchmarks, per-framework folders or hooks, no build markers (unrendered Jinja:
test_bake.py); and no Python file over 300 lines."""

from __future__ import annotations

import pytest

from conftest import FRAMEWORKS, bake

# What a user of the generated project cannot look up or does not need to see.
TRACES = {
    "vertex-contract": "the template's notes on Vertex (vertex-contract.md)",
    "DESIGN.md": "the template's design notes",
    "bench/": "the template's benchmarks folder",
    "framework sections": "a README marker of the template",
    "variants/": "the template's per-framework folders",
    "pre_gen_project": "the template's hooks",
    "post_gen_project": "the template's hooks",
}
MAX_LINES = 300


def text_files(project):
    for path in sorted(project.rglob("*")):
        if path.is_file() and ".git" not in path.parts:
            try:
                yield path, path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_no_template_traces(tmp_path, framework):
    project = bake(tmp_path, framework=framework)
    found = []
    for path, text in text_files(project):
        relative = path.relative_to(project)
        for number, line in enumerate(text.splitlines(), 1):
            for trace, what in TRACES.items():
                if trace in line:
                    found.append(f"{relative}:{number}: {trace!r} ({what}): {line.strip()}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_no_python_file_is_over_300_lines(tmp_path, framework):
    project = bake(tmp_path, framework=framework)
    long = {
        str(path.relative_to(project)): len(text.splitlines())
        for path, text in text_files(project)
        if path.suffix == ".py" and len(text.splitlines()) > MAX_LINES
    }
    assert not long, f"over {MAX_LINES} lines: {long}"
