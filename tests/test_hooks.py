"""Hooks, unit-tested by rendering them as cookiecutter does, and end to end with hostile input."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import types

import pytest
from cookiecutter.environment import StrictEnvironment
from cookiecutter.exceptions import FailedHookException

from conftest import CONTEXT, PROJECT_TEMPLATE, TEMPLATE, bake

TOOLS_INIT = "vertex-trainer-tools/src/vertex_trainer_tools/__init__.py"
TOOLS_VERSION = re.compile(r'__version__ = "([^"]+)"')
DEFAULTS = {
    "project_name": "Vertex Trainer",
    "project_slug": "vertex_trainer",
    "description": "A Vertex AI custom-training project",
    "author_name": "Your Name",
    "framework": "keras",
    "gcp_project_id": "my-project-123",
    "region": "us-central1",
    "gcs_bucket": "gs://my-project-123-vertex",
    "artifact_registry_repo": "trainers",
    "image_name": "vertex-trainer",
    "base_image": "deep-learning-container",
    "machine_type": "n1-standard-8",
    "accelerator_type": "NVIDIA_TESLA_T4",
    "accelerator_count": "1",
    "_template": str(TEMPLATE),
    "_repo_dir": str(TEMPLATE),
}


def render_hook(name: str, **answers: str) -> types.ModuleType:
    """Render hooks/<name>.py with these answers and import the result, without baking."""
    context = {**DEFAULTS, **answers}
    source = (TEMPLATE / "hooks" / f"{name}.py").read_text()
    rendered = StrictEnvironment().from_string(source).render(cookiecutter=context)
    module = types.ModuleType(name)
    exec(compile(rendered, f"{name}.py", "exec"), module.__dict__)
    return module


def error_of(**answers: str) -> str | None:
    hook = render_hook("pre_gen_project", **answers)
    try:
        hook.validate(hook.ANSWERS)
    except hook.InvalidAnswer as error:
        return str(error)
    return None


def test_defaults_of_cookiecutter_json_are_valid():
    defaults = {key: value for key, value in CONTEXT.items() if not key.startswith("_")}
    assert error_of(**{**DEFAULTS, "gcp_project_id": defaults["gcp_project_id"]}) is None


@pytest.mark.parametrize(
    "field, value",
    [
        ("accelerator_type", "nvidia_l4"),
        ("machine_type", "a2-highgpu-1g"),
        ("project_slug", "sentiment_trainer_2"),
        ("accelerator_count", "0"),
    ],
)
def test_accepts_valid_answers(field, value):
    assert error_of(**{field: value}) is None


@pytest.mark.parametrize(
    "answers",
    [
        {"gcs_bucket": "my-bucket"},
        {"gcs_bucket": "gs://my-bucket/"},
        {"gcs_bucket": "gs://my.bucket.example.com"},
        {"region": "europe-west4"},
        {"image_name": "team/trainer.v2"},
        {"accelerator_type": "nvidia_l4", "accelerator_count": "2"},
        {"accelerator_type": "NONE", "accelerator_count": "0"},
    ],
    ids=lambda answers: " ".join(answers.values()),
)
def test_the_project_loader_accepts_valid_answers(tmp_path, answers):
    assert (bake(tmp_path, **answers) / "vertex.yaml").is_file()


@pytest.mark.parametrize(
    "field, value",
    [
        ("project_name", "   "),
        ("project_slug", "My-Trainer"),
        ("project_slug", "2fast"),
        ("project_slug", "class"),
        ("project_slug", "json"),
        ("project_slug", "trainer"),
        ("project_slug", "dröm"),
        ("framework", "jax"),
        ("base_image", "ubuntu"),
        ("accelerator_type", "TPU_V3"),
        ("accelerator_count", "one"),
        ("accelerator_count", "1.5"),
    ],
)
def test_rejects_what_rendering_cannot_use_naming_the_field(field, value):
    message = error_of(**{field: value})
    assert message is not None
    assert message.startswith(f"{field}: ")
    assert "(e.g. " in message and message.endswith(")")
    assert "\n" not in message


def test_google_cloud_naming_rules_are_not_repeated_in_the_pre_generation_hook():
    # tools/config.py and tools/preflight.py are their one place (checked after rendering).
    assert error_of(region="moon-base1", gcp_project_id="google-x", image_name="Trainer") is None


BUCKET = "gs://b-123"  # for a bad gcp_project_id, whose default bucket would be bad too
PROJECT_ID = (
    "is not a project ID: 6-30 lowercase letters, digits or hyphens, starting with a letter"
)
BUCKET_URI = "is not a bucket URI of the form gs://BUCKET[/path] (e.g. gs://my-bucket)"
RESERVED = "uses a reserved form ('goog', 'google' or an IP) (e.g. gs://my-project-123-vertex)"


@pytest.mark.parametrize(
    "answers, error",
    [
        (
            {"region": "moon-base1"},
            "region: 'moon-base1' is not a Vertex AI training region (e.g. us-central1)",
        ),
        (
            {"region": "us-centrall1"},
            "region: 'us-centrall1' is not a Vertex AI training region"
            " (did you mean 'us-central1' or 'me-central1' or 'me-central2'?)",
        ),
        ({"region": "us-central"}, "region: 'us-central' is not a region (e.g. us-central1)"),
        # An empty answer is one line (the default bucket named after it says nothing more).
        ({"region": ""}, "region: must not be empty (e.g. us-central1)"),
        ({"gcp_project_id": " "}, "gcp_project_id: must not be empty (e.g. my-project-123)"),
        ({"machine_type": ""}, "machine_type: must not be empty (e.g. n1-standard-8)"),
        ({"gcs_bucket": ""}, "gcs_bucket: must not be empty (e.g. gs://my-bucket)"),
        (
            {"artifact_registry_repo": ""},
            "artifact_registry_repo: must not be empty (e.g. trainers)",
        ),
        ({"region": "global"}, "region: 'global' is not a region (e.g. us-central1)"),
        (
            {"gcp_project_id": "My_Project", "gcs_bucket": BUCKET},
            f"gcp_project_id: 'My_Project' {PROJECT_ID} (e.g. my-project-123)",
        ),
        (
            {"gcp_project_id": "abc", "gcs_bucket": BUCKET},
            f"gcp_project_id: 'abc' {PROJECT_ID} (e.g. my-project-123)",
        ),
        (
            {"gcp_project_id": "my-project-", "gcs_bucket": BUCKET},
            f"gcp_project_id: 'my-project-' {PROJECT_ID} (e.g. my-project-123)",
        ),
        (
            {"gcp_project_id": "google-trainer", "gcs_bucket": BUCKET},
            "gcp_project_id: 'google-trainer' is not a project ID: no 'google' in it"
            " (e.g. my-project-123)",
        ),
        ({"gcs_bucket": "gs://"}, f"gcs_bucket: 'gs://' {BUCKET_URI}"),
        ({"gcs_bucket": "gs://Bucket"}, f"gcs_bucket: 'gs://Bucket' {BUCKET_URI}"),
        ({"gcs_bucket": "gs://goog-bucket"}, f"gcs_bucket: bucket 'goog-bucket' {RESERVED}"),
        ({"gcs_bucket": "192.168.0.1"}, f"gcs_bucket: bucket '192.168.0.1' {RESERVED}"),
        (
            {"gcs_bucket": "gs://" + "a" * 64},
            f"gcs_bucket: bucket '{'a' * 64}': each dot-separated part has 1-63 characters"
            " (e.g. gs://my-project-123-vertex)",
        ),
        (
            {"artifact_registry_repo": "-trainers"},
            "artifact_registry_repo: '-trainers' is not a repository name: lowercase letters,"
            " digits and hyphens, starting with a letter (e.g. trainers)",
        ),
        (
            {"image_name": "trainer:latest"},
            "image_name: 'trainer:latest' is not a Docker image name: lowercase letters, digits,"
            " '.', '_', '-' and '/' (e.g. trainer)",
        ),
        (
            {"accelerator_type": "NVIDIA_TESLA_T5"},
            "accelerator_type: unknown accelerator 'NVIDIA_TESLA_T5'"
            " (did you mean 'NVIDIA_TESLA_T4' or 'NVIDIA_TESLA_P4' or 'NVIDIA_TESLA_K80'?)",
        ),
        (
            {"accelerator_count": "3"},
            "accelerator_count: 3 accelerators per replica are not offered: use 1, 2, 4, 8, 16"
            " (e.g. 1)",
        ),
        (
            {"accelerator_type": "NONE", "accelerator_count": "1"},
            "accelerator_count: 1 without an accelerator_type: make it 0 (e.g. 0)",
        ),
    ],
    ids=lambda value: (
        " ".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) else ""
    ),
)
def test_project_rules_reject_an_answer_with_one_line_and_no_folder(tmp_path, answers, error):
    result = cli_bake(tmp_path, *(f"{field}={value}" for field, value in answers.items()))
    assert result.returncode != 0
    assert error_lines(result) == [f"ERROR: {error}"], result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "value",
    ['He said "hi"', "it's", "back\\slash", "''' + __import__('os').system('false') + '''"],
)
def test_hostile_values_stay_data(value):
    hook = render_hook("pre_gen_project", project_name=value)
    assert hook.ANSWERS["project_name"] == value


def test_bad_answer_fails_with_one_line_and_leaves_no_folder(tmp_path):
    with pytest.raises(FailedHookException):
        bake(tmp_path, gcs_bucket="gs://Not_A_Bucket")
    assert list(tmp_path.iterdir()) == []
    # The command-line form prints the one-line error a user sees.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cookiecutter",
            str(TEMPLATE),
            "--no-input",
            "-o",
            str(tmp_path),
            "--default-config",
            "region=moon-base1",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR: region:")]
    assert errors == [
        "ERROR: region: 'moon-base1' is not a Vertex AI training region (e.g. us-central1)"
    ]
    assert list(tmp_path.iterdir()) == []


def test_hostile_description_and_author_survive_into_setup_py(tmp_path):
    description = 'A "quoted" trainer \\ with it\'s own {braces}'
    author = "Zoë O'Brien"
    project = bake(tmp_path, description=description, author_name=author)
    tree = ast.parse((project / "setup.py").read_text())
    keywords = {
        keyword.arg: keyword.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setup"
        for keyword in node.keywords
    }
    assert ast.literal_eval(keywords["description"]) == description
    assert ast.literal_eval(keywords["author"]) == author
    assert json.loads((project / ".cookiecutter.json").read_text())["author_name"] == author


def test_post_gen_keeps_only_the_chosen_framework(tmp_path):
    for framework in CONTEXT["framework"]:
        project = bake(tmp_path / framework, framework=framework)
        train = (project / "trainer" / "train.py").read_text()
        variant = PROJECT_TEMPLATE / "variants" / framework
        assert train == (variant / "trainer" / "train.py").read_text()
        assert not (project / "variants").exists()


def test_post_gen_pins_the_tools_and_installs_them_from_this_checkout(tmp_path):
    project = bake(tmp_path)
    version = TOOLS_VERSION.search((TEMPLATE / TOOLS_INIT).read_text()).group(1)
    pins = (project / "requirements-dev.txt").read_text().splitlines()
    assert f"vertex-trainer-tools=={version}" in pins
    makefile = (project / "Makefile").read_text().splitlines()
    assert f"TOOLS_SOURCE ?= {TEMPLATE / 'vertex-trainer-tools'}" in makefile


def test_post_gen_installs_a_cloned_template_from_its_commit_until_a_release_exists(tmp_path):
    hook = render_hook("post_gen_project")
    clone = tmp_path / "clone"
    shutil.copytree(TEMPLATE / "vertex-trainer-tools", clone / "vertex-trainer-tools",
                    ignore=shutil.ignore_patterns(".*cache", "__pycache__"))  # fmt: skip
    git = ["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "v"], check=True)
    url = "https://github.com/acme/cookiecutter-vertex-trainer.git"
    subprocess.run([*git, "remote", "add", "origin", url], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    source = hook.tools_source("gh:acme/cookiecutter-vertex-trainer", str(clone))
    assert source == f"git+{url}@{commit.strip()}#subdirectory=vertex-trainer-tools"
    version = hook.tools_version(str(clone))
    subprocess.run([*git, "tag", f"tools-v{version}"], check=True)
    assert hook.tools_source("gh:acme/cookiecutter-vertex-trainer", str(clone)) == ""


def cli_bake(output_dir, *answers: str) -> subprocess.CompletedProcess:
    """Bake through the command line, as a user does; returns the finished process."""
    return subprocess.run(
        [sys.executable, "-m", "cookiecutter", str(TEMPLATE), "--no-input", "--default-config"]
        + ["-o", str(output_dir), *answers],
        capture_output=True,
        text=True,
    )


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    """The hooks' one-line errors; cookiecutter's own 'ERROR: Stopping generation' is not one."""
    return [
        line
        for line in result.stderr.splitlines()
        if line.startswith("ERROR: ") and not line.startswith("ERROR: Stopping generation")
    ]


CONTROL_CHARACTERS = ["\n", "\r", "\t", "\x00", "\x1b[31m", "\x7f", "\x85", "\u2028", "\udc80"]


@pytest.mark.parametrize("field", ["project_name", "description", "author_name", "region"])
@pytest.mark.parametrize("char", CONTROL_CHARACTERS, ids=lambda char: f"U+{ord(char[0]):04X}")
def test_rejects_control_characters_in_every_answer(field, char):
    value = f"{DEFAULTS[field][:3]}{char}{DEFAULTS[field][3:]}"
    message = error_of(**{field: value})
    assert message == (
        f"{field}: contains the non-printable character U+{ord(char[0]):04X}: "
        f"one line of text only (e.g. {render_hook('pre_gen_project').EXAMPLES[field]})"
    )


def test_newline_in_project_name_fails_with_one_line_and_writes_nothing(tmp_path):
    # It used to bake, and the Makefile's first comment line broke in two: make stopped with
    # "target pattern contains no '%'".
    result = cli_bake(tmp_path, "project_name=Sentiment\nTrainer: %")
    assert result.returncode != 0
    assert error_lines(result) == [
        "ERROR: project_name: contains the non-printable character U+000A: one line of text only"
        " (e.g. Sentiment Trainer)"
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "name, slug",
    [
        ("Vertex Trainer", "vertex_trainer"),
        ('Müller\'s "Quoted" Trainer & Co', "mullers_quoted_trainer_co"),
        ("Zoë’s  Straße -- Trainer", "zoes_strasse_trainer"),
        ("2 Fast Trainer", "project_2_fast_trainer"),
        ("Ünïcödé " * 20, ("unicode_" * 8).rstrip("_")),
    ],
)
def test_default_slug_is_a_valid_package_name_derived_from_any_name(tmp_path, name, slug):
    project = bake(tmp_path, project_name=name)
    assert project.name == slug
    recorded = json.loads((project / ".cookiecutter.json").read_text())
    assert recorded["project_slug"] == slug
    assert recorded["image_name"] == slug.replace("_", "-")
    assert error_of(project_name=name, project_slug=slug, image_name=slug.replace("_", "-")) is None


def test_name_without_any_latin_letter_asks_for_a_slug(tmp_path):
    # Into a folder that exists, like `-o .`: an empty slug would name the folder itself.
    (tmp_path / "notes.txt").write_text("mine")
    result = cli_bake(tmp_path, "project_name=🚀 🚀")
    assert result.returncode != 0
    assert error_lines(result) == [
        "ERROR: project_slug: no package name can be derived from project_name '🚀 🚀': "
        "give project_slug yourself (e.g. sentiment_trainer)"
    ]
    assert [path.name for path in tmp_path.iterdir()] == ["notes.txt"]


def test_image_name_default_stays_valid_for_any_valid_slug(tmp_path):
    project = bake(tmp_path, project_slug="my__trainer_")
    assert json.loads((project / ".cookiecutter.json").read_text())["image_name"] == "my--trainer"


@pytest.mark.parametrize(
    "machine_type, expected",
    [
        ("n1 standard 8", "machine_type: 'n1 standard 8' is not a machine type"),
        ("a: b", "machine_type: 'a: b' is not a machine type"),
        ("n1-standard-8 # fast", "machine_type: 'n1-standard-8 # fast' is not a machine type"),
        ("[n1-standard-8]", "machine_type: '[n1-standard-8]' is not a machine type"),
    ],
)
def test_answers_that_would_make_vertex_yaml_invalid_are_refused(tmp_path, machine_type, expected):
    result = cli_bake(tmp_path, f"machine_type={machine_type}")
    assert result.returncode != 0
    errors = error_lines(result)
    assert len(errors) == 1 and errors[0].startswith(f"ERROR: {expected}"), result.stderr
    assert list(tmp_path.iterdir()) == []
