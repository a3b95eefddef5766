"""`methodlab`: run / tune / serve / submit / k8s / results / reproduce / quickstart."""

from __future__ import annotations

import sys

import typer

from methodlab.cli import k8s_cmd, methods_cmd, tune_cmd
from methodlab.cli.common import example
from methodlab.cli.predict_cmd import predict
from methodlab.cli.quickstart_cmd import quickstart
from methodlab.cli.reproduce_cmd import reproduce
from methodlab.cli.results_cmd import results
from methodlab.cli.run_cmd import HELP_EPILOG, run
from methodlab.cli.serve_cmd import serve_cmd
from methodlab.cli.submit_cmd import submit
from methodlab.cli.validate_cmd import validate

app = typer.Typer(
    name="methodlab",
    help="NeurIPS 2025 methods as Ray jobs, Tune sweeps and Serve endpoints.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(methods_cmd.app, name="methods")
app.add_typer(tune_cmd.app, name="tune")
app.add_typer(k8s_cmd.app, name="k8s")
app.command("run", epilog=HELP_EPILOG)(run)
app.command("validate")(validate)
app.command("results")(results)
app.command("predict")(predict)
app.command("serve")(serve_cmd)
app.command("submit")(submit)
app.command("reproduce")(reproduce)
app.command("quickstart", epilog=example("make demo   # = methodlab quickstart"))(quickstart)


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    # `methodlab tune SPACE.yaml` is shorthand for `methodlab tune run SPACE.yaml`.
    if len(args) >= 2 and args[0] == "tune" and args[1] not in ("run", "resume") and not args[1].startswith("-"):
        args.insert(1, "run")
    app(args=args, prog_name="methodlab")


if __name__ == "__main__":
    main()
