"""Fixtures the in-process tests of the stdio shell share."""

import contextlib
import os
from collections.abc import Iterator

import pytest


@pytest.fixture
def pipes() -> Iterator[tuple[int, int, int, int]]:
    """(client writes, server reads, server writes, client reads)."""
    server_in, client_out = os.pipe()
    client_in, server_out = os.pipe()
    yield client_out, server_in, server_out, client_in
    for fd in (client_out, server_in, server_out, client_in):
        with contextlib.suppress(OSError):
            os.close(fd)
