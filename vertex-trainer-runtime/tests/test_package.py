"""The package as it reaches Vertex: its core imports with the standard library alone (it runs in
every training image, whatever else is installed), and it is released with the tools at one
version, which the tools pin."""

from __future__ import annotations

import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import vertex_trainer_runtime

SRC = Path(vertex_trainer_runtime.__file__).resolve().parent.parent
REPOSITORY = SRC.parent.parent
MODULES = list(pkgutil.iter_modules(vertex_trainer_runtime.__path__))
CORE = sorted(module.name for module in MODULES if not module.ispkg)
# Framework subpackages (as ray.train.torch): a trainer of that framework imports one; the
# framework's own tests of them (test_<framework>_*.py) run in a baked project's environment.
FRAMEWORKS = {"keras", "torch", "xgboost"}

# Run with -S -I (no site-packages, no user site, no PYTHONPATH): only the standard library and
# the package's own folder can be imported. hptune and tracking import their extras lazily.
IMPORT_ALL = """
import importlib, sys
sys.path.insert(0, {src!r})
for name in {modules!r}:
    importlib.import_module("vertex_trainer_runtime." + name)
allowed = set(sys.stdlib_module_names) | {{"__main__", "vertex_trainer_runtime"}}
outside = sorted({{m.split(".")[0] for m in sys.modules}} - allowed)
assert not outside, outside
print(len({modules!r}))
"""


def test_every_module_imports_with_the_standard_library_alone():
    assert {"checkpoints", "cli", "context", "runtime", "vertex_env"} <= set(CORE)
    code = IMPORT_ALL.format(src=str(SRC), modules=CORE)
    result = subprocess.run(
        [sys.executable, "-S", "-I", "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(len(CORE))


def test_only_the_framework_subpackages_import_a_framework():
    assert {module.name for module in MODULES if module.ispkg} == FRAMEWORKS


def test_the_runtime_the_tools_and_the_template_share_one_version():
    version = vertex_trainer_runtime.__version__
    tools_init = REPOSITORY / "vertex-trainer-tools/src/vertex_trainer_tools/__init__.py"
    tools_version = re.search(r'__version__ = "(.+)"', tools_init.read_text()).group(1)
    assert tools_version == version
    pyproject = (REPOSITORY / "vertex-trainer-tools/pyproject.toml").read_text()
    assert f'"vertex-trainer-runtime=={version}"' in pyproject, "the tools pin this version"
    cookiecutter = (REPOSITORY / "cookiecutter.json").read_text()
    assert f'"_tools_version": "{version}"' in cookiecutter
