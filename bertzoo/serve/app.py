"""The HTTP API of `bertzoo serve`, on FastAPI (its OpenAPI page is at /docs, the schema at /openapi.json).

    POST /predict   {"texts": [...]} or {"inputs": [{"text": ..., "text_pair": ...}, ...]} -> {"predictions": [...]}
    POST /embed     {"texts": [...], "normalize": null}                                  -> {"embeddings": [[...]]}
    POST /generate  {"texts": [...], "generation": {"max_new_tokens": 16, ...}}           -> {"generations": [...]}
    GET  /health    200 while the process runs, with the batcher's counts
    GET  /ready     200 once the model is loaded, 503 while the server drains on shutdown

`inputs` takes what `bertzoo predict` reads per line for the model's task (a pair, {"tokens": [...]}, {"question",
"context"}, ...). Every error is a JSON object {"error": "one line naming the problem and the fix"} with a 4xx
status (5xx only for a failure of the server itself): bad JSON (400), a body over the size limit (413), too many
texts (413), missing fields, wrong types or inputs the task cannot read (422), an endpoint the model does not
serve or that does not exist (404), a wrong method (405).
"""

from __future__ import annotations

import json
from concurrent.futures import Executor
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from bertzoo.errors import BertzooError
from bertzoo.serve.batcher import Batcher
from bertzoo.serve.runners import Runner

__all__ = ["ServeSettings", "create_app"]


class ServeSettings(BaseModel):
    """The server's limits and batching knobs (`bertzoo serve` flags)."""

    max_batch: int = 32  # inputs per model call
    max_wait_ms: float = 2.0  # how long a group may wait for the requests the recent load says are coming
    max_texts: int = 256  # inputs per request
    max_body_bytes: int = 1_000_000


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, not silently ignored


class EmbedRequest(_Request):
    texts: list[str] = Field(min_length=1, description="the texts to embed")
    normalize: bool | None = Field(None, description="unit vectors; null: as the model was fine-tuned")


class PredictRequest(_Request):
    texts: list[str] | None = Field(None, min_length=1, description="single texts")
    inputs: list[dict[str, Any]] | None = Field(
        None, min_length=1, description='inputs in the task\'s fields, e.g. {"text": ..., "text_pair": ...}'
    )


class GenerateRequest(_Request):
    texts: list[str] | None = Field(None, min_length=1, description="sources (seq2seq) or prompts (a causal LM)")
    prompts: list[str] | None = Field(None, min_length=1, description="the same as texts")
    generation: dict[str, Any] | None = Field(None, description="decoding settings (a causal LM), e.g. max_new_tokens")


class EmbedResponse(BaseModel):
    embeddings: list[list[float]]


class PredictResponse(BaseModel):
    predictions: list[dict[str, Any]]


class GenerateResponse(BaseModel):
    generations: list[str]


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _json(obj: Any) -> Response:
    """A 200 JSON answer as built (numpy numbers as plain ones): validating 256 x 384 floats against the response
    model would cost more than the model."""
    from bertzoo.train.finetune import json_default

    return Response(json.dumps(obj, default=json_default, ensure_ascii=False), media_type="application/json")


def _validation_message(exc: RequestValidationError) -> tuple[int, str]:
    errors = exc.errors()
    first = errors[0] if errors else {}
    shape = 'send a JSON object such as {"texts": ["..."]} with Content-Type: application/json'
    if first.get("type") == "json_invalid":
        return 400, f"the body is not valid JSON; {shape}"
    if tuple(first.get("loc", ())) == ("body",):
        return 400, f"the body is not a JSON object; {shape}"
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
    return 422, f"{where}: {first.get('msg', 'invalid')}; see /docs for the request shapes"


