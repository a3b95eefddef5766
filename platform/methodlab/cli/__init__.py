"""The `methodlab` command line (typer): one module per verb, assembled in main.py."""
