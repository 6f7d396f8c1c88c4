"""Unit tests share one process: a test that configures logging (``gputenant run`` calls
kopf.configure) must not leave a handler writing to a stream pytest has since closed."""

import logging

import pytest


@pytest.fixture(autouse=True)
def restore_root_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
