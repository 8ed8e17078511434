"""The audit trail: one JSON line for every `tools/call` a session runs.

The package answers the Repudiation row of the threat model: afterwards, an operator can say
which client called which tool with which arguments, when, and how it ended. It is split by
what each part may touch:

- `record`: the record itself, pure and sans-I/O (canonical arguments, digest, outcome, the
  JSON line). Loaded after the handshake, with the event loop, because it needs `hashlib`.
- `sinks`: where the lines go (stderr, an append-only file, the systemd journal). Opened at
  start-up, so a destination that cannot be written stops the server before it serves; a
  destination that stops taking records never holds the server up.
- `trail`: one session's trail, which builds each record, writes it and decides what a
  failed write means for the call, and counts the records it could not write.

Nothing here is imported by start-up but `sinks`, which needs only the standard library's
system modules (and `socket`, for the journal alone).
"""

__all__: list[str] = []
