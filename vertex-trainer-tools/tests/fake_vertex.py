"""A local HTTP stand-in for the Google Cloud REST APIs that ``submit.py`` calls.

Point the tool at it with ``VERTEX_API_ENDPOINT=<server.url>``. It answers:

- Vertex AI: ``POST /v1/projects/P/locations/L/{customJobs,hyperparameterTuningJobs}`` stores
  the body and returns it with a ``name``; ``GET /v1/<name>`` echoes it with the state moving
  PENDING -> RUNNING (``polls_before_end`` times) -> ``end_state`` (an ``error`` when it failed);
  experiments and their runs: the Vertex ML Metadata routes of
  ``vertex_trainer_tools.experiments_stand_in`` (``server.metadata``; ``experiments`` exist);
  the Model Registry: ``GET .../models?filter=display_name="X"``, ``POST .../models:upload`` (a
  new model, or a new version of ``parentModel``; the operation is done at once) and
  ``GET .../operations/<n>``;
- Cloud Storage (JSON API): bucket metadata with ``bucket_location``, multipart uploads, and
  listing them (``model_files``: each created job "writes" those files to its ``model/``);
- Artifact Registry (Docker registry API): ``HEAD /v2/<path>/manifests/<tag>``, found when the
  image is in ``images`` (``None``: every image exists).

Each request is recorded in ``server.requests`` as ``(method, path, parsed JSON body or bytes)``.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from vertex_trainer_tools.experiments_stand_in import MetadataStore

JOB_COLLECTION = re.compile(
    r"^/v1/projects/([^/]+)/locations/([^/]+)/(customJobs|hyperparameterTuningJobs)$"
)
JOB = re.compile(
    r"^/v1/(projects/[^/]+/locations/[^/]+/(?:customJobs|hyperparameterTuningJobs)/\d+)$"
)
MODELS = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+)/models(:upload)?$")
OPERATION = re.compile(r"^/v1/(projects/.+/operations/\d+)$")
BUCKET = re.compile(r"^/storage/v1/b/([^/]+)$")
OBJECTS = re.compile(r"^/storage/v1/b/([^/]+)/o$")
UPLOAD = re.compile(r"^/upload/storage/v1/b/([^/]+)/o$")
MANIFEST = re.compile(r"^/v2/(.+)/manifests/([^/]+)$")


class FakeGoogleCloud:
    """``with FakeGoogleCloud(end_state="JOB_STATE_FAILED") as server: ... server.url``."""

    def __init__(
        self,
        end_state: str = "JOB_STATE_SUCCEEDED",
        polls_before_end: int = 0,
        error_message: str = "The replica workerpool0-0 exited with a non-zero status of 1.",
        bucket_location: str = "US-CENTRAL1",
        buckets: set[str] | None = None,
        images: set[str] | None = None,
        model_files: tuple[str, ...] = (),
        experiments: tuple[str, ...] = ("my-experiment",),
    ):
        self.end_state = end_state
        self.polls_before_end = polls_before_end
        self.error_message = error_message
        self.bucket_location = bucket_location
        self.buckets = buckets
        self.images = images
        self.model_files = model_files
        self.requests: list[tuple[str, str, object]] = []
        self.jobs: dict[str, dict] = {}
        self.polls: dict[str, int] = {}
        self.uploads: dict[str, bytes] = {}
        self.models: dict[str, list[dict]] = {}  # model name -> its versions, as uploaded
        self.operations: dict[str, dict] = {}
        self.metadata = MetadataStore(experiments)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeGoogleCloud:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def created(self, kind: str = "") -> list[dict]:
        """Bodies POSTed to create jobs (``kind``: customJobs / hyperparameterTuningJobs)."""
        return [
            body
            for method, path, body in self.requests
            if method == "POST" and JOB_COLLECTION.match(path) and path.endswith(kind)
        ]

    def gets(self, name: str) -> int:
        return sum(
            1 for method, path, _ in self.requests if method == "GET" and path == f"/v1/{name}"
        )

    # -- request handling ---------------------------------------------------------------

    def _answer(self, method: str, path: str, body: bytes, query: str = "") -> tuple[int, object]:
        parsed: object = body
        if body and not path.startswith("/upload/"):
            parsed = json.loads(body)
        with self._lock:
            self.requests.append((method, path, parsed))
            if match := MODELS.match(path):
                return self._model_registry(method, match, parsed, parse_qs(query))
            if method == "GET" and (match := OBJECTS.match(path)):
                bucket, prefix = match.group(1), parse_qs(query).get("prefix", [""])[0]
                names = [u[len(f"gs://{bucket}/") :] for u in self.uploads]
                items = [{"name": n, "bucket": bucket} for n in names if n.startswith(prefix)]
                return 200, {"kind": "storage#objects", "items": items}
            return self.metadata.route(method, path, query, parsed) or self._route(
                method, path, parsed
            )

    def _model_registry(self, method: str, match, body, query) -> tuple[int, object]:
        parent, upload = match.groups()
        if method == "GET" and not upload:
            wanted = re.findall(r'display_name="(.*)"', query.get("filter", [""])[0])
            models = [
                {**versions[-1], "name": name}
                for name, versions in self.models.items()
                if name.startswith(parent) and versions[-1]["displayName"] in wanted
            ]
            return 200, {"models": models}
        if method != "POST" or not upload:
            return 404, _error(404, f"fake: no route for {method} models{upload or ''}")
        name = body.get("parentModel") or f"{parent}/models/{len(self.models) + 1}"
        if name not in self.models and body.get("parentModel"):
            return 404, _error(404, f"{name} not found")
        self.models.setdefault(name, []).append(body["model"])
        operation = f"{parent}/operations/{len(self.operations) + 1}"
        self.operations[operation] = {
            "name": operation,
            "done": True,
            "response": {
                "@type": "type.googleapis.com/google.cloud.aiplatform.v1.UploadModelResponse",
                "model": name,
                "modelVersionId": str(len(self.models[name])),
            },
        }
        return 200, self.operations[operation]

    def _route(self, method: str, path: str, body: object) -> tuple[int, object]:
        if method == "GET" and (match := OPERATION.match(path)):
            found = self.operations.get(match.group(1))
            return (200, found) if found else (404, _error(404, "no such operation"))
        if method == "POST" and (match := JOB_COLLECTION.match(path)):
            project, location, kind = match.groups()
            name = f"projects/{project}/locations/{location}/{kind}/{len(self.jobs) + 1000}"
            self.jobs[name] = {**body, "name": name, "state": "JOB_STATE_PENDING"}
            output = body.get("jobSpec", {}).get("baseOutputDirectory", {}).get("outputUriPrefix")
            for file in self.model_files if output else ():
                self.uploads[f"{output}/model/{file}"] = b""
            self.polls[name] = 0
            return 200, self.jobs[name]
        if method == "GET" and (match := JOB.match(path)):
            name = match.group(1)
            if name not in self.jobs:
                return 404, _error(404, f"{name} not found")
            self.polls[name] += 1
            job = dict(self.jobs[name])
            if self.polls[name] <= self.polls_before_end:
                job["state"] = "JOB_STATE_RUNNING"
            else:
                job["state"] = self.end_state
                if self.end_state in ("JOB_STATE_FAILED", "JOB_STATE_CANCELLED"):
                    job["error"] = {"code": 3, "message": self.error_message}
            return 200, job
        if method == "GET" and (match := BUCKET.match(path)):
            bucket = match.group(1)
            if self.buckets is not None and bucket not in self.buckets:
                return 404, _error(404, "The specified bucket does not exist.")
            location = self.bucket_location
            return 200, {"kind": "storage#bucket", "name": bucket, "location": location}
        if method == "POST" and (match := UPLOAD.match(path)):
            name = _multipart_name(body)
            self.uploads[f"gs://{match.group(1)}/{name}"] = body
            return 200, {"kind": "storage#object", "bucket": match.group(1), "name": name}
        if method == "HEAD" and (match := MANIFEST.match(path)):
            image = f"{match.group(1)}:{match.group(2)}"
            found = self.images is None or image in self.images
            return (200 if found else 404), {}
        return 404, _error(404, f"fake: no route for {method} {path}")

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                url = urlsplit(self.path)
                status, answer = fake._answer(method, unquote(url.path), body, url.query)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if method != "HEAD":
                    self.wfile.write(data)

            def do_GET(self):  # noqa: N802 (http.server's naming)
                self._serve("GET")

            def do_POST(self):  # noqa: N802
                self._serve("POST")

            def do_HEAD(self):  # noqa: N802
                self._serve("HEAD")

            def do_PATCH(self):  # noqa: N802
                self._serve("PATCH")

            def log_message(self, *args):
                pass

        return Handler


def _error(code: int, message: str) -> dict:
    return {"error": {"code": code, "message": message, "status": "NOT_FOUND"}}


def _multipart_name(body: bytes) -> str:
    """The object name from a JSON-API multipart upload (metadata part first)."""
    match = re.search(rb'"name":\s*"([^"]+)"', body)
    return match.group(1).decode() if match else "unknown"
