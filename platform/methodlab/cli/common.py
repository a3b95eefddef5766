"""Shared CLI plumbing: one-line errors instead of tracebacks, a rich console."""

from __future__ import annotations

import functools
import os
import sys

import typer
from rich.console import Console

from methodlab.core.errors import ConfigError, MethodlabError

console = Console(stderr=False, soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


def fit_console_width() -> None:
    """Piped into a log file, rich would assume 80 columns and cut sweep tables to "tri…"; a log has no width.
    Decided when a command runs (not at import: no module reads the environment then)."""
    if not (sys.stdout.isatty() or os.environ.get("COLUMNS")):
        console.width = 200


def _flags_take_no_value() -> None:
    """typer prints a value type for every option, `--quiet <bool>` included: a flag takes no value, so none."""
    from typer.core import TyperOption

    if getattr(TyperOption.display_type_rich, "_flag_aware", False):
        return
    original = TyperOption.display_type_rich

    def display_type_rich(self, ctx):
        if self.is_flag or self.count:
            return None
        return original(self, ctx)

    display_type_rich._flag_aware = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich


def _one_line_usage_errors() -> None:
    """A usage error (missing argument, unknown option, bad value) prints one line too, not typer's boxed panel."""
    from typer import rich_utils

    if getattr(rich_utils.rich_format_error, "_one_line", False):
        return

    def rich_format_error(self) -> None:
        if self.__class__.__name__ == "NoArgsIsHelpError":
            return
        ctx = getattr(self, "ctx", None)
        where = ctx.command_path if ctx is not None else "methodlab"
        from rich.markup import escape

        message = " ".join(self.format_message().split())
        err_console.print(f"[bold red]error:[/] {escape(where)}: {escape(message)} (see {escape(where)} --help)",
                          highlight=False, soft_wrap=True)

    rich_format_error._one_line = True  # type: ignore[attr-defined]
    rich_utils.rich_format_error = rich_format_error


_flags_take_no_value()
_one_line_usage_errors()

# Storage URI schemes pyarrow's FileSystem.from_uri knows (what Ray Train and Tune use); anything else
# (`foo://bar`) would become a local folder named `foo:`.
STORAGE_SCHEMES = ("s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss", "file", "local", "mock")


def checked_storage(configured: str | None, cli: str | None = None, *, where: str | None = None,
                    field: str = "run.storage_path") -> str:
    """resolve_storage plus the checks a run would otherwise fail on after starting (with a traceback): a known URI
    scheme; a local path that is a folder, or can be created. Errors name what gave the path."""
    from methodlab.runners.paths import is_uri, resolve_storage

    if cli:
        src: dict = {"field": "--storage"}
    elif configured:
        src = {"where": where, "field": field}
    elif os.environ.get("METHODLAB_STORAGE"):
        src = {"field": "METHODLAB_STORAGE"}
    else:
        src = {"field": "storage ./results"}
    try:
        store = resolve_storage(configured, cli)
    except RuntimeError as err:  # `~someone/x` for an unknown user
        raise ConfigError(f"{err}: give an absolute folder", **src) from None
    local = store
    if is_uri(store):
        scheme = check_storage_scheme(store, **src)
        if scheme not in ("file", "local"):
            return store  # checked by the cluster's file system when the run starts
        from urllib.parse import unquote, urlparse

        local = unquote(urlparse(store).path)
    writable_folder(local, **src)
    return store


def writable_folder(path: str, **src) -> None:
    """A folder a command writes into: created if missing; a file in its place, a parent that cannot hold it or
    no write permission is one ConfigError naming `src` (where / field)."""
    from pathlib import Path

    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder} is a file, not a folder: give a folder (it is created if missing)", **src)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"cannot create the folder {folder} ({err.strerror or err}): give a folder you can "
                          "write to", **src) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{folder} is not writable: give a folder you can write to", **src)


def check_storage_scheme(store: str, **src) -> str | None:
    """A storage URI's scheme, refused (one ConfigError naming `src`) unless pyarrow knows it; None for a path."""
    from methodlab.runners.paths import is_uri

    if not is_uri(store):
        return None
    scheme = store.split("://", 1)[0].lower()
    if scheme not in STORAGE_SCHEMES:
        raise ConfigError(f"unknown URI scheme {scheme}:// in {store!r}: give a local folder or a URI of "
                          f"{', '.join(s + '://' for s in STORAGE_SCHEMES[:5])} or file://", **src)
    return scheme


def read_text_input(path: str, what: str = "input") -> str:
    """A user's text file (or - for stdin) as str; missing, a folder or not UTF-8 is one ConfigError naming it."""
    if path == "-":
        raw = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
        where = "<stdin>"
    else:
        from pathlib import Path

        p = Path(path)
        if not p.exists():
            raise ConfigError(f"{what} file not found: check the path (or give - to read stdin)", where=path)
        if not p.is_file():
            raise ConfigError(f"is a folder: give the {what} file in it (or - to read stdin)", where=path)
        try:
            raw = p.read_bytes()
        except OSError as err:
            raise ConfigError(f"cannot read it ({err.strerror or err})", where=path) from None
        where = path
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"not UTF-8 text (byte {err.start}): give a JSON text file", where=where) from None


def friendly(fn):
    """Known errors (bad files, missing checkpoints, unknown methods) print one line and exit 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        fit_console_width()
        try:
            return fn(*args, **kwargs)
        except MethodlabError as err:
            err_console.print(f"[bold red]error:[/] {err}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err_console.print("interrupted; re-run the same command to resume from the last checkpoint")
            raise typer.Exit(130) from None

    return wrapper


def example(text: str) -> str:
    """Help epilog with an example invocation."""
    return f"Example:\n\n  {text}"


def exit_code(ok: bool) -> None:
    if not ok:
        sys.exit(1)
