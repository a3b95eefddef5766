"""`methodlab predict SLUG --checkpoint DIR INPUT.json`: the Predictor in-process, same validation as Serve.

`--schema` prints the checkpoint's request and response JSON schemas (what GET /schema answers) without a server."""

from __future__ import annotations

import json
import math
from typing import Any, Optional

import typer

from methodlab.cli.common import console, friendly


def input_model(predictor) -> Any:
    """The checkpoint's own request type (`input_model()`: its sizes, ranges, required fields), else the
    method's generic Input: the type Serve validates a request with."""
    fn = getattr(predictor, "input_model", None)
    return fn() if callable(fn) else type(predictor).Input


def non_finite(data: Any, path: str = "") -> tuple[str, str] | None:
    """(location, "NaN" | "Infinity" | "-Infinity") of the first non-finite number in parsed JSON, else None."""
    if isinstance(data, float) and not math.isfinite(data):
        return path or "<input>", "NaN" if data != data else ("Infinity" if data > 0 else "-Infinity")
    if isinstance(data, dict):
        items = ((f"{path}.{k}" if path else str(k), v) for k, v in data.items())
    elif isinstance(data, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(data))
    else:
        return None
    for where, v in items:
        found = non_finite(v, where)
        if found:
            return found
    return None


def validation_message(err, prefix: str = "") -> str:
    """The first pydantic error as `field: message` (a union Input's member class names dropped), as Serve says it."""
    e = err.errors()[0]
    parts = list(e["loc"])
    while parts and isinstance(parts[0], str) and parts[0][:1].isupper():
        parts.pop(0)
    loc = ".".join(str(p) for p in parts)
    field = f"{prefix}{loc}" if loc else prefix.rstrip(".") or "<input>"
    msg = "unknown field" if e["type"] == "extra_forbidden" else e["msg"]
    more = f" (+{len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
    return f"{field}: {msg}{more}"


@friendly
def predict(
    slug: str = typer.Argument(..., help="Method slug (`methodlab methods list`)."),
    input_file: Optional[str] = typer.Argument(None, help="JSON file: one input object or a non-empty list; - for "
                                                           "stdin. Not with --schema."),
    checkpoint: str = typer.Option(..., "--checkpoint", help="Checkpoint directory."),
    schema: bool = typer.Option(False, "--schema", help="Print the checkpoint's input and output JSON schemas "
                                                         "(what a served app's GET .../schema answers) and exit."),
) -> None:
    """Run a checkpoint's Predictor on JSON input and print JSON output.

    Example: echo '{"a": 3, "b": 5}' | methodlab predict grokking_flatness - --checkpoint results/.../checkpoint_...

    What it takes: methodlab predict grokking_flatness --schema --checkpoint results/.../checkpoint_...
    """
    from pydantic import TypeAdapter, ValidationError

    from methodlab.cli.common import read_text_input
    from methodlab.core.errors import ConfigError, FieldError
    from methodlab.core.registry import get_spec

    spec = get_spec(slug)
    if schema:
        if input_file is not None:
            raise ConfigError("--schema takes no INPUT file: drop the file, or drop --schema to predict", field="INPUT")
        cls = spec.predictor_cls()
        predictor = cls.from_checkpoint(checkpoint)
        out = {"method": slug, "checkpoint": checkpoint, "input": TypeAdapter(input_model(predictor)).json_schema(),
               "output": cls.Output.model_json_schema()}
        console.print_json(json.dumps(out))
        return
    if input_file is None:
        raise ConfigError("give an INPUT JSON file (- for stdin), or --schema to see what it takes", field="INPUT")
    where = "<stdin>" if input_file == "-" else input_file
    text = read_text_input(input_file)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"malformed JSON: {err}", where=where) from None
    except RecursionError:
        raise ConfigError("JSON nested too deeply", where=where) from None
    single = not isinstance(data, list)
    items = [data] if single else data
    if not items:
        raise ConfigError("empty list: give one input object or a non-empty list of them", where=where)
    bad = non_finite(data)
    if bad:
        raise ConfigError(f"{bad[1]} is not a number a model takes (JSON has no {bad[1]}): give a finite number",
                          where=where, field=bad[0])
    cls = spec.predictor_cls()
    predictor = cls.from_checkpoint(checkpoint)
    adapter = TypeAdapter(input_model(predictor))  # the checkpoint's schema, as Serve and --schema show it
    inputs = []
    for i, item in enumerate(items):
        try:
            inputs.append(adapter.validate_python(item))
        except ValidationError as err:
            raise ConfigError(validation_message(err, "" if single else f"[{i}]."), where=where) from None
    try:
        outs = predictor(inputs)
    except FieldError as err:  # out of this checkpoint's domain: name the file and the field as the user wrote it
        field = err.field.removeprefix("[0].").removeprefix("[0]") if single else err.field
        raise ConfigError(f"{field or '<input>'}: {err.message}", where=where) from None
    dumped = [o.model_dump(mode="json") for o in outs]
    console.print_json(json.dumps(dumped[0] if single else dumped))
