"""The suite is hermetic: no IP sockets, no inherited MCP_* configuration."""

import os
import socket

import pytest
from pytest_socket import SocketBlockedError


# pytest-socket warns before it raises; the warning is expected here, not a failure.
@pytest.mark.filterwarnings("ignore:A test tried to use socket.socket")
def test_ip_sockets_are_blocked() -> None:
    with pytest.raises(SocketBlockedError):
        socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with pytest.raises(SocketBlockedError):
        socket.socket(socket.AF_INET6, socket.SOCK_STREAM)


def test_unix_sockets_stay_available() -> None:
    left, right = socket.socketpair(socket.AF_UNIX)
    with left, right:
        left.sendall(b"x")
        assert right.recv(1) == b"x"


def test_no_mcp_variable_reaches_a_test() -> None:
    assert [name for name in os.environ if name.startswith("MCP_")] == []
