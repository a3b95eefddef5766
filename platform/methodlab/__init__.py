"""methodlab: NeurIPS 2025 methods as Ray jobs, Tune sweeps and Serve endpoints."""

__version__ = "0.1.0"
