"""Keep only the chosen framework's modules, and record where the tools package comes from.

The template keeps each framework's plain-Python modules, tests, requirements and Dockerfile
under ``variants/<framework>/``; they are copied over the project root here, so the generated
project contains one framework and no trace of the others. The answers were checked before
generation (``pre_gen_project.py``); ``vertex-tools check`` applies the full config rules at the
first ``make`` that needs them.

``make install`` installs ``vertex-trainer-tools`` at the version requirements-dev.txt pins,
from the source written into the Makefile's ``TOOLS_SOURCE`` here:
- baked from a local checkout (``make demo``, the template's tests): that checkout's package;
- baked from the hosted template at a released version: empty, so pip takes the release
  (or a wheel from ``PIP_FIND_LINKS`` offline);
- baked from a commit with no release yet: the package's folder in the template repository at
  that commit (``git+URL@COMMIT#subdirectory=vertex-trainer-tools``).
"""

import json
import os
import re
import shutil
import subprocess
import sys

CONTEXT = json.loads(
    r"""{
    "framework": {{ cookiecutter.framework | tojson }},
    "template": {{ cookiecutter._template | tojson }},
    "repo_dir": {{ cookiecutter._repo_dir | tojson }}
}"""
)
VARIANTS = "variants"
TOOLS_FOLDER = "vertex-trainer-tools"
MAKEFILE = "Makefile"
REQUIREMENTS_DEV = "requirements-dev.txt"


def install_variant(framework: str) -> None:
    source = os.path.join(VARIANTS, framework)
    for directory, _, names in os.walk(source):
        target_directory = os.path.join(".", os.path.relpath(directory, source))
        os.makedirs(target_directory, exist_ok=True)
        for name in names:
            shutil.copy2(os.path.join(directory, name), os.path.join(target_directory, name))
    shutil.rmtree(VARIANTS)


def template_checkout(repo_dir: str) -> str | None:
    """The template folder as an absolute path (``repo_dir`` may be relative to PWD)."""
    for base in (repo_dir, os.path.join(os.environ.get("PWD", ""), repo_dir)):
        if os.path.isfile(os.path.join(base, TOOLS_FOLDER, "pyproject.toml")):
            return os.path.abspath(base)
    return None


def git(repo: str, *args: str) -> str:
    result = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else ""


def tools_version(checkout: str) -> str:
    init = os.path.join(checkout, TOOLS_FOLDER, "src", "vertex_trainer_tools", "__init__.py")
    with open(init, encoding="utf-8") as handle:
        return re.search(r'__version__ = "([^"]+)"', handle.read()).group(1)


def tools_source(template: str, checkout: str) -> str:
    cloned = not os.path.isdir(template)  # gh:..., https://..., git@...: cookiecutter cloned it
    if not cloned:
        return os.path.join(checkout, TOOLS_FOLDER)
    if git(checkout, "tag", "--list", f"tools-v{tools_version(checkout)}"):
        return ""  # released: the package index has it
    url, commit = git(checkout, "remote", "get-url", "origin"), git(checkout, "rev-parse", "HEAD")
    if not url or not commit:
        return ""
    url = url if "://" in url else "ssh://" + url.replace(":", "/", 1)
    return f"git+{url}@{commit}#subdirectory={TOOLS_FOLDER}"


def write_tools_source(source: str) -> None:
    with open(MAKEFILE, encoding="utf-8") as handle:
        text = handle.read()
    text = text.replace("TOOLS_SOURCE ?=\n", f"TOOLS_SOURCE ?= {source}".rstrip() + "\n", 1)
    with open(MAKEFILE, "w", encoding="utf-8") as handle:
        handle.write(text)


def pin_tools_version(version: str) -> None:
    """requirements-dev.txt pins the package at the template's own version."""
    with open(REQUIREMENTS_DEV, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    lines = [f"{line}=={version}" if line == "vertex-trainer-tools" else line for line in lines]
    with open(REQUIREMENTS_DEV, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def main() -> int:
    install_variant(CONTEXT["framework"])
    checkout = template_checkout(CONTEXT["repo_dir"])
    if checkout is None:
        print(f"ERROR: template: {TOOLS_FOLDER}/ not found in {CONTEXT['repo_dir']!r}", file=sys.stderr)
        return 1
    pin_tools_version(tools_version(checkout))
    write_tools_source(tools_source(CONTEXT["template"], checkout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
