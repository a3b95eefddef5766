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
    files: Optional[List[str]] = typer.Argument(None, help="Job or serve files to render (default: every file in "
                                                "jobs/ and serve/, plus raycluster.yaml)."),
    repo: str = typer.Option(".", help="Repository root holding jobs/ and serve/."),
    out: str = typer.Option("k8s", help="Output folder."),
    image: Optional[str] = typer.Option(None, "--image", metavar="REGISTRY/NAME:TAG",
                                        help="The image the pods run: the one you built from k8s/Dockerfile and "
                                        "pushed (default: methodlab/methodlab:<version>-ray<rayVersion>, as in k8s/)."),
    gpu_image: Optional[str] = typer.Option(None, "--gpu-image", metavar="REGISTRY/NAME:TAG",
                                            help="The CUDA image every pod of a GPU job or serve file runs (and "
                                            "raycluster-gpu.yaml): k8s/Dockerfile built with --build-arg FLAVOUR=cu128 "
                                            "(default: the --image tag + -cu128, else "
                                            "methodlab/methodlab:<version>-ray<rayVersion>-cu128, as in k8s/)."),
) -> None:
    """Render raycluster.yaml, rayjob-<method>-<preset>.yaml and rayservice-<app>.yaml.

    Jobs with scaling.use_gpu and serve files with args.num_gpus get a GPU worker group (nvidia.com/gpu
    requests = limits, a toleration for the nvidia.com/gpu taint, the job file's kubernetes.node_selector) and the
    CUDA image on every pod.

    Example: methodlab k8s render jobs/grokking_flatness/cpu.yaml --image registry.example.com/methodlab/methodlab:0.1.0-ray2.60.0 --out deploy
    """
    from methodlab.cluster.k8s import IMAGE, check_image, gpu_image_for, render_all
    from methodlab.core.errors import ConfigError

    image = check_image(IMAGE if image is None else image)
    gpu_image = check_image(gpu_image_for(image) if gpu_image is None else gpu_image, field="--gpu-image")
    if not (Path(repo) / "jobs").is_dir() and not (Path(repo) / "serve").is_dir():
        raise ConfigError(f"{repo} has no jobs/ or serve/ folder: give the repository root", field="--repo")
    if Path(out).exists() and not Path(out).is_dir():
        raise ConfigError(f"{out} is a file, not a folder: give a folder for the manifests", field="--out")
    written = render_all(Path(repo), Path(out), image=image, files=[Path(f) for f in files] if files else None,
                         gpu_image=gpu_image)
    for name in written:
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
    from methodlab.core.errors import ConfigError, MethodlabError
    from methodlab.specs.files import read_yaml_docs

    if crds and not Path(crds).is_dir():
        raise ConfigError(f"{crds} is not a folder: give the folder holding your KubeRay CRD YAMLs", field="--crds")
    paths = [Path(f) for f in files] if files else sorted(Path("k8s").glob("*.yaml"))
    if not paths:
        raise ConfigError("no manifests: k8s/ has no *.yaml here; run `methodlab k8s render` or name the files")
    bad = 0
    for p in paths:
        try:
            read_yaml_docs(p)  # missing, unreadable or not YAML: one line
            validate_manifest_file(p, Path(crds) if crds else None)
            console.print(f"[green]ok[/] {p}")
        except MethodlabError as err:
            bad += 1
            err_console.print(f"[bold red]invalid[/] {err}", highlight=False, soft_wrap=True)
    if bad:
        raise typer.Exit(2)
