"""The protocol core: framing, JSON-RPC parsing, dispatch, the tool registry, and the stdio shell.

Everything here but `stdio` is sans-I/O: bytes or models go in, events, actions or bytes come
out, and no module imports `asyncio`, `sys` or `socket`.
"""

__all__: list[str] = []
