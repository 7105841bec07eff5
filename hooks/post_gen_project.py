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
    "template": {{ cookiecutter._template | default("") | tojson }},
    "repo_dir": {{ cookiecutter._repo_dir | default("") | tojson }}
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


def template_candidates(repo_dir):
    """Where the template may be: the working directory of the process that runs this hook,
    which cookiecutter keeps in the template while hooks run (cruft gives hooks no
    ``_repo_dir``), else cookiecutter's ``_repo_dir`` (absolute for a cloned template, else as
    typed, relative to the shell's PWD)."""
    try:
        yield os.readlink(f"/proc/{os.getppid()}/cwd")  # Linux
    except OSError:
        lsof = ["lsof", "-a", "-p", str(os.getppid()), "-d", "cwd", "-Fn"]
        try:
            out = subprocess.run(lsof, capture_output=True, text=True, timeout=10).stdout
            yield from (line[1:] for line in out.splitlines() if line.startswith("n"))
        except (OSError, subprocess.SubprocessError):
            pass
    if repo_dir:
        yield os.path.join(os.environ.get("PWD", ""), repo_dir)  # unchanged when absolute


def template_checkout(repo_dir: str) -> str | None:
    """The template folder as an absolute path (``repo_dir`` may be relative to PWD)."""
    for base in template_candidates(repo_dir):
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


def is_remote(template: str) -> bool:
    """A template cookiecutter (or cruft) cloned: gh:, gl:, bb:, git@..., https://..."""
    if template.startswith(("gh:", "gl:", "bb:", "git@", "git+")):
        return True
    return "://" in template and not template.startswith("file:")


def tools_source(template: str, checkout: str) -> str:
    if not is_remote(template):
        return os.path.join(checkout, TOOLS_FOLDER)  # a local checkout, as `make demo` bakes
    if git(checkout, "tag", "--list", f"tools-v{tools_version(checkout)}"):
        return ""  # released: the package index has it
    url, commit = git(checkout, "remote", "get-url", "origin"), git(checkout, "rev-parse", "HEAD")
    if not url or not commit:
        return ""
    if "://" not in url and ":" in url:  # scp-like git@github.com:org/repo.git
        url = "ssh://" + url.replace(":", "/", 1)
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
        print(
            f"ERROR: template: {TOOLS_FOLDER}/ not found in {CONTEXT['repo_dir']!r}",
            file=sys.stderr,
        )
        return 1
    pin_tools_version(tools_version(checkout))
    write_tools_source(tools_source(CONTEXT["template"], checkout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
