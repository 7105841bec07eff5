"""Build the training image for linux/amd64 and push it to Artifact Registry.

    vertex-tools build build|push|build-push [--cloud-build] [--dry-run] [--tag T]
                          [--base-image B]

With the Docker the user has: ``docker buildx build --platform linux/amd64`` when buildx is
installed (so Apple-silicon machines build the image Vertex runs), else plain ``docker build
--platform linux/amd64``, and on an x86-64 machine whose engine knows no ``--platform`` (Debian's
docker.io) plain ``docker build``. Tags: the project's git SHA (``-dirty`` with uncommitted
changes) when the project folder is the top of its own git repository, else a UTC timestamp;
plus ``latest`` and the config's ``image.tag``. Without a ``docker`` executable (Workbench,
Colab), or with ``--cloud-build``, ``gcloud builds submit`` builds and pushes the same tags from a
generated ``build/cloudbuild.yaml``. ``--base-image`` (or ``image.base_image``) overrides the
Dockerfile's pinned ``ARG BASE_IMAGE`` (``make base-image`` makes one offline). A job with a
Reduction Server (``job.reduction_server``) builds with ``--build-arg REDUCTION_SERVER=1``: the
Dockerfile then installs Google's NCCL plugin. Every command is
printed before it runs; ``--dry-run`` only prints. The executables can be swapped with the
``DOCKER`` and ``GCLOUD`` environment variables.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from vertex_trainer_tools import config as config_lib
from vertex_trainer_tools import runtime_package, vertex_limits
from vertex_trainer_tools.errors import FAILED, ToolError
from vertex_trainer_tools.lock import lock_problem

CLOUDBUILD_PATH = Path("build/cloudbuild.yaml")
PLATFORM = "linux/amd64"  # Vertex AI training runs x86-64 machines
AMD64_MACHINES = ("x86_64", "amd64")


def failed(why: str) -> ToolError:
    """A build step that failed (docker, buildx, gcloud): the input was fine, exit 1."""
    return ToolError(why, exit_code=FAILED)


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def timestamp_tag() -> str:
    return "build-" + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")


def git_tag(project: Path | None = None) -> str:
    """The project's short git SHA, ``-dirty`` if tracked files changed; a timestamp when the
    project is not the top of its own repository (e.g. baked inside another checkout), so an
    image is never tagged with the SHA of a repository that does not hold the project."""
    project = (project or Path.cwd()).resolve()
    try:
        top = Path(_git("rev-parse", "--show-toplevel", cwd=project)).resolve()
        sha = _git("rev-parse", "--short=12", "HEAD", cwd=project) if top == project else ""
        dirty = _git("status", "--porcelain", "--untracked-files=no", cwd=project) if sha else ""
    except (OSError, subprocess.CalledProcessError):
        top, sha, dirty = None, "", ""
    if sha:
        return f"{sha}-dirty" if dirty else sha
    tag = timestamp_tag()
    if top is None:
        why = "not in a git repository (or no commit yet)"
    else:
        why = f"the project is not the top of its git repository ({top})"
    print(f"Tagging {tag}: {why}", file=sys.stderr)
    return tag


def image_tags(cfg: config_lib.Config, tag: str) -> list[str]:
    """Full image URIs to tag: ``<tag or git SHA>``, ``latest`` and the config's tag."""
    tags = dict.fromkeys([tag or git_tag(), "latest", cfg.image.tag])
    return [cfg.image_uri_with_tag(t) for t in tags]


def build_args(base_image: str, reduction_server: bool = False) -> list[str]:
    """``--build-arg``s from vertex.yaml: the FROM image, and ``REDUCTION_SERVER=1`` when the job
    has a Reduction Server, for which the Dockerfile installs Google's NCCL plugin."""
    args = [f"--build-arg=BASE_IMAGE={base_image}"] if base_image else []
    return args + (["--build-arg=REDUCTION_SERVER=1"] if reduction_server else [])


