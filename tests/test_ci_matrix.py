"""The template CI's matrix runs the whole suite: the packages job and, for every variant, its
template tests whole or in parts that ``make test-variant PART=`` selects and that together are
all of them (image + rest, or image + project + tiers). A variant added to cookiecutter.json but
not to the matrix fails here."""

from __future__ import annotations

import yaml

from conftest import FRAMEWORKS, TEMPLATE

# The PART values of the Makefile that together select all of a variant's tests.
PARTITIONS = (["all"], ["image", "rest"], ["image", "project", "tiers"])


def matrix_commands() -> list[dict[str, str]]:
    workflow = yaml.safe_load((TEMPLATE / ".github" / "workflows" / "ci.yml").read_text())
    commands = []
    for entry in workflow["jobs"]["test"]["strategy"]["matrix"]["include"]:
        target, *assignments = entry["make"].split()
        commands.append({"target": target, **dict(a.split("=", 1) for a in assignments)})
    return commands


def test_the_matrix_runs_the_packages_and_every_variant_whole():
    commands = matrix_commands()
    assert [c for c in commands if c["target"] == "test-packages"] == [{"target": "test-packages"}]
    parts: dict[str, list[str]] = {}
    for command in commands:
        if command["target"] == "test-variant":
            parts.setdefault(command["FRAMEWORK"], []).append(command.get("PART", "all"))
    assert sorted(parts) == sorted(FRAMEWORKS)
    for framework, framework_parts in parts.items():
        assert sorted(framework_parts) in PARTITIONS, framework
