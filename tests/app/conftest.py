"""Fixtures the unit tests share."""

import os

import pytest

from classroom import export


@pytest.fixture
def chromium():
    """Tests that render a figure need Chromium: where it is missing they skip with the reason; under CI (CI=true)
    they fail instead."""
    if reason := export.available():
        if os.environ.get("CI"):
            pytest.fail(f"export tests must render in CI: {reason}")
        pytest.skip(reason)
