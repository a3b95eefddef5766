"""`--help` of every command (issue 42, item 8): every option and argument has a help text, a flag shows no value
type, `run --help` states the real config precedence; `validate` ends with one summary line."""

from __future__ import annotations

import click
import typer
from typer.testing import CliRunner

from methodlab.cli.main import app
from tests.conftest import REPO


def commands(group: click.Command, path=()):
    yield path, group
    for name, sub in getattr(group, "commands", {}).items():
        yield from commands(sub, (*path, name))


def test_every_option_has_help_and_flags_show_no_type():
    runner = CliRunner()
    missing, typed_flags, seen = [], [], 0
    for path, cmd in commands(typer.main.get_command(app)):
        res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert res.exit_code == 0, (path, res.output)
        seen += 1
        for param in cmd.params:
            if not (getattr(param, "help", None) or "").strip():
                missing.append(f"methodlab {' '.join(path)} {param.opts[0] if param.opts else param.name}")
        if "<bool>" in res.output:
            typed_flags.append(f"methodlab {' '.join(path)}")
    assert not missing, f"options without a help text: {missing}"
    assert not typed_flags, f"flags printed with a value type (<bool>): {typed_flags}"
    assert seen >= 15


def test_run_help_states_precedence_with_smoke():
    res = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    text = " ".join(res.output.split())
    assert "method defaults < job file < --smoke preset < key=value" in text, text


def test_validate_ends_with_one_summary_line():
    runner = CliRunner()
    files = [str(p) for p in sorted((REPO / "jobs/grokking_flatness").glob("*.yaml"))[:3]] + [str(REPO / "serve/grokking_flatness.yaml")]
    res = runner.invoke(app, ["validate", *files])
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert res.exit_code == 0 and lines == ["ok: 4 files valid (3 job, 1 serve)"], res.output
    res = runner.invoke(app, ["validate", "--verbose", *files])
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert res.exit_code == 0 and len(lines) == 5 and lines[0].startswith("ok ") and lines[-1].startswith("ok: 4 files"), res.output
