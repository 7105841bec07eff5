"""``make lock``: ``requirements.lock``, every package of the image pinned with its hashes.

The image installs the lock (``pip install --require-hashes --no-deps``), so a build never
resolves anything and a rebuild of the same commit installs the same files. uv's ``pip
compile`` resolves for the image's Python and platform (``--python``, ``--platform``), not this
machine's: pip has no resolver that can. What the base image brings with it (``--from-base
torch==2.4.1``: the Deep Learning Containers' CUDA build of torch) is resolved against but left
out, with every package that only it needs (its CUDA wheels); ``--replace xgboost-cpu=xgboost``
locks another package of the same version than ``requirements.txt`` names (the GPU image's
CUDA build). The header records the target and ``requirements.txt``'s hash: ``make check``
and ``make build`` say when the lock is older than ``requirements.txt``, and ``make install``
uses the lock only where it was made for this Python.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from vertex_trainer_tools import runtime_package
from vertex_trainer_tools.errors import FAILED, ToolError

LOCK = "requirements.lock"
REQUIREMENTS = "requirements.txt"
# The header's keys; make install's Makefile reads `python`, `platform`, `from base`.
PYTHON_KEY, PLATFORM_KEY, BASE_KEY = "python", "platform", "from the base image"
HASH_KEY = "requirements.txt sha256"
PLATFORM = "x86_64-manylinux_2_28"
# pip's settings that uv takes under its own names (uv never reads pip.conf).
UV_ENV = {
    "PIP_INDEX_URL": "UV_DEFAULT_INDEX",
    "PIP_EXTRA_INDEX_URL": "UV_INDEX",
    "PIP_FIND_LINKS": "UV_FIND_LINKS",
}


def uv_command() -> list[str] | None:
    """uv on PATH, else the one installed beside the tools (``pip install uv``), else None."""
    on_path = shutil.which("uv")
    if on_path:
        return [on_path]
    try:
        import uv  # noqa: PLC0415 - the uv package only ships the binary's location
    except ImportError:
        return None
    return [uv.find_uv_bin()]


def uv_environment() -> dict[str, str]:
    env = dict(os.environ, UV_PYTHON_DOWNLOADS="never", UV_NO_PROGRESS="1")
    for pip_name, uv_name in UV_ENV.items():
        if os.environ.get(pip_name) and not os.environ.get(uv_name):
            env[uv_name] = os.environ[pip_name]
    return env


def requirements_hash(project: Path) -> str:
    return hashlib.sha256((project / REQUIREMENTS).read_bytes()).hexdigest()


def header(project: Path) -> dict[str, str]:
    """The ``# key: value`` lines at the top of the project's lock ({} without a lock)."""
    path = project / LOCK
    if not path.is_file():
        return {}
    found = {}
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        key, sep, value = line[1:].strip().partition(": ")
        if sep:
            found[key] = value
    return found


def lock_problem(project: Path) -> str:
    """Why the image cannot be built from ``requirements.lock`` as it is ('' when it can)."""
    if not (project / REQUIREMENTS).is_file():
        return ""
    fields = header(project)
    if not fields:
        if (project / LOCK).is_file():
            return f"{LOCK}: no header (python, platform, hash): run `make lock` to write it again"
        return f"{LOCK}: missing: run `make lock` (it pins every package of the image with hashes)"
    if fields.get(HASH_KEY) != requirements_hash(project):
        return f"{LOCK}: {REQUIREMENTS} changed after the lock was made: run `make lock`"
    return ""


def parse_blocks(text: str) -> list[tuple[str, list[str], set[str]]]:
    """uv's output as (name, its lines, the packages it is there for) per pinned package."""
    blocks: list[tuple[str, list[str], set[str]]] = []
    in_via = False
    for line in text.splitlines():
        if line and not line.startswith((" ", "#")):
            blocks.append((re.split(r"[=<>~! \[;]", line, maxsplit=1)[0].lower(), [line], set()))
            in_via = False
            continue
        if not blocks or line.startswith("#"):
            continue
        name, lines, vias = blocks[-1]
        comment = line.strip()
        if comment.startswith("# via"):
            rest = comment.removeprefix("# via").strip()
            in_via = not rest
            if rest:
                vias.add(rest.lower())
        elif in_via and comment.startswith("#   "):
            vias.add(comment.removeprefix("#").strip().lower())
        elif comment.startswith("--hash"):
            lines.append(line)
    return blocks


def without_base(blocks, from_base: set[str]) -> tuple[list, list[str]]:
    """The blocks less those that only the base's packages (and what only they need) ask for."""
    gone = set(from_base)
    changed = True
    while changed:
        changed = False
        for name, _, vias in blocks:
            if name not in gone and vias and vias <= gone:
                gone.add(name)
                changed = True
    kept = [block for block in blocks if block[0] not in gone]
    return kept, sorted(gone - from_base)