def _add_error_handlers(app: FastAPI, runner: Runner) -> None:
    """Every framework error as {"error": "..."}: invalid bodies, unknown paths, wrong methods."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(*_validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            known = ", ".join(f"/{e}" for e in runner.endpoints)
            return _error(404, f"no endpoint {request.url.path}; this model serves {known}, /health and /ready")
        if exc.status_code == 405:
            return _error(405, f"{request.method} is not allowed on {request.url.path}; use POST (GET for /health)")
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def crash(request: Request, exc: Exception) -> JSONResponse:
        # The server's own failure (the request was valid): said as JSON, and the next request is served.
        return _error(500, f"the server failed on this request ({type(exc).__name__}: {exc}); see its log")


def create_app(runner: Runner, settings: ServeSettings | None = None, executor: Executor | None = None) -> FastAPI:
    """The FastAPI application serving `runner` with dynamic batching (see the module doc); model calls run on
    `executor` (default: a worker thread of the batcher's own)."""
    settings = settings or ServeSettings()

    def run(kind: str, key: Any, items: list[Any]) -> list[Any]:
        if kind == "embed":
            return runner.run_embed(items, key).tolist()
        if kind == "predict":
            return runner.run_predict(items)
        return runner.run_generate(items, json.loads(key))

    batcher = Batcher(run, settings.max_batch, settings.max_wait_ms / 1000, executor)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        app.state.ready = True
        yield
        app.state.ready = False
        await batcher.stop()

    app = FastAPI(
        title="bertzoo serve",
        description=f"{runner.kind} model {runner.name}; endpoints: " + ", ".join(f"/{e}" for e in runner.endpoints),
        lifespan=lifespan,
    )
    app.state.ready = False
    app.state.draining = False
    app.state.batcher = batcher
    app.add_middleware(_BodyLimit, limit=settings.max_body_bytes)

    _add_error_handlers(app, runner)

    def check(endpoint: str, count: int) -> JSONResponse | None:
        if endpoint not in runner.endpoints:
            known = ", ".join(f"/{e}" for e in runner.endpoints)
            return _error(404, f"this {runner.kind} model does not serve /{endpoint}; it serves {known}")
        if count > settings.max_texts:
            return _error(
                413, f"{count} inputs in one request; the limit is {settings.max_texts} (--max-texts): split it"
            )
        return None

    async def answer(kind: str, key: Any, items: list[Any]) -> Any:
        try:
            return await batcher.submit(kind, key, items)
        except BertzooError as exc:  # inputs the task cannot read, settings out of range: the client's to fix
            return _error(422, str(exc))

    @app.post("/embed", response_model=EmbedResponse)
    async def embed(body: EmbedRequest) -> Any:
        refused = check("embed", len(body.texts))
        if refused is not None:
            return refused
        out = await answer("embed", body.normalize, body.texts)
        return out if isinstance(out, JSONResponse) else _json({"embeddings": out})

    @app.post("/predict", response_model=PredictResponse)
    async def predict(body: PredictRequest) -> Any:
        if (body.texts is None) == (body.inputs is None):
            return _error(422, 'send exactly one of "texts" (single texts) or "inputs" (objects in the task\'s fields)')
        items = [{"text": t} for t in body.texts] if body.texts is not None else body.inputs
        refused = check("predict", len(items))
        if refused is not None:
            return refused
        for i, item in enumerate(items):
            item["source"] = f"request input {i}"  # the task's input checks name the input
        out = await answer("predict", None, items)
        return out if isinstance(out, JSONResponse) else _json({"predictions": out})

    @app.post("/generate", response_model=GenerateResponse)
    async def generate(body: GenerateRequest) -> Any:
        if (body.texts is None) == (body.prompts is None):
            return _error(422, 'send exactly one of "texts" or "prompts" (a list of strings)')
        texts = body.texts if body.texts is not None else body.prompts
        refused = check("generate", len(texts))
        if refused is not None:
            return refused
        if body.generation and runner.lm is None:
            return _error(422, "generation settings apply to a left-to-right LM; this seq2seq model decodes as saved")
        out = await answer("generate", json.dumps(body.generation or {}, sort_keys=True), texts)
        return out if isinstance(out, JSONResponse) else _json({"generations": out})

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": runner.name, "kind": runner.kind, "batching": batcher.stats.as_dict()}

    @app.get("/ready")
    async def ready() -> Any:
        if app.state.draining or not app.state.ready:
            return _error(503, "draining: the server is shutting down" if app.state.draining else "loading")
        return {"status": "ready", "endpoints": [f"/{e}" for e in runner.endpoints]}

    return app


class _BodyLimit:
    """ASGI middleware: a request body over `limit` bytes gets a JSON 413, checked from Content-Length and from
    the bytes actually received (a chunked body has no length)."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = f"the request body is over {self.limit:,} bytes (--max-body-bytes); send fewer or shorter texts"
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await _error(413, message)(scope, receive, send)
            return
        seen = 0

        async def counted() -> dict:
            nonlocal seen
            event = await receive()
            if event["type"] == "http.request":
                seen += len(event.get("body", b""))
                if seen > self.limit:
                    # Raised while FastAPI reads the body: it passes HTTP exceptions on to the JSON handler above.
                    raise StarletteHTTPException(413, message)
            return event

        await self.app(scope, counted, send)
