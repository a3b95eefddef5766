"""The conformance fixture: every registered method's smoke run (shared with the method's own tests)."""

from __future__ import annotations

import pytest

from methodlab.methods import REGISTRY
from tests.smoke import smoke_run


@pytest.fixture(scope="session", params=sorted(REGISTRY))
def method_smoke(request, smoke_root):
    return request.param, smoke_run(request.param, smoke_root)
