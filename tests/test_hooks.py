"""Hooks, unit-tested by rendering them as cookiecutter does, and end to end with hostile input."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
import subprocess
import sys
import types

import pytest
from cookiecutter.environment import StrictEnvironment
from cookiecutter.exceptions import FailedHookException
from cookiecutter.generate import generate_context
from cookiecutter.prompt import prompt_for_config
from vertex_trainer_tools import config

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
    "_tools_version": CONTEXT["_tools_version"],
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
    "answers",
    [
        {"gcs_bucket": "my-bucket"},
        {"gcs_bucket": "gs://my-bucket/"},
        {"gcs_bucket": "gs://my.bucket.example.com"},
        {"region": "europe-west4"},
        {"image_name": "team/trainer.v2"},
        {
            "machine_type": "g2-standard-24",
            "accelerator_type": "nvidia_l4",
            "accelerator_count": "2",
        },
        {"accelerator_type": "NONE", "accelerator_count": "0"},
        {"gcp_project_id": "example.com:my-proj"},
    ],
    ids=lambda answers: " ".join(answers.values()),
)
def test_the_project_loader_accepts_valid_answers(tmp_path, answers):
    cfg = config.load(bake(tmp_path, **answers) / "vertex.yaml")
    # Artifact Registry writes a domain-scoped project example.com:my-proj as example.com/my-proj.
    project = cfg.project.replace(":", "/")
    assert cfg.image_uri.startswith(f"{cfg.region}-docker.pkg.dev/{project}/")


def test_google_cloud_naming_rules_are_not_repeated_in_the_pre_generation_hook():
    # The tools package's gcp_names.py is their one place (`vertex-tools check` applies them).
    assert error_of(region="moon-base1", gcp_project_id="google-x", image_name="Trainer") is None


BUCKET = "gs://b-123"  # for a bad gcp_project_id, whose default bucket would be bad too
PROJECT_ID = (
    "is not a project ID: 6-30 lowercase letters, digits or hyphens, starting with a letter"
)
BUCKET_URI = "is not a bucket URI of the form gs://BUCKET[/path] (e.g. gs://my-bucket)"
RESERVED = "uses a reserved form ('goog', 'google' or an IP) (e.g. gs://my-project-123-vertex)"


# The hostile answers set: every answer a user may type, as cookiecutter's command line gets
# it (`cookiecutter TEMPLATE --no-input field=value`). A refused answer maps to the one line it
# must print; an accepted one to what it bakes (values of the rendered context). Rendered and
# checked in-process, as cookiecutter does before it writes a file: no bake, a few ms each.
CHOICES = "ValueError: {value} provided for choice variable {field}, but the choices are {choices}."
CPU_ONLY = {"__gpu": "no", "__accelerator_type": "ACCELERATOR_TYPE_UNSPECIFIED"}
ACCEPTED = [
    ({}, {"project_slug": "vertex_trainer", "__gpu": "yes", "__accelerator_count": "1"}),
    # Every answer is rendered as Jinja before the hooks see it (docs/options.md).
    ({"project_name": "{{ 7*7 }}"}, {"project_name": "49", "project_slug": "project_49"}),
    (
        {"gcp_project_id": "example.com:my-proj"},
        {"gcp_project_id": "example.com:my-proj", "__bucket_uri": "gs://my-proj-vertex"},
    ),
    ({"accelerator_type": "NONE", "accelerator_count": "0"}, CPU_ONLY),
    ({"accelerator_type": "", "accelerator_count": "0"}, CPU_ONLY),
    ({"accelerator_type": "none", "accelerator_count": " 0 "}, CPU_ONLY),
    (
        {
            "machine_type": "g2-standard-24",
            "accelerator_type": "nvidia_l4",
            "accelerator_count": "2",
        },
        {"__accelerator_type": "NVIDIA_L4", "__accelerator_count": "2"},
    ),
    (
        {
            "machine_type": "a2-highgpu-8g",
            "accelerator_type": " NVIDIA_TESLA_A100 ",
            "accelerator_count": " 8 ",
        },
        {"__accelerator_type": "NVIDIA_TESLA_A100", "__accelerator_count": "8"},
    ),
    (
        {"machine_type": "a2-highgpu-1g", "accelerator_type": "NVIDIA_TESLA_A100"},
        {"machine_type": "a2-highgpu-1g"},
    ),
    ({"project_slug": "sentiment_trainer_2"}, {"image_name": "sentiment-trainer-2"}),
    ({"project_slug": "my__trainer_"}, {"image_name": "my--trainer"}),
    ({"gcs_bucket": "my-bucket"}, {"__bucket_uri": "gs://my-bucket"}),
    ({"gcs_bucket": "gs://my-bucket/"}, {"__bucket_uri": "gs://my-bucket"}),
    ({"gcs_bucket": "gs://my-bucket/runs/a"}, {"__bucket_uri": "gs://my-bucket/runs/a"}),
    ({"gcs_bucket": "gs://my.bucket.example.com"}, {"__bucket_uri": "gs://my.bucket.example.com"}),
    ({"region": "europe-west4"}, {"region": "europe-west4"}),
    ({"image_name": "team/trainer.v2"}, {"image_name": "team/trainer.v2"}),
    (
        {"project_name": 'Müller\'s "Quoted" Trainer & Co'},
        {"project_slug": "mullers_quoted_trainer_co"},
    ),
    ({"project_name": "2 Fast Trainer"}, {"project_slug": "project_2_fast_trainer"}),
    (
        {"project_name": "''' + __import__('os').system('false') + '''"},
        {"project_slug": "import_os_system_false"},
    ),
    ({"description": 'A "quoted" \\ trainer'}, {"description": 'A "quoted" \\ trainer'}),
    ({"author_name": "Zoë O'Brien"}, {"author_name": "Zoë O'Brien"}),
    (
        {"framework": "pytorch", "base_image": "nvidia-cuda"},
        {"__gpu": "yes", "__executor_image": ""},  # no PyTorch training image left: image_dates
    ),
    (
        {"framework": "xgboost", "accelerator_type": "NONE", "accelerator_count": "0"},
        {"__gpu": "no", "__executor_image": ""},
    ),
]
REFUSED = [
    # Vertex's machine table (vertex_limits.py): refused at bake time, not at create time.
    (
        {"accelerator_type": "NVIDIA_L4"},
        "ERROR: accelerator_type: N1 machines take T4, P4, V100 or P100 GPUs, not NVIDIA_L4:"
        " it runs on g2-standard-4 (1), g2-standard-24 (2), g2-standard-48 (4),"
        " g2-standard-96 (8)",
    ),
    (
        {"machine_type": "n1-standrad-8"},
        "ERROR: machine_type: 'n1-standrad-8' is not a Vertex AI training machine type"
        " (did you mean 'n1-standard-8' or 'n2-standard-8' or 'n1-standard-4'?)",
    ),
    # The accelerator answers must agree: a GPU type with 0 would bake a CPU-only project.
    (
        {"accelerator_count": "0"},
        "ERROR: accelerator_count: 0 with accelerator_type NVIDIA_TESLA_T4: give 1 or more,"
        " or accelerator_type NONE for a CPU-only project (e.g. 1)",
    ),
    (
        {"accelerator_type": "nvidia_l4", "accelerator_count": "00"},
        "ERROR: accelerator_count: 0 with accelerator_type NVIDIA_L4: give 1 or more,"
        " or accelerator_type NONE for a CPU-only project (e.g. 1)",
    ),
    (
        {"accelerator_type": "NONE", "accelerator_count": "1"},
        "ERROR: accelerator_count: 1 without an accelerator_type: make it 0 (e.g. 0)",
    ),
    (
        {"accelerator_type": "", "accelerator_count": "2"},
        "ERROR: accelerator_count: 2 without an accelerator_type: make it 0 (e.g. 0)",
    ),
    (
        {"accelerator_type": "TPU_V3"},
        "ERROR: accelerator_type: 'TPU_V3' is a TPU: this template builds CUDA images for GPUs"
        " (or NONE) (e.g. NVIDIA_TESLA_T4)",
    ),
    (
        {"accelerator_count": "one"},
        "ERROR: accelerator_count: 'one' is not a whole number (e.g. 1)",
    ),
    (
        {"accelerator_count": "1.5"},
        "ERROR: accelerator_count: '1.5' is not a whole number (e.g. 1)",
    ),
    ({"accelerator_count": "-1"}, "ERROR: accelerator_count: '-1' is not a whole number (e.g. 1)"),
    ({"accelerator_count": ""}, "ERROR: accelerator_count: '' is not a whole number (e.g. 1)"),
    (
        {"accelerator_type": "NVIDIA_TESLA_T5"},
        "ERROR: accelerator_type: unknown accelerator 'NVIDIA_TESLA_T5'"
        " (did you mean 'NVIDIA_TESLA_T4' or 'NVIDIA_TESLA_P4' or 'NVIDIA_TESLA_K80'?)",
    ),
    (
        {"accelerator_count": "3"},
        "ERROR: accelerator_count: 3 accelerators per replica are not offered:"
        " use 1, 2, 4, 8, 16 (e.g. 1)",
    ),
    # Choices are checked by cookiecutter before any hook runs: its traceback ends in this line.
    (
        {"framework": "tensorflow"},
        CHOICES.format(
            value="tensorflow", field="framework", choices="['keras', 'pytorch', 'xgboost']"
        ),
    ),
    (
        {"framework": ""},
        CHOICES.format(value="", field="framework", choices="['keras', 'pytorch', 'xgboost']"),
    ),
    (
        {"base_image": "alpine"},
        CHOICES.format(
            value="alpine",
            field="base_image",
            choices="['deep-learning-container', 'nvidia-cuda']",
        ),
    ),
    # What rendering needs: a name, a package name, one line of text.
    ({"project_name": "   "}, "ERROR: project_name: must not be empty (e.g. Sentiment Trainer)"),
    (
        {"project_name": "🚀 🚀"},
        "ERROR: project_slug: no package name can be derived from project_name '🚀 🚀':"
        " give project_slug yourself (e.g. sentiment_trainer)",
    ),
    (
        {"project_slug": ""},
        "ERROR: project_slug: no package name can be derived from project_name"
        " 'Vertex Trainer': give project_slug yourself (e.g. sentiment_trainer)",
    ),
    *[
        (
            {"project_slug": slug},
            f"ERROR: project_slug: {slug!r} is not a valid package name: lowercase letters,"
            " digits and _, starting with a letter (e.g. sentiment_trainer)",
        )
        for slug in ("My-Trainer", "2fast", "dröm", "_private", "a" * 65)
    ],
    *[
        (
            {"project_slug": slug},
            f"ERROR: project_slug: {slug!r} would shadow a Python module (e.g. sentiment_trainer)",
        )
        for slug in ("class", "json", "trainer", "torch")
    ],
    (
        {"project_name": "Sentiment\nTrainer: %"},
        "ERROR: project_name: contains the non-printable character U+000A: one line of text"
        " only (e.g. Sentiment Trainer)",
    ),
    (
        {"description": "red \x1b[31m text"},
        "ERROR: description: contains the non-printable character U+001B: one line of text"
        " only (e.g. Trains a sentiment classifier)",
    ),
    (
        {"image_name": "trainer\t2"},
        "ERROR: image_name: contains the non-printable character U+0009: one line of text"
        " only (e.g. sentiment-trainer)",
    ),
    # Google Cloud's naming rules (vertex-trainer-tools' gcp_names.py).
    (
        {"region": "moon-base1"},
        "ERROR: region: 'moon-base1' is not a Vertex AI training region (e.g. us-central1)",
    ),
    (
        {"region": "us-centrall1"},
        "ERROR: region: 'us-centrall1' is not a Vertex AI training region"
        " (did you mean 'us-central1' or 'me-central1' or 'me-central2'?)",
    ),
    ({"region": "us-central"}, "ERROR: region: 'us-central' is not a region (e.g. us-central1)"),
    ({"region": "US-CENTRAL1"}, "ERROR: region: 'US-CENTRAL1' is not a region (e.g. us-central1)"),
    ({"region": ""}, "ERROR: region: must not be empty (e.g. us-central1)"),
    ({"region": "global"}, "ERROR: region: 'global' is not a region (e.g. us-central1)"),
    ({"gcp_project_id": " "}, "ERROR: gcp_project_id: must not be empty (e.g. my-project-123)"),
    ({"machine_type": ""}, "ERROR: machine_type: must not be empty (e.g. n1-standard-8)"),
    ({"gcs_bucket": ""}, "ERROR: gcs_bucket: must not be empty (e.g. gs://my-bucket)"),
    (
        {"artifact_registry_repo": ""},
        "ERROR: artifact_registry_repo: must not be empty (e.g. trainers)",
    ),
    *[
        (
            {"gcp_project_id": project, "gcs_bucket": BUCKET},
            f"ERROR: gcp_project_id: {project!r} {PROJECT_ID} (e.g. my-project-123)",
        )
        for project in ("My_Project", "abc", "my-project-", "example.com:My_Proj")
    ],
    (
        # One line: the default bucket, named after the refused project, says nothing more.
        {"gcp_project_id": "My_Project"},
        f"ERROR: gcp_project_id: 'My_Project' {PROJECT_ID} (e.g. my-project-123)",
    ),
    (
        {"gcp_project_id": "google-trainer", "gcs_bucket": BUCKET},
        "ERROR: gcp_project_id: 'google-trainer' is not a project ID: no 'google' in it"
        " (e.g. my-project-123)",
    ),
    ({"gcs_bucket": "gs://"}, f"ERROR: gcs_bucket: 'gs://' {BUCKET_URI}"),
    ({"gcs_bucket": "gs://Bucket"}, f"ERROR: gcs_bucket: 'gs://Bucket' {BUCKET_URI}"),
    ({"gcs_bucket": "gs://goog-bucket"}, f"ERROR: gcs_bucket: bucket 'goog-bucket' {RESERVED}"),
    ({"gcs_bucket": "192.168.0.1"}, f"ERROR: gcs_bucket: bucket '192.168.0.1' {RESERVED}"),
    (
        {"gcs_bucket": "gs://" + "a" * 64},
        f"ERROR: gcs_bucket: bucket '{'a' * 64}': each dot-separated part has 1-63 characters"
        " (e.g. gs://my-project-123-vertex)",
    ),
    (
        {"artifact_registry_repo": "-trainers"},
        "ERROR: artifact_registry_repo: '-trainers' is not a repository name: lowercase"
        " letters, digits and hyphens, starting with a letter (e.g. trainers)",
    ),
    (
        {"image_name": "trainer:latest"},
        "ERROR: image_name: 'trainer:latest' is not a Docker image name: lowercase letters,"
        " digits, '.', '_', '-' and '/' (e.g. trainer)",
    ),
    *[
        (
            {"machine_type": machine},
            f"ERROR: machine_type: {machine!r} is not a machine type (e.g. n1-standard-8)",
        )
        for machine in ("n1 standard 8", "a: b", "n1-standard-8 # fast", "[n1-standard-8]")
    ],
]


def answer_id(answers: dict[str, str]) -> str:
    return " ".join(f"{field}={value!r}" for field, value in answers.items()) or "defaults"


def check_answers(answers: dict[str, str]) -> tuple[dict, list[str]]:
    """Render the context as cookiecutter does for these answers, then run the pre-generation
    hook's ``main`` on it: ``(context, lines the hook printed)``. An exception from the hook
    fails the test: a user would see its traceback instead of one line."""
    context = generate_context(str(TEMPLATE / "cookiecutter.json"), extra_context=answers)
    rendered = dict(prompt_for_config(context, no_input=True))
    hook = render_hook("pre_gen_project", **rendered)
    printed = io.StringIO()
    with contextlib.redirect_stderr(printed), contextlib.redirect_stdout(printed):
        status = hook.main()
    lines = printed.getvalue().splitlines()
    assert (status == 0) == (lines == []), lines
    return rendered, lines


@pytest.mark.parametrize("answers, bakes", ACCEPTED, ids=[answer_id(a) for a, _ in ACCEPTED])
def test_hostile_answers_that_are_valid_bake_what_they_say(answers, bakes):
    rendered, lines = check_answers(answers)
    assert lines == []
    assert {key: rendered[key] for key in bakes} == bakes


@pytest.mark.parametrize("answers, line", REFUSED, ids=[answer_id(a) for a, _ in REFUSED])
def test_hostile_answers_that_are_invalid_print_one_line(answers, line):
    try:
        _, lines = check_answers(answers)
    except ValueError as error:  # a choice, refused by cookiecutter itself
        lines = [f"ValueError: {error}"]
    assert lines == [line]


def test_the_hostile_answers_set_is_large():
    assert len(ACCEPTED) + len(REFUSED) >= 60


@pytest.mark.parametrize(
    "answer, first, last",
    [
        # A hook's refusal is the first line; cookiecutter's traceback of the hook follows.
        (
            "accelerator_count=0",
            "ERROR: accelerator_count: 0 with accelerator_type NVIDIA_TESLA_T4:",
            "Hook script failed (exit status: 1)",
        ),
        # A choice is refused by cookiecutter before any hook: the last line names it.
        ("framework=tensorflow", "Traceback", "ValueError: tensorflow provided for choice"),
        # An empty package name would be the output folder itself: cookiecutter stops first.
        ("project_slug=", 'Error: "', '" directory already exists'),
    ],
)
def test_what_cookiecutter_prints_around_a_refusal(tmp_path, answer, first, last):
    # docs/options.md, "Reading a refusal", tells users which line to read; this is what they see.
    result = subprocess.run(
        [sys.executable, "-m", "cookiecutter", str(TEMPLATE), "--no-input", "--default-config"]
        + ["-o", str(tmp_path), answer],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert result.returncode != 0
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith(first), result.stdout
    assert last in lines[-1], result.stdout
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


def test_the_template_pins_the_tools_at_the_packages_own_version():
    # cookiecutter.json's private _tools_version is what the hooks read (cruft refreshes it on
    # update, as it does every private key); the package's __version__ is what a release tags.
    version = TOOLS_VERSION.search((TEMPLATE / TOOLS_INIT).read_text()).group(1)
    assert CONTEXT["_tools_version"] == version


def test_post_gen_pins_the_tools_and_names_no_source_for_a_local_checkout(tmp_path):
    project = bake(tmp_path)
    pins = (project / "requirements-dev.txt").read_text().splitlines()
    assert f"vertex-trainer-tools=={CONTEXT['_tools_version']}" in pins
    runtime_pins = (project / "requirements.txt").read_text().splitlines()
    assert f"vertex-trainer-runtime=={CONTEXT['_tools_version']}" in runtime_pins
    makefile = (project / "Makefile").read_text().splitlines()
    assert "TOOLS_SOURCE ?=" in makefile  # `make demo` names the checkout on its command line
    assert "RUNTIME_SOURCE ?=" in makefile


def test_post_gen_installs_a_cloned_template_from_its_commit_until_a_release_exists(tmp_path):
    hook = render_hook("post_gen_project")
    clone = tmp_path / "clone"
    clone.mkdir()
    git = ["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "v"], check=True)
    url = "https://github.com/acme/cookiecutter-vertex-trainer.git"
    subprocess.run([*git, "remote", "add", "origin", url], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    template = "gh:acme/cookiecutter-vertex-trainer"
    source = hook.package_source(template, str(clone), "1.2.3")
    assert source == f"git+{url}@{commit.strip()}#subdirectory=vertex-trainer-tools"
    runtime = hook.package_source(template, str(clone), "1.2.3", hook.RUNTIME_FOLDER)
    assert runtime == f"git+{url}@{commit.strip()}#subdirectory=vertex-trainer-runtime"
    subprocess.run([*git, "tag", "tools-v1.2.3"], check=True)
    assert hook.package_source(template, str(clone), "1.2.3") == ""
    # cruft gives hooks no clone: the release from the index; a local template never a path.
    assert hook.package_source(template, "", "1.2.3") == ""
    assert hook.package_source(str(clone), str(clone), "4.5.6") == ""


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