def _probe(command: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return subprocess.CompletedProcess(command, 1, "", str(error))


def check_engine(docker: str) -> None:
    """A ``docker`` executable without an engine behind it fails every build: say so first."""
    probe = _probe([docker, "version"])  # exits non-zero when no engine answers
    if probe.returncode != 0:
        lines = [line for line in probe.stderr.splitlines() if line.strip()]
        why = lines[-1].strip() if lines else "no answer"
        raise failed(
            f"{docker}: no Docker engine answers ({why}); start it, or build with CLOUD_BUILD=1"
        )


def builder(docker: str) -> list[str]:
    """The build command this Docker supports, always aiming at linux/amd64.

    buildx when installed; else the classic ``docker build``, with ``--platform`` when the
    client knows it (Debian's docker.io 20.10 does not) and without it on an x86-64 machine,
    where the image is amd64 anyway.
    """
    if _probe([docker, "buildx", "version"]).returncode == 0:
        return [docker, "buildx", "build", f"--platform={PLATFORM}", "--load"]
    if "--platform" in _probe([docker, "build", "--help"]).stdout:
        return [docker, "build", f"--platform={PLATFORM}"]
    machine = platform.machine().lower()
    if machine not in AMD64_MACHINES:
        raise failed(
            f"{docker} build has no --platform flag and this machine is {machine}, not amd64: "
            "install docker buildx, or build with CLOUD_BUILD=1"
        )
    return [docker, "build"]


def docker_build(
    command: list[str], uris: list[str], base_image: str, reduction_server: bool = False
) -> list[str]:
    args = build_args(base_image, reduction_server)
    return [*command, *args, *[f"--tag={uri}" for uri in uris], "."]


def cloudbuild_config(uris: list[str], base_image: str, reduction_server: bool = False) -> dict:
    """One docker build step; ``images`` makes Cloud Build push every tag when it succeeds."""
    return {
        "steps": [
            {
                "name": "gcr.io/cloud-builders/docker",
                "args": [
                    "build",
                    f"--platform={PLATFORM}",
                    *build_args(base_image, reduction_server),
                    *[f"--tag={uri}" for uri in uris],
                    ".",
                ],
            }
        ],
        "images": uris,
        "timeout": "7200s",  # deep-learning base images are large
        "options": {"machineType": "E2_HIGHCPU_8"},
    }


def write_cloudbuild(cfg: config_lib.Config, uris: list[str], base_image: str) -> Path:
    CLOUDBUILD_PATH.parent.mkdir(parents=True, exist_ok=True)
    header = f"# Generated from {cfg.path} by build.py; edit {cfg.path}, not this file.\n"
    build = cloudbuild_config(uris, base_image, bool(cfg.job.reduction_server_key))
    CLOUDBUILD_PATH.write_text(header + yaml.safe_dump(build))
    return CLOUDBUILD_PATH


def execute(command: list[str], dry_run: bool, what: str) -> None:
    print("+ " + shlex.join(command), flush=True)
    if dry_run:
        return
    try:
        result = subprocess.run(command)
    except OSError as error:
        raise failed(f"cannot run {command[0]}: {error.strerror}") from None
    if result.returncode != 0:
        raise failed(f"{what} failed (exit code {result.returncode}); its output is above")


def runtime_wheel(dry_run: bool) -> None:
    """The runtime's wheel in the build context (``wheels/``), when the image needs one."""
    project = Path.cwd()
    if dry_run:
        requirement = runtime_package.pinned(project)
        if requirement is not None:
            dist = runtime_package.checked_install(project, requirement)
            if not runtime_package.is_released(dist):
                name = f"{runtime_package.DISTRIBUTION} {dist.version}"
                where = f"{runtime_package.WHEELS_DIR}/"
                print(f"Would write {name}'s wheel to {where}", file=sys.stderr)
        return
    wheel = runtime_package.image_wheel(project)
    if wheel is not None:
        print(f"Wrote {wheel.relative_to(project)} (installed by the Dockerfile)", file=sys.stderr)


def command(args: argparse.Namespace) -> int:
    """``vertex-tools build``, ``push`` and ``build-push`` (``args.action``)."""
    cfg = config_lib.load(args.config)
    for flag, variable, why in (
        ("--tag", "TAG", args.tag and vertex_limits.tag_problem(args.tag)),
        (
            "--base-image",
            "BASE_IMAGE",
            args.base_image and vertex_limits.image_reference_problem(args.base_image),
        ),
    ):
        if why:
            raise ToolError(f"{flag} ({variable}=): {why}")
    for line in cfg.placeholders(only=("project", "image")):
        if not args.dry_run:
            raise ToolError(line)
        print(f"WARNING: {line}", file=sys.stderr)

    stale = lock_problem(Path.cwd())
    if stale and args.action != "push":
        if not args.dry_run:
            raise ToolError(stale)
        print(f"WARNING: {stale}", file=sys.stderr)

    docker = os.environ.get("DOCKER", "docker")
    gcloud = os.environ.get("GCLOUD", "gcloud")
    base_image = args.base_image or cfg.image.base_image
    reduction = bool(cfg.job.reduction_server_key)  # the image needs Google's NCCL plugin
    cloud = args.cloud_build
    if not cloud and shutil.which(docker) is None:
        print(f"{docker} not found: using Cloud Build (gcloud builds submit)", file=sys.stderr)
        cloud = True
    if cloud:
        uris = image_tags(cfg, args.tag)
        if args.action == "push":
            print("Cloud Build pushes as it builds: nothing to push", file=sys.stderr)
            return 0
        runtime_wheel(args.dry_run)
        path = write_cloudbuild(cfg, uris, base_image)
        print(f"Wrote {path}", file=sys.stderr)
        submit = [gcloud, "builds", "submit", f"--project={cfg.project}", f"--config={path}"]
        execute([*submit, "."], args.dry_run, "Cloud Build (gcloud builds submit)")
    else:
        if not args.dry_run:
            check_engine(docker)
        build_command = builder(docker)
        uris = image_tags(cfg, args.tag)
        if args.action != "push":
            runtime_wheel(args.dry_run)
            what = f"the image build ({shlex.join(build_command[:2])})"
            build = docker_build(build_command, uris, base_image, reduction)
            execute(build, args.dry_run, what)
        if args.action != "build":
            for uri in uris:
                try:
                    execute([docker, "push", uri], args.dry_run, f"docker push {uri}")
                except ToolError as error:
                    raise failed(
                        f"{error}; if the registry refused it, run `make gcp-setup` (it runs "
                        f"`gcloud auth configure-docker {cfg.image.registry_host}`)"
                    ) from None
    if not args.dry_run:
        print("Image: " + " ".join(uris))
    return 0
