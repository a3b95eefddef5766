"""`methodlab predict SLUG --checkpoint DIR INPUT.json`: the Predictor in-process, same validation as Serve."""

from __future__ import annotations

import json

import typer

from methodlab.cli.common import console, friendly


@friendly
def predict(
    slug: str = typer.Argument(..., help="Method slug."),
    input_file: str = typer.Argument(..., help="JSON file: one input object or a list; - for stdin."),
    checkpoint: str = typer.Option(..., "--checkpoint", help="Checkpoint directory."),
) -> None:
    """Run a checkpoint's Predictor on JSON input and print JSON output.

    Example: echo '{"a": 3, "b": 5}' | methodlab predict grokking_flatness - --checkpoint results/.../checkpoint_...
    """
    import sys

    from pydantic import ValidationError

    from methodlab.core.errors import ConfigError
    from methodlab.core.registry import get_spec

    spec = get_spec(slug)
    cls = spec.predictor_cls()
    text = sys.stdin.read() if input_file == "-" else open(input_file).read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"malformed JSON: {err}", where=input_file) from None
    items = data if isinstance(data, list) else [data]
    try:
        inputs = [cls.Input.model_validate(x) for x in items]
    except ValidationError as err:
        from methodlab.core.validation import describe

        raise ConfigError(describe(err), where=input_file) from None
    outs = cls.from_checkpoint(checkpoint)(inputs)
    dumped = [o.model_dump(mode="json") for o in outs]
    console.print_json(json.dumps(dumped if isinstance(data, list) else dumped[0]))
