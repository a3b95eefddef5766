"""`methodlab k8s render|validate`: KubeRay manifests from jobs/ and serve/ files."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from methodlab.cli.common import console, err_console, friendly

app = typer.Typer(help="KubeRay RayCluster / RayJob / RayService manifests.", no_args_is_help=True)


@app.command("render")
@friendly
def render(
    repo: str = typer.Option(".", help="Repository root holding jobs/ and serve/."),
    out: str = typer.Option("k8s", help="Output folder."),
) -> None:
    """Render raycluster.yaml, rayjob-<method>-<preset>.yaml and rayservice-<app>.yaml.

    Example: methodlab k8s render && methodlab k8s validate k8s/*.yaml
    """
    files = __import__("methodlab.cluster.k8s", fromlist=["render_all"]).render_all(Path(repo), Path(out))
    for name in files:
        console.print(f"wrote {Path(out) / name}")


@app.command("validate")
@friendly
def validate(
    files: Optional[List[str]] = typer.Argument(None, help="Manifests (default k8s/*.yaml)."),
    crds: Optional[str] = typer.Option(None, "--crds", help="Folder with the CRD YAMLs of your KubeRay install (default: the bundled KubeRay v1.7.0 CRDs)."),
) -> None:
    """Validate manifests against the KubeRay v1 CRD schemas and methodlab's rules.

    Example: methodlab k8s validate --crds ~/kuberay/helm-chart/kuberay-operator/crds
    """
    from methodlab.cluster.k8s import validate_manifest_file
    from methodlab.core.errors import MethodlabError

    paths = [Path(f) for f in files] if files else sorted(Path("k8s").glob("*.yaml"))
    bad = 0
    for p in paths:
        try:
            validate_manifest_file(p, Path(crds) if crds else None)
            console.print(f"[green]ok[/] {p}")
        except MethodlabError as err:
            bad += 1
            err_console.print(f"[bold red]invalid[/] {err}", highlight=False, soft_wrap=True)
    if bad:
        raise typer.Exit(2)
