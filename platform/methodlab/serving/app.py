"""Generic Ray Serve application: POST /<route>/predict, GET /<route>/schema, /healthz, /metrics.

Bad input never reaches a 500: malformed JSON 400, body over the limit 413, schema violations and
out-of-domain fields 422 naming the field, unknown model id 404. Requests are batched with
@serve.batch and grouped by multiplexed model id (the top-k checkpoints of a sweep)."""

from __future__ import annotations

import json
import weakref
from typing import Any

from pydantic import TypeAdapter, ValidationError
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

from methodlab.core.errors import FieldError
from methodlab.core.registry import get_spec
from methodlab.serving.checkpoints import resolve_checkpoints
from methodlab.specs.serve import AppArgs


def error(status: int, message: str, field: str | None = None) -> JSONResponse:
    return JSONResponse({"error": message, "field": field}, status_code=status)


def finite_json(data: Any) -> Any:
    """Reject NaN/inf anywhere in an Output (they are not JSON): raises ValueError."""
    return json.loads(json.dumps(data, allow_nan=False))


def pydantic_error(err: ValidationError, prefix: str = "") -> tuple[str, str]:
    e = err.errors()[0]
    # a union Input (one of several request shapes) prefixes the member's class name: not a field of the body
    parts = list(e["loc"])
    while parts and isinstance(parts[0], str) and parts[0][:1].isupper():
        parts.pop(0)
    loc = ".".join(str(p) for p in parts)
    field = f"{prefix}{loc}" if loc else prefix or "<body>"
    msg = "unknown field" if e["type"] == "extra_forbidden" else e["msg"]
    more = f" (+{len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
    return field, f"{field}: {msg}{more}"


def replica_device(args: AppArgs):
    """The replica's device: its GPU when the serve file gives it num_gpus (Ray sets CUDA_VISIBLE_DEVICES),
    else the CPU; threads follow num_cpus. Checkpoints are portable: predictors load with map_location."""
    import ray

    from methodlab.core.device import resolve_device, set_threads

    set_threads(max(1, int(args.num_cpus)))
    return resolve_device(args.num_gpus > 0, where="args.num_gpus", gpu_ids=ray.get_gpu_ids())


