"""Pydantic models of the YAML files in jobs/, search_spaces/ and serve/, and their loaders."""

from methodlab.specs.files import load_job, load_search_space, load_serve_file

__all__ = ["load_job", "load_search_space", "load_serve_file"]
