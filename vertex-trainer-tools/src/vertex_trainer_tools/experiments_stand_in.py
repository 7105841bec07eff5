"""An in-memory stand-in for the Vertex ML Metadata routes that Experiment tracking calls.

The routes, as ``google-cloud-aiplatform`` 2.7.0 calls them over REST for ``aiplatform.init(
experiment=)``, ``ExperimentRun.create``, ``start_run(resume=True)``, ``log_params``,
``log_metrics`` and ``end_run``: ``GET .../metadataStores/default``; contexts: ``POST
.../contexts?contextId=ID`` (409 when it exists), ``GET``/``PATCH .../contexts/ID`` (a run's
params, metrics and state live in its ``metadata``), ``POST .../contexts/ID:addContextChildren``.
Anything else (a run's TensorBoard artifact, a v1 run's execution) is not found, as for a run
without them.

``MetadataStore.route`` serves the tools' own REST stand-in (``tests/fake_vertex.py``);
``ExperimentsServer`` serves a trainer under test, and ``TrackedRun`` (the ``experiment_run``
fixture) gives that trainer the env ``vertex-tools submit`` gives a job, and reads its run.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from vertex_trainer_tools import contract

STORE = r"/v1/(projects/[^/]+/locations/[^/]+/metadataStores/default)"
STORE_PATH = re.compile(rf"^{STORE}$")
CONTEXTS = re.compile(rf"^{STORE}/contexts$")
CONTEXT = re.compile(rf"^{STORE}/contexts/([^/:]+)$")
CHILDREN = re.compile(rf"^{STORE}/contexts/([^/:]+):addContextChildren$")


class MetadataStore:
    """Contexts by resource name; the ``experiments`` (ids) exist from the start, in any
    project and region."""

    def __init__(self, experiments: tuple[str, ...] = ()):
        self.contexts: dict[str, dict] = {}
        self.seeded = set(experiments)

    def route(self, method: str, path: str, query: str, body) -> tuple[int, object] | None:
        """The answer to a metadata request; None: not a metadata route."""
        if method == "GET" and (match := STORE_PATH.match(path)):
            return 200, {"name": match.group(1)}
        if method == "POST" and (match := CONTEXTS.match(path)):
            context_id = parse_qs(query).get("contextId", [""])[0]
            if self._get(match.group(1), context_id) is not None:
                return 409, error(409, f"context {context_id} already exists", "ALREADY_EXISTS")
            return 200, self._put(match.group(1), context_id, body)
        if match := CONTEXT.match(path):
            context = self._get(*match.groups())
            if context is None:
                return 404, error(404, f"context {match.group(2)} not found")
            if method == "PATCH":
                context.update({k: v for k, v in body.items() if k != "name"})
            return 200, context
        if method == "POST" and (match := CHILDREN.match(path)):
            if self._get(*match.groups()) is None:
                return 404, error(404, f"context {match.group(2)} not found")
            return 200, {}
        if "/metadataStores/" in path:
            return 404, error(404, f"stand-in: no {method} {path}")
        return None

    def run(self, experiment: str, run: str) -> dict:
        """A run's ``metadata`` (``_params``, ``_metrics``, ``_state``), in whichever store."""
        suffix = f"/contexts/{experiment}-{run}"
        (context,) = [c for name, c in self.contexts.items() if name.endswith(suffix)]
        return context["metadata"]

    def _get(self, store: str, context_id: str) -> dict | None:
        name = f"{store}/contexts/{context_id}"
        if name not in self.contexts and context_id in self.seeded:
            self._put(store, context_id, {"schemaTitle": "system.Experiment"})
        return self.contexts.get(name)

    def _put(self, store: str, context_id: str, body: dict) -> dict:
        name = f"{store}/contexts/{context_id}"
        self.contexts[name] = {"metadata": {}, **body, "name": name, "displayName": context_id}
        if body.get("displayName"):
            self.contexts[name]["displayName"] = body["displayName"]
        return self.contexts[name]


class ExperimentsServer:
    """``with ExperimentsServer() as server:`` a local HTTP server for ``VERTEX_API_ENDPOINT``;
    ``server.requests`` lists ``(method, path, JSON body)``. ``refuse=403``: every request is
    refused (a service account without Vertex AI rights)."""

    def __init__(self, experiments: tuple[str, ...] = (), refuse: int | None = None):
        self.store = MetadataStore(experiments)
        self.refuse = refuse
        self.requests: list[tuple[str, str, object]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> ExperimentsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, method: str, raw_path: str, body: bytes) -> tuple[int, object]:
        parts = urlsplit(raw_path)
        parsed = json.loads(body) if body else None
        with self._lock:
            self.requests.append((method, unquote(parts.path), parsed))
            if self.refuse:
                return self.refuse, error(self.refuse, "stand-in refuses", "PERMISSION_DENIED")
            found = self.store.route(method, unquote(parts.path), parts.query, parsed)
        return found or (404, error(404, f"stand-in: no route for {method} {parts.path}"))


class TrackedRun:
    """One job's Experiment run at the stand-in: ``env`` for the trainer (``AIP_EXPERIMENT_*``
    as full resource names, as ``vertex-tools submit`` sets them, and ``VERTEX_API_ENDPOINT``);
    ``logged()``: the run's ``_params``, ``_metrics``, ``_state``; ``evaluations()``: the run's
    metrics after each evaluation, in order."""

    def __init__(self, server: ExperimentsServer, experiment: str = "tests", run: str = "run-1"):
        self.server, self.experiment, self.run = server, experiment, run
        self.env = {
            **contract.experiment_env("demo-project", "us-central1", experiment, run),
            "VERTEX_API_ENDPOINT": server.url,
        }

    def logged(self) -> dict:
        return self.server.store.run(self.experiment, self.run)

    def evaluations(self) -> list[dict]:
        path = self.env[contract.EXPERIMENT_RUN_ENV]
        seen: list[dict] = []
        for method, request_path, body in self.server.requests:
            if method != "PATCH" or not request_path.endswith(path):
                continue
            metrics = body["metadata"].get("_metrics", {})
            final = any(name.startswith("final_") for name in metrics)
            if metrics and not final and (not seen or seen[-1] != metrics):
                seen.append(metrics)
        return seen


def _handler(server: ExperimentsServer):
    class Handler(BaseHTTPRequestHandler):
        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            status, answer = server.answer(method, self.path, self.rfile.read(length))
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802 (http.server's naming)
            self._serve("GET")

        def do_POST(self):  # noqa: N802
            self._serve("POST")

        def do_PATCH(self):  # noqa: N802
            self._serve("PATCH")

        def log_message(self, *args):
            pass

    return Handler


def error(code: int, message: str, status: str = "NOT_FOUND") -> dict:
    return {"error": {"code": code, "message": message, "status": status}}