def render(blocks) -> str:
    out = []
    for _, lines, _ in blocks:
        out.append(lines[0].rstrip(" \\") + (" \\" if len(lines) > 1 else ""))
        hashes = [line.strip().rstrip(" \\") for line in lines[1:]]
        for i, hash_line in enumerate(hashes):
            out.append(f"    {hash_line}" + (" \\" if i < len(hashes) - 1 else ""))
    return "\n".join(out) + "\n"


def name_of(requirement: str) -> str:
    return re.split(r"[=<>~! \[;]", requirement.strip(), maxsplit=1)[0].lower()


def lock(project: Path, python: str, platform: str, from_base: list[str], replace: list[str]):
    """Resolve ``requirements.txt`` for the image and write ``requirements.lock`` atomically."""
    if not re.fullmatch(r"3\.\d+", python):
        raise ToolError(f"--python (LOCK_PYTHON=): {python!r}: a Python version like 3.10")
    uv = uv_command()
    if uv is None:
        raise ToolError(
            "make lock needs uv (pip cannot resolve for another Python or platform): "
            "`make install` puts it in the venv, or run `pip install uv`",
            exit_code=FAILED,
        )
    swaps = {}
    for pair in replace:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new:
            raise ToolError(f"--replace: {pair!r}: OLD=NEW, e.g. xgboost-cpu=xgboost")
        swaps[old.strip().lower()] = new.strip()
    with tempfile.TemporaryDirectory(prefix="lock-") as scratch:
        scratch = Path(scratch)
        source = scratch / REQUIREMENTS
        lines = []
        for line in (project / REQUIREMENTS).read_text().splitlines():
            name = name_of(line) if line.strip() and not line.lstrip().startswith("#") else ""
            lines.append(swaps[name] + line.strip()[len(name) :] if name in swaps else line)
        source.write_text("\n".join(lines) + "\n")
        command = [*uv, "pip", "compile", str(source), "--generate-hashes", "--quiet"]
        command += ["--python-version", python, "--python-platform", platform]
        command += ["--no-header", "--output-file", str(scratch / "out.txt")]
        unreleased = runtime_wheel(project, scratch / "wheels")
        if unreleased:
            # A --find-links on the command line replaces UV_FIND_LINKS: name those too.
            env_links = os.environ.get("UV_FIND_LINKS") or os.environ.get("PIP_FIND_LINKS", "")
            for link in [*env_links.replace(",", " ").split(), str(scratch / "wheels")]:
                command += ["--find-links", link]
            command += ["--no-emit-package", runtime_package.DISTRIBUTION]
        constraints = scratch / "base.txt"
        constraints.write_text("".join(f"{pin}\n" for pin in from_base))
        command += ["--constraint", str(constraints)]
        for pin in from_base:
            command += ["--no-emit-package", name_of(pin)]
        print("+ " + " ".join(command[1:6]) + " ...", file=sys.stderr)
        result = subprocess.run(command, env=uv_environment(), capture_output=True, text=True)
        if result.returncode != 0:
            errors = [line for line in result.stderr.splitlines() if line.strip()]
            raise ToolError(
                f"make lock: uv could not resolve {REQUIREMENTS}: " + " ".join(errors),
                exit_code=FAILED,
            )
        blocks, only_base = without_base(
            parse_blocks((scratch / "out.txt").read_text()), {name_of(p) for p in from_base}
        )
    fields = {PYTHON_KEY: python, PLATFORM_KEY: platform, HASH_KEY: requirements_hash(project)}
    if from_base:
        fields[BASE_KEY] = " ".join([*from_base, *only_base])
    text = "# Every package of the image, pinned with its hashes: written by `make lock`.\n"
    text += "".join(f"# {key}: {value}\n" for key, value in fields.items())
    if unreleased:
        text += f"# {runtime_package.DISTRIBUTION}: its wheel in wheels/ (`make build`)\n"
    path = project / LOCK
    partial = path.with_name(f".{LOCK}.partial")
    partial.write_text(text + render(blocks))
    partial.replace(path)
    print(f"Wrote {LOCK}: {len(blocks)} packages for Python {python} ({platform})")


def runtime_wheel(project: Path, folder: Path) -> bool:
    """The unreleased runtime's wheel in ``folder`` for the resolver (True), else False: a
    released runtime is locked from the index like any package."""
    requirement = runtime_package.pinned(project)
    if requirement is None:
        return False
    dist = runtime_package.checked_install(project, requirement)
    if runtime_package.is_released(dist):
        return False
    folder.mkdir()
    runtime_package.build(dist, "wheel", folder)
    return True


def command(args: argparse.Namespace) -> int:
    lock(Path.cwd(), args.python, args.platform, args.from_base, args.replace)
    return 0
