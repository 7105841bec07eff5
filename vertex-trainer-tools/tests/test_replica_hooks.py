"""The drills' test hooks (``replica_hooks``): loaded as ``sitecustomize`` by a process with their
folder on its path, they patch a module once it is imported and only when their variable is
set; local-run puts them on every replica's path when ``LOCAL_RUN_HOOKS`` names them."""

from __future__ import annotations

import os
import subprocess
import sys

from vertex_trainer_tools.local_run import launcher
from vertex_trainer_tools.replica_hooks import drill_hooks
from vertex_trainer_tools.testing import HOOKS_DIR, with_drill_hooks

CHECK = """
import sys
from vertex_trainer_runtime import tracking
print(getattr(tracking.Tracker._start, "drill_hook", False), "drill_hooks" in sys.modules)
"""


def hooked(**variables: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in (drill_hooks.ENDPOINT_ENV,)}
    env = with_drill_hooks({**env, **variables})
    result = subprocess.run(
        [sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def test_a_hook_patches_its_module_on_import_only_when_its_variable_is_set():
    assert hooked() == "False True"
    assert hooked(**{drill_hooks.ENDPOINT_ENV: "http://127.0.0.1:9"}) == "True True"


def test_local_run_puts_the_hooks_last_on_a_process_replicas_path():
    base = {"PYTHONPATH": "/first", launcher.HOOKS_ENV: str(HOOKS_DIR)}
    env = launcher.process_env({}, None, base=base)
    assert env["PYTHONPATH"] == os.pathsep.join(["/first", str(HOOKS_DIR)])
    assert "PYTHONPATH" not in launcher.process_env({}, None, base={})
