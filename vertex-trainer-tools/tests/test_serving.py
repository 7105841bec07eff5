"""``vertex-tools predict-local`` and the serving paths it shares with the ``serve_model`` fixture:
the request checks and their one-line errors, TF Serving's row format, the hf-serve client
against a stand-in server, and (slow) the XGBoost 2.1 environment on a model it trains itself.
The frameworks' own round trips run in each baked project's tests (``test_*_serving.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from vertex_trainer_tools import cli as tools_cli
from vertex_trainer_tools import serving
from vertex_trainer_tools.errors import ToolError
from vertex_trainer_tools.serving import envs, hf, tf_rows


def run_cli(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "vertex_trainer_tools", "predict-local", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "No such file or directory"),
        ("{not json", "not JSON"),
        ('["a"]', "not a JSON object"),
        ('{"rows": [[1]]}', "instances: missing"),
        ('{"instances": []}', "instances: not a non-empty list"),
        ('{"instances": {"a": 1}}', "instances: not a non-empty list"),
        ('{"instances": [1], "parameters": [2]}', "parameters: not an object"),
    ],
)
def test_a_bad_request_file_is_one_error_line_and_exit_2(tmp_path, capsys, content, why):
    path = tmp_path / "instances.json"
    if content is not None:
        path.write_text(content)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "model.bst").write_text("")
    assert (
        tools_cli.main(
            ["predict-local", f"--instances={path}", f"--model-dir={tmp_path / 'model'}"]
        )
        == 2
    )
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"ERROR: {path}: ") and why in err and err.count("\n") == 1, err


def test_make_predict_local_without_instances_says_how_to_give_them(capsys):
    given = ["predict-local", "--instances="]  # what `make predict-local` passes without INSTANCES
    assert tools_cli.main(given) == 2
    assert capsys.readouterr().err == (
        "ERROR: --instances: no request file given "
        "(e.g. make predict-local INSTANCES=instances.json)\n"
    )


def test_a_model_dir_without_an_artifact_is_one_error_line_and_exit_2(tmp_path):
    request = tmp_path / "instances.json"
    request.write_text('{"instances": [[1.0, 2.0]]}')
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "model.pkl").write_text("")
    missing = run_cli(f"--instances={request}", f"--model-dir={tmp_path / 'nowhere'}")
    empty = run_cli(f"--instances={request}", f"--model-dir={tmp_path / 'empty'}")
    assert (missing.returncode, empty.returncode) == (2, 2)
    assert missing.stderr == (
        f"ERROR: {tmp_path / 'nowhere'}: no such model dir (e.g. {serving.DEFAULT_MODEL_DIR})\n"
    )
    assert empty.stderr == (
        f"ERROR: {tmp_path / 'empty'}: no saved_model.pb, model.bst, config.json "
        "(an exported model dir of the trainer)\n"
    )


def test_the_default_model_dir_is_the_newest_local_jobs(tmp_path):
    request = tmp_path / "instances.json"
    request.write_text('{"instances": [[1.0]]}')
    done = subprocess.run(
        [sys.executable, "-m", "vertex_trainer_tools", "predict-local", f"--instances={request}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "outputs/local/latest/model: no such model dir" in done.stderr


def test_each_export_is_served_by_its_containers_path(tmp_path):
    for artifact, framework in [
        ("saved_model.pb", "tensorflow"),
        ("model.bst", "xgboost"),
        ("config.json", "huggingface"),
    ]:
        folder = tmp_path / framework
        folder.mkdir()
        (folder / artifact).write_text("{}")
        assert serving.framework_of(folder) == framework


class Tensor(list):
    """What tf_rows reads of an output tensor: ``.numpy().tolist()``."""

    def numpy(self):
        return self

    def tolist(self):
        return list(self)


def test_row_format_requests_become_one_batch_per_input():
    # one input: instances are its values (or {name: value}); b64 objects are bytes
    assert tf_rows.columns([[1, 2], {"images": [3, 4]}], ["images"]) == {"images": [[1, 2], [3, 4]]}
    b64 = {"b64": "aGk="}
    assert tf_rows.columns([b64], ["image_bytes"]) == {"image_bytes": [b"hi"]}
    # several inputs: each instance names every one
    named = [{"a": 1, "b": [2]}, {"a": 3, "b": [4]}]
    assert tf_rows.columns(named, ["a", "b"]) == {"a": [1, 3], "b": [[2], [4]]}
    with pytest.raises(ToolError, match=r"instances\[1\]: .*\['a', 'b'\], got \['a'\]"):
        tf_rows.columns([{"a": 1, "b": 2}, {"a": 1}], ["a", "b"])


def test_row_format_answers_one_prediction_per_instance():
    # one output: the values themselves
    assert tf_rows.rows({"scores": Tensor([[0.25, 0.75], [1.0, 0.0]])}) == [[0.25, 0.75], [1.0, 0]]
    # several outputs: one object per instance; strings as text, *_bytes outputs as b64
    outputs = {
        "class_name": Tensor([b"cat", b"dog"]),
        "class_index": Tensor([0, 1]),
        "raw_bytes": Tensor([b"\x00", b"\x01"]),
    }
    assert tf_rows.rows(outputs) == [
        {"class_index": 0, "class_name": "cat", "raw_bytes": {"b64": "AA=="}},
        {"class_index": 1, "class_name": "dog", "raw_bytes": {"b64": "AQ=="}},
    ]


# A stand-in for hf-serve: the Vertex side of its contract (routes and port from AIP_*, the
# instances list, one answer per instance) with a "model" that labels a text by its length.
FAKE_HF_SERVE = """
import json, os
from http.server import BaseHTTPRequestHandler, HTTPServer

