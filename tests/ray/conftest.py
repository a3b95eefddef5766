import pytest

pytestmark = pytest.mark.ray
