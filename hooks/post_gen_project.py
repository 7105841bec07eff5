"""Keep only the chosen framework's modules, and pin the packages the project uses.

The template keeps each framework's plain-Python modules, tests, requirements and Dockerfile
under ``variants/<framework>/``; they are copied over the project root here, so the generated
project contains one framework and no trace of the others. The answers were checked before
generation (``pre_gen_project.py``); ``vertex-tools check`` applies the full config checks at the
first ``make`` that needs them.

Two packages of the template repository are pinned at the template's ``_tools_version``
(cookiecutter.json; a test holds it equal to both packages' ``__version__``): requirements.txt
pins ``vertex-trainer-runtime`` (what the trainer imports on Vertex) and requirements-dev.txt
``vertex-trainer-tools``. ``make install`` takes them from the Makefile's ``RUNTIME_SOURCE`` and
``TOOLS_SOURCE``, written here:
- empty, the package index (or a folder of wheels with ``PIP_FIND_LINKS``): a bake from a local
  checkout (which writes no path of the baking machine into the project: ``make demo`` passes
  ``RUNTIME_SOURCE=<checkout>/vertex-trainer-runtime`` and
  ``TOOLS_SOURCE=<checkout>/vertex-trainer-tools`` on the command line), a released hosted
  template, and ``cruft`` (which gives hooks no clone);
- the package's folder in the template repository at the baked commit
  (``git+URL@COMMIT#subdirectory=vertex-trainer-tools``, ``...=vertex-trainer-runtime``): a
  hosted template cloned by cookiecutter (``_repo_dir``) at a commit with no release tag
  ``tools-v<version>`` (one tag releases both packages).
"""

import json
import os
import shutil
import subprocess
import sys

CONTEXT = json.loads(
    r"""{
    "framework": {{ cookiecutter.framework | tojson }},
    "tools_version": {{ cookiecutter._tools_version | tojson }},
    "template": {{ cookiecutter._template | default("") | tojson }},
    "repo_dir": {{ cookiecutter._repo_dir | default("") | tojson }}
}"""
)
VARIANTS = "variants"
TOOLS_FOLDER = "vertex-trainer-tools"
RUNTIME_FOLDER = "vertex-trainer-runtime"
MAKEFILE = "Makefile"
REQUIREMENTS = "requirements.txt"
REQUIREMENTS_DEV = "requirements-dev.txt"


def install_variant(framework: str) -> None:
    source = os.path.join(VARIANTS, framework)
    for directory, _, names in os.walk(source):
        target_directory = os.path.join(".", os.path.relpath(directory, source))
        os.makedirs(target_directory, exist_ok=True)
        for name in names:
            shutil.copy2(os.path.join(directory, name), os.path.join(target_directory, name))
    shutil.rmtree(VARIANTS)


def git(repo: str, *args: str) -> str:
    try:
        result = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True)
    except OSError:  # no git on this machine
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


def is_remote(template: str) -> bool:
    """A template cookiecutter (or cruft) cloned: gh:, gl:, bb:, git@..., https://..."""
    if template.startswith(("gh:", "gl:", "bb:", "git@", "git+")):
        return True
    return "://" in template and not template.startswith("file:")


def package_source(template: str, clone: str, version: str, folder: str = TOOLS_FOLDER) -> str:
    """Empty (the package index) unless ``clone``, cookiecutter's clone of a hosted template
    (an absolute ``_repo_dir``), is at a commit whose version has no release tag; then the
    package ``folder`` of the repository at that commit."""
    if not is_remote(template) or not os.path.isabs(clone or ""):
        return ""
    if git(clone, "tag", "--list", f"tools-v{version}"):
        return ""  # released: the package index has it
    url, commit = git(clone, "remote", "get-url", "origin"), git(clone, "rev-parse", "HEAD")
    if not url or not commit:
        return ""
    if "://" not in url and ":" in url:  # scp-like git@github.com:org/repo.git
        url = "ssh://" + url.replace(":", "/", 1)
    return f"git+{url}@{commit}#subdirectory={folder}"


def write_source(variable: str, source: str) -> None:
    """``TOOLS_SOURCE ?=`` (or ``RUNTIME_SOURCE ?=``) of the Makefile gets ``source``."""
    with open(MAKEFILE, encoding="utf-8") as handle:
        text = handle.read()
    line = f"{variable} ?=\n"
    text = text.replace(line, f"{variable} ?= {source}".rstrip() + "\n", 1)
    with open(MAKEFILE, "w", encoding="utf-8") as handle:
        handle.write(text)


def pin_version(path: str, package: str, version: str) -> None:
    """The line naming ``package`` alone pins it at the template's own version."""
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    lines = [f"{line}=={version}" if line == package else line for line in lines]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def main() -> int:
    install_variant(CONTEXT["framework"])
    version = CONTEXT["tools_version"]
    pin_version(REQUIREMENTS_DEV, "vertex-trainer-tools", version)
    pin_version(REQUIREMENTS, "vertex-trainer-runtime", version)
    template, clone = CONTEXT["template"], CONTEXT["repo_dir"]
    write_source("TOOLS_SOURCE", package_source(template, clone, version, TOOLS_FOLDER))
    write_source("RUNTIME_SOURCE", package_source(template, clone, version, RUNTIME_FOLDER))
    return 0


if __name__ == "__main__":
    sys.exit(main())