def main():
    assert os.environ["AIP_MODE"] == "PREDICTION" and os.environ["HF_TASK"] == "text-classification"
    config = json.load(open(os.path.join(os.environ["MODEL_DIR"], "config.json")))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == os.environ["AIP_HEALTH_ROUTE"] else 404)
            self.end_headers()

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != os.environ["AIP_PREDICT_ROUTE"] or "instances" not in body:
                self.send_response(422)
                self.end_headers()
                return self.wfile.write(b'{"detail": "instances: Field required"}')
            labels = config["id2label"]
            texts = body["instances"]
            predictions = [[{"label": labels[str(len(t) % 2)], "score": 1.0}] for t in texts]
            self.send_response(200)
            self.end_headers()
            self.wfile.write(json.dumps({"predictions": predictions}).encode())

    HTTPServer(("127.0.0.1", int(os.environ["AIP_HTTP_PORT"])), Handler).serve_forever()
"""


def test_hf_serve_is_started_as_the_container_does_and_asked_once(tmp_path, monkeypatch):
    package = tmp_path / "site" / "hf_serve"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "cli.py").write_text(textwrap.dedent(FAKE_HF_SERVE))
    monkeypatch.setattr(envs, "hf_serve_path", lambda python: tmp_path / "site")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"id2label": {"0": "even", "1": "odd"}}))

    answer = serving.predict(model, {"instances": ["ab", "abc"]})
    assert answer == {
        "predictions": [[{"label": "even", "score": 1.0}], [{"label": "odd", "score": 1.0}]]
    }
    env = hf.server_env(model, 8080, tmp_path / "site")
    assert env["MODEL_DIR"] == str(model) and env["PORT"] == env["AIP_HTTP_PORT"] == "8080"


def test_a_server_that_stops_is_one_error_line(tmp_path, monkeypatch):
    package = tmp_path / "site" / "hf_serve"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "cli.py").write_text("def main():\n    raise SystemExit('no model in MODEL_DIR')\n")
    monkeypatch.setattr(envs, "hf_serve_path", lambda python: tmp_path / "site")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ToolError, match="hf-serve stopped: no model in MODEL_DIR"):
        hf.predict(tmp_path, {"instances": ["x"]})


TRAIN_2_1 = """
import sys, numpy as np, xgboost as xgb
rng = np.random.default_rng(0)
x = rng.normal(size=(200, 3)).astype(np.float32)
booster = xgb.train({"objective": "binary:logistic"}, xgb.DMatrix(x, label=x[:, 0] > 0), 5)
booster.save_model(sys.argv[1] + "/model.bst")
print(booster.predict(xgb.DMatrix(x[:4])).tolist())
print(x[:4].tolist())
"""


@pytest.mark.slow
def test_xgboost_answers_from_the_prediction_images_version(tmp_path):
    python = envs.xgboost_env()  # made once per machine (a pip install), then reused
    trained = subprocess.run(
        [str(python), "-c", TRAIN_2_1, str(tmp_path)], capture_output=True, text=True, check=True
    )
    expected, rows = (json.loads(line) for line in trained.stdout.splitlines())
    request = tmp_path / "instances.json"
    request.write_text(json.dumps({"instances": rows}))

    done = run_cli(f"--instances={request}", f"--model-dir={tmp_path}")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"predictions": pytest.approx(expected)}
    assert f"served by {envs.XGBOOST.replace('-cpu==', ' ')}" in done.stderr
    request.with_name("bad.json").write_text('{"instances": [[1, 2]]}')
    wrong = run_cli(f"--instances={request.with_name('bad.json')}", f"--model-dir={tmp_path}")
    assert wrong.returncode == 2
    assert "3 numbers per instance expected, got shape [1, 2]" in wrong.stderr
