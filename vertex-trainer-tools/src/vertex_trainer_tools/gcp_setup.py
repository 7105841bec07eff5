"""First-time Google Cloud set-up for this project, safe to run again (``make gcp-setup``).

Enables the Vertex AI, Artifact Registry, Cloud Build and Cloud Storage APIs; creates the
staging/output buckets in the job's region and the Artifact Registry Docker repository when
they are missing (an existing bucket in another region is an error: move the job or the
bucket); runs ``gcloud auth configure-docker`` for the registry. Each gcloud command is printed
before it runs; ``--dry-run`` prints them only (creation steps marked "if missing"), says what
it would do and changes nothing.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys

from vertex_trainer_tools import config as config_lib
from vertex_trainer_tools.errors import FAILED, ToolError

APIS = (
    "aiplatform.googleapis.com",
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "storage.googleapis.com",
)


class Runner:
    def __init__(self, gcloud: str, dry_run: bool):
        self.gcloud = gcloud
        self.dry_run = dry_run

    def run(self, *args: str, note: str = "") -> None:
        command = [self.gcloud, *args]
        print("+ " + shlex.join(command) + (f"    # {note}" if note else ""), flush=True)
        if self.dry_run:
            return
        try:
            result = subprocess.run(command)
        except OSError as error:
            raise ToolError(
                f"cannot run {self.gcloud}: {error.strerror} (install the gcloud CLI)",
                exit_code=FAILED,
            ) from None
        if result.returncode != 0:
            raise ToolError(
                f"`{shlex.join(command)}` failed with exit code {result.returncode}",
                exit_code=FAILED,
            )

    def query(self, *args: str) -> str | None:
        """Run a describe command quietly: its output, or None when the resource is missing."""
        command = [self.gcloud, *args]
        print("+ " + shlex.join(command), flush=True)
        try:
            result = subprocess.run(command, capture_output=True, text=True)
        except OSError as error:
            raise ToolError(
                f"cannot run {self.gcloud}: {error.strerror} (install the gcloud CLI)",
                exit_code=FAILED,
            ) from None
        return result.stdout.strip() if result.returncode == 0 else None


def bucket_names(cfg: config_lib.Config) -> list[str]:
    return list(dict.fromkeys([cfg.bucket_name, cfg.base_output_dir[5:].split("/", 1)[0]]))


def setup(cfg: config_lib.Config, runner: Runner) -> None:
    project = f"--project={cfg.project}"
    runner.run("services", "enable", *APIS, project)

    for name in bucket_names(cfg):
        create = (
            "storage",
            "buckets",
            "create",
            f"gs://{name}",
            project,
            f"--location={cfg.region}",
            "--uniform-bucket-level-access",
        )
        if runner.dry_run:
            runner.run(*create, note="if missing")
            continue
        location = runner.query(
            "storage", "buckets", "describe", f"gs://{name}", project, "--format=value(location)"
        )
        if location is None:
            runner.run(*create)
        elif location.lower() != cfg.region:
            raise ToolError(
                f"bucket gs://{name} exists in {location} but jobs run in {cfg.region}: "
                f"use another bucket or region in {cfg.path}",
                exit_code=FAILED,
            )
        else:
            print(f"  bucket gs://{name} exists in {location}")

    if cfg.registry_location:
        repo = cfg.image.repository
        where = f"--location={cfg.registry_location}"
        create = (
            "artifacts",
            "repositories",
            "create",
            repo,
            project,
            where,
            "--repository-format=docker",
            f"--description=Training images of {cfg.job.display_name}",
        )
        if runner.dry_run:
            runner.run(*create, note="if missing")
        elif (
            runner.query(
                "artifacts",
                "repositories",
                "describe",
                repo,
                project,
                where,
                "--format=value(name)",
            )
            is None
        ):
            runner.run(*create)
        else:
            print(f"  repository {repo} exists in {cfg.registry_location}")
        runner.run("auth", "configure-docker", cfg.image.registry_host, "--quiet")
    else:
        print(f"  {cfg.image.registry_host} is not Artifact Registry: no repository to create")

    if runner.dry_run:
        print(f"Would do: {'; '.join(plan(cfg))}.")
        print("(dry run: nothing was changed)")
    else:
        print("Done. Next: `make build-push`, then `make submit`.")


def plan(cfg: config_lib.Config) -> list[str]:
    """What ``setup`` does, in words, for the dry run."""
    steps = [f"enable {len(APIS)} APIs in project {cfg.project}"]
    steps += [f"create bucket gs://{name} in {cfg.region} if missing" for name in bucket_names(cfg)]
    if cfg.registry_location:
        steps.append(
            f"create Docker repository {cfg.image.repository} in {cfg.registry_location} if missing"
        )
        steps.append(f"let Docker push to {cfg.image.registry_host}")
    return steps


def command(args: argparse.Namespace) -> int:
    """``vertex-tools gcp-setup``."""
    cfg = config_lib.load(args.config)
    placeholders = cfg.placeholders(only=("project", "staging_bucket", "base_output_dir", "image"))
    if placeholders and not args.dry_run:
        raise ToolError(*placeholders)
    for line in placeholders:
        print(f"WARNING: {line}", file=sys.stderr)
    setup(cfg, Runner(os.environ.get("GCLOUD", "gcloud"), args.dry_run))
    return 0
