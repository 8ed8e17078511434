"""The protocol core: framing, JSON-RPC parsing, dispatch, the tool registry, and the stdio shell.

The protocol core is sans-I/O: bytes or models go in, events, actions or bytes come out, and
none of its modules imports `asyncio`, `sys` or `socket`. The stdio shell is the rest:
`stdio` (what its phases share), one module per phase (`handshake`, `inline`, `session`),
and what the event loop's phase stands on (`channels`, `event_loop`, `busy_poll`).
"""

__all__: list[str] = []
