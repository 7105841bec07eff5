"""Each variant declares what its trainer is in one typed object, ``SPEC`` of ``trainer/spec.py``
(``vertex_trainer_runtime.spec.TrainerSpec``): read here as the tools read it, in a Python that
imports no ML framework, and held against the baked project (vertex.yaml's study, the functions
it names)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import BASE_IMAGES, FRAMEWORKS, TEMPLATE

# A function a declaration names in the runtime (a framework's run) is the runtime's source's.
RUNTIME_SOURCE = TEMPLATE / "vertex-trainer-runtime" / "src"
# Run in the baked project: what the declaration says, and whether a framework came with it.
READ = """
import json, sys
from vertex_trainer_runtime import spec
from trainer.spec import SPEC

parsed = SPEC.parse([])
print(json.dumps({
    "type": type(SPEC).__module__ + "." + type(SPEC).__qualname__,
    "problems": spec.problems(SPEC),
    "metric": [SPEC.metric, SPEC.goal],
    "reported": list(SPEC.reported_metric([])),
    "flags": sorted(o for a in SPEC.parser()._actions for o in a.option_strings),
    "shared": type(parsed.shared).__name__,
    "functions": {name: getattr(SPEC, name) for name in spec.FUNCTIONS},
    "optional": {name: getattr(SPEC, name) for name in spec.OPTIONAL_FUNCTIONS
                 if getattr(SPEC, name) is not None},
    "export_file": SPEC.export_file,
    "heavy": sorted({"tensorflow", "keras", "torch", "transformers", "xgboost", "numpy",
                     "pandas", "datasets"} & set(sys.modules)),
}))
"""


@pytest.fixture(scope="module", params=FRAMEWORKS)
def declared(request, baked):
    project = baked({"framework": request.param, "base_image": BASE_IMAGES[0]})
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(project), *sys.path])
    run = subprocess.run(
        [sys.executable, "-c", READ], cwd=project, env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    return project, json.loads(run.stdout)


def test_the_declaration_is_a_trainer_spec_read_without_a_framework(declared):
    _, spec = declared
    assert spec["type"] == "vertex_trainer_runtime.spec.TrainerSpec"
    assert spec["problems"] == []
    assert spec["heavy"] == []
    assert spec["shared"] == "SharedFlags"


def test_the_metric_is_the_studys(declared):
    project, spec = declared
    study = yaml.safe_load((project / "vertex.yaml").read_text())["hpt"]
    assert spec["metric"] == [study["metric"]["id"], study["metric"]["goal"]]
    assert spec["reported"] == spec["metric"]  # with the default flags
    for parameter in study["parameters"]:
        assert "--" + parameter.replace("_", "-") in spec["flags"], parameter


def test_the_named_functions_are_functions_of_the_baked_trainer(declared):
    """Of the trainer, or of the runtime (a framework's run in its fixed order)."""
    project, spec = declared
    for field, reference in {**spec["functions"], **spec["optional"]}.items():
        module, _, name = reference.partition(":")
        root = RUNTIME_SOURCE if module.startswith("vertex_trainer_runtime.") else project
        path = root.joinpath(*module.split(".")).with_suffix(".py")
        assert path.is_file(), f"{field}: {reference}: no {path.name}"
        tree = ast.parse(path.read_text())
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert name in defined, f"{field}: {reference}: no function {name} in {path.name}"


def test_no_trainer_file_restricts_its_import_style(declared):
    project, _ = declared
    for path in sorted((project / "trainer").glob("*.py")):
        assert "No ``from __future__" not in path.read_text(), path.name
    for name in ("flags.py", "spec.py"):
        assert "from __future__ import annotations" in (project / "trainer" / name).read_text()