class MethodDeployment:
    def __init__(self, args: dict, checkpoints: list[tuple[str, str]]):
        self.args = AppArgs.model_validate(args)
        self.spec = get_spec(self.args.method)
        self.predictor_cls = self.spec.predictor_cls()
        self.paths = dict(checkpoints)
        self.default_id = checkpoints[0][0]
        self.device = replica_device(self.args)
        self._default = self.predictor_cls.from_checkpoint(self.paths[self.default_id], device=self.device)
        self._adapters = weakref.WeakKeyDictionary()  # predictor -> TypeAdapter; evicted models drop theirs
        self.predict_batch.set_max_batch_size(self.args.max_batch_size)
        self.predict_batch.set_batch_wait_timeout_s(self.args.batch_wait_timeout_s)

    @serve.multiplexed(max_num_models_per_replica=16)
    async def get_model(self, model_id: str):
        return self.predictor_cls.from_checkpoint(self.paths[model_id], device=self.device)

    @staticmethod
    def input_model(predictor):
        """The Input type of the checkpoint a predictor serves (`input_model()`: its sizes, ranges and required
        fields; a model or a union of models), or the method's generic Input when it has no specialised one."""
        fn = getattr(predictor, "input_model", None)
        return fn() if callable(fn) else type(predictor).Input

    def _adapter(self, predictor) -> TypeAdapter:
        if predictor not in self._adapters:
            self._adapters[predictor] = TypeAdapter(self.input_model(predictor))
        return self._adapters[predictor]

    async def _model(self, model_id: str):
        return self._default if model_id == self.default_id else await self.get_model(model_id)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.002)
    async def predict_batch(self, requests: list[tuple[str, list]]) -> list[Any]:
        """One predictor call per model id for the whole batch; a request whose items fail
        domain checks is re-run alone so it cannot fail its neighbours."""
        results: list[Any] = [None] * len(requests)
        groups: dict[str, list[int]] = {}
        for i, (model_id, _) in enumerate(requests):
            groups.setdefault(model_id, []).append(i)
        for model_id, idxs in groups.items():
            model = await self._model(model_id)
            flat = [x for i in idxs for x in requests[i][1]]
            try:
                outs = model(flat)
                pos = 0
                for i in idxs:
                    n = len(requests[i][1])
                    results[i] = outs[pos:pos + n]
                    pos += n
            except FieldError:
                for i in idxs:
                    try:
                        results[i] = model(requests[i][1])
                    except FieldError as err:
                        results[i] = err
        return results

    async def __call__(self, request: Request) -> JSONResponse:
        action = request.url.path.rstrip("/").rsplit("/", 1)[-1]
        try:
            if request.method == "GET":
                return await self._get(action)
            if request.method == "POST" and action == "predict":
                return await self._predict(request)
            return error(404 if action not in ("predict", "schema", "healthz", "metrics") else 405,
                         f"{request.method} {request.url.path}: use POST .../predict or GET .../schema|healthz|metrics")
        except FieldError as err:
            return error(422, str(err), err.field)
        except Exception as err:  # noqa: BLE001 - last line of defence: log, answer, keep the replica alive
            import logging

            logging.getLogger("ray.serve").exception("unexpected error")
            return error(500, f"internal error: {err.__class__.__name__}")

    async def _get(self, action: str) -> JSONResponse:
        if action == "healthz":
            return JSONResponse({"status": "ok", "method": self.spec.slug, "models": list(self.paths)})
        if action == "schema":
            model_id = serve.get_multiplexed_model_id() or self.default_id
            if model_id not in self.paths:
                return error(404, f"unknown model id {model_id!r}; available: {list(self.paths)}", "serve_multiplexed_model_id")
            model = await self._model(model_id)
            return JSONResponse({"method": self.spec.slug, "input": self._adapter(model).json_schema(),
                                 "output": self.predictor_cls.Output.model_json_schema(),
                                 "models": list(self.paths), "default_model": self.default_id,
                                 "max_items": self.args.max_items, "max_body_bytes": self.args.max_body_bytes})
        if action == "metrics" and hasattr(self._default, "metrics"):
            model_id = serve.get_multiplexed_model_id() or self.default_id
            if model_id not in self.paths:
                return error(404, f"unknown model id {model_id!r}; available: {list(self.paths)}", "serve_multiplexed_model_id")
            model = await self._model(model_id)
            return JSONResponse(finite_json(model.metrics()))
        return error(404, f"unknown endpoint {action!r}")

    async def _predict(self, request: Request) -> JSONResponse:
        limit = self.args.max_body_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            return error(413, f"body of {declared} bytes exceeds the limit of {limit}")
        body = await request.body()
        if len(body) > limit:
            return error(413, f"body of {len(body)} bytes exceeds the limit of {limit}")
        try:
            payload = json.loads(body, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(f"{c} is not allowed")))
        except (ValueError, UnicodeDecodeError, RecursionError) as err:  # RecursionError: "[[[[..." nested too deep
            return error(400, f"malformed JSON: {err}")
        single = not isinstance(payload, list)
        items = [payload] if single else payload
        if not items:
            return error(422, "empty list: send one item or a non-empty list", "<body>")
        if len(items) > self.args.max_items:
            return error(413, f"{len(items)} items exceed max_items={self.args.max_items}", "<body>")
        model_id = serve.get_multiplexed_model_id() or self.default_id
        if model_id not in self.paths:
            return error(404, f"unknown model id {model_id!r}; available: {list(self.paths)}", "serve_multiplexed_model_id")
        adapter = self._adapter(await self._model(model_id))  # the served checkpoint's schema, as GET /schema shows
        inputs = []
        for i, item in enumerate(items):
            try:
                inputs.append(adapter.validate_python(item))
            except ValidationError as err:
                field, msg = pydantic_error(err, "" if single else f"[{i}].")
                return error(422, msg, field)
        out = await self.predict_batch((model_id, inputs))
        if isinstance(out, FieldError):
            field = out.field.replace("[0].", "", 1) if single else out.field
            return error(422, f"{field}: {out.message}", field)
        try:
            data = finite_json([o.model_dump(mode="json") for o in out])
        except ValueError:
            return error(422, "the model produced a non-finite value for this input", "<body>")
        return JSONResponse(data[0] if single else data)


def actor_options(args: AppArgs) -> dict:
    """The replica's Ray actor options from the serve file's args (num_gpus only when asked for)."""
    opts = {"num_cpus": args.num_cpus}
    if args.num_gpus > 0:
        opts["num_gpus"] = args.num_gpus
    return opts


def build(args: dict):
    """Application builder named by serve/*.yaml (`import_path: methodlab.serving.app:build`)."""
    parsed = AppArgs.model_validate(args)
    checkpoints = resolve_checkpoints(parsed)
    deployment = serve.deployment(
        MethodDeployment, name=f"{parsed.method}", max_ongoing_requests=max(64, 2 * parsed.max_batch_size),
        ray_actor_options=actor_options(parsed),
        # requests take milliseconds: a replica being stopped drains in well under 2 s, and a stop (SIGTERM
        # under Kubernetes / systemd) must finish inside their ~10 s grace period (Serve's default waits 20 s)
        graceful_shutdown_timeout_s=2.0, graceful_shutdown_wait_loop_s=0.5,
    )
    return deployment.bind(parsed.model_dump(mode="json"), checkpoints)


__all__ = ["build", "MethodDeployment"]
