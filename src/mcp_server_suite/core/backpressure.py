"""Backpressure for responses: how much output may wait for a client that does not read.

A client that stops reading while calls complete must not make the server hold their
responses without bound, nor keep running calls whose answers nobody takes. Escaping is
what makes responses large: a read of 1 MiB of NUL bytes is a 13 MiB response, each byte
`\\u0000` in the structured result and `\\\\u0000` again in the text block beside it, and
67 KiB once compressed.

Rules:

1. Responses the channel cannot take at once wait in the `OutputQueue`, in arrival order.
   The queue hands them out in pieces of at most the size asked for, so the transport never
   holds a whole large response on top of the queue.
2. A response that arrives while `COMPRESS_BACKLOG_BYTES` or more are already waiting is held
   zlib-compressed and expanded a piece at a time as it is written. A client that reads keeps
   less than that waiting and costs no compression; the few calls that finish after a client
   has stalled pin about what the tools read, not what escaping made of it.
3. The bytes waiting, counted as encoded (`waiting`), are bounded by `MAX_PENDING_OUTPUT_BYTES`:
   while they reach it no call starts its tool (`may_start`). The shell waits for it inside
   the call's concurrency slot, just before the tool runs, so calls stop where they would
   do work, the limiter holds back the rest (and refuses what waits longer than its bounded
   wait), and the session does no work for a client that does not read.
4. The memory the waiting responses hold (`held`, compressed ones at their compressed size)
   is bounded by the same figure. A call's successful reply that would take it past the bound
   does not `fit`, unless nothing is held, so a reply of any size can always be sent on its
   own; the shell sends a small retryable refusal instead. Every tool only reads and is
   idempotent, so the retry is safe. Since only calls already past the gate of rule 3 can
   finish while the client is stalled (one per concurrency slot), getting there takes that
   many large replies that do not compress.

The queue is plain data, without I/O: the shell pushes what it must send (`push`, or `hold`,
`fits` and `append` for a call's successful reply), takes pieces when the channel can take
them, and waits for `may_start` before it lets a tool run.
"""

import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Final, TypeAlias

__all__ = [
    "COMPRESSION_LEVEL",
    "COMPRESS_BACKLOG_BYTES",
    "MAX_PENDING_OUTPUT_BYTES",
    "Held",
    "OutputQueue",
]

# Eight of the largest responses the tools return by default (4 MiB: the file tools' cut, and
# the SQL tool's at its default result size) fit, so a client that reads slowly gets them back
# to back, and a response of any size still goes when nothing waits before it. With the
# process's own footprint (about 35 MiB with the file tool loaded) and the replies being built
# (three times their size while they are shaped and encoded), what a client that stops reading
# pins stays well under the 128 MiB a session is allowed.
MAX_PENDING_OUTPUT_BYTES: Final = 32 * 1024 * 1024

# A client that keeps up has at most a few pieces waiting at any moment; 4 MiB behind the
# head means it has fallen behind by at least one large result, and the rest can wait
# compressed.
COMPRESS_BACKLOG_BYTES: Final = 4 * 1024 * 1024

# The fastest level: escaped JSON is so redundant that it already gets nearly everything
# (13 MiB of escaped NUL bytes become 67 KiB), at a few milliseconds per MiB.
COMPRESSION_LEVEL: Final = 1


@dataclass(slots=True)
class _Raw:
    data: memoryview

    @property
    def held(self) -> int:
        return len(self.data)

    @property
    def waiting(self) -> int:
        return len(self.data)

    def take(self, limit: int) -> memoryview:
        piece, self.data = self.data[:limit], self.data[limit:]
        return piece

    @property
    def exhausted(self) -> bool:
        return not self.data


@dataclass(slots=True)
class _Packed:
    compressed: bytes
    expanded_size: int
    _inflater: "zlib._Decompress" = field(default_factory=zlib.decompressobj)
    _expanded: memoryview = field(default_factory=lambda: memoryview(b""))
    _given: int = 0

    @property
    def held(self) -> int:
        return len(self.compressed) + len(self._expanded)

    @property
    def waiting(self) -> int:
        return self.expanded_size - self._given

    def take(self, limit: int) -> memoryview:
        if not self._expanded:
            # Never more than `limit` bytes are expanded at once; the inflater keeps the rest
            # of the input for the next piece.
            expanded = self._inflater.decompress(self.compressed, limit)
            self.compressed = self._inflater.unconsumed_tail
            if not self.compressed:
                expanded += self._inflater.flush()
            self._expanded = memoryview(expanded)
        piece, self._expanded = self._expanded[:limit], self._expanded[limit:]
        self._given += len(piece)
        return piece

    @property
    def exhausted(self) -> bool:
        return self._given >= self.expanded_size


# A response as it waits: as it is, or compressed.
Held: TypeAlias = _Raw | _Packed


class OutputQueue:
    """The responses waiting for the channel, and the bounds on them (rules 1 to 4).

    Args:
        limit: The bound on the bytes waiting and on the bytes held.
        backlog: From how many waiting bytes on a response waits compressed.
    """

    __slots__ = ("_backlog", "_entries", "_held", "_limit", "_waiting")

    def __init__(
        self, limit: int = MAX_PENDING_OUTPUT_BYTES, backlog: int = COMPRESS_BACKLOG_BYTES
    ) -> None:
        if limit < 1 or backlog < 0:
            raise ValueError("limit must be positive and backlog not negative")
        self._limit: Final = limit
        self._backlog: Final = backlog
        self._entries: deque[Held] = deque()
        self._held = 0
        self._waiting = 0

    def __bool__(self) -> bool:
        return bool(self._entries)

    @property
    def waiting(self) -> int:
        """The bytes waiting, counted as encoded (rule 3)."""
        return self._waiting

    @property
    def held(self) -> int:
        """The memory the waiting responses hold, compressed ones compressed (rule 4)."""
        return self._held

    def may_start(self) -> bool:
        """Whether a call may start its tool now (rule 3)."""
        return self._waiting < self._limit

    def push(self, data: bytes | memoryview) -> None:
        """Queue a response, whatever the bounds: answers the server must give always join."""
        self.append(self.hold(data))

    def hold(self, data: bytes | memoryview) -> Held:
        """The response as it would wait now: compressed behind a backlog (rule 2)."""
        if self._waiting >= self._backlog:
            return _Packed(zlib.compress(data, COMPRESSION_LEVEL), len(data))
        return _Raw(memoryview(data))

    def fits(self, held: Held) -> bool:
        """Whether a call's successful reply, as held, fits the memory bound (rule 4)."""
        return not self._held or self._held + held.held <= self._limit

    def append(self, held: Held) -> None:
        """Queue a response already held."""
        self._entries.append(held)
        self._held += held.held
        self._waiting += held.waiting

    def take(self, limit: int) -> memoryview:
        """The next piece to write, at most `limit` bytes, in arrival order.

        Small raw responses waiting together come out in one piece.

        Raises:
            IndexError: Nothing is waiting.
        """
        head = self._entries[0]
        held, waiting = head.held, head.waiting
        piece = head.take(limit)
        self._held -= held - head.held
        self._waiting -= waiting - head.waiting
        if not head.exhausted:
            return piece
        self._entries.popleft()
        pieces = [piece]
        size = len(piece)
        while self._entries and isinstance(following := self._entries[0], _Raw):
            if size + following.held > limit:
                break
            pieces.append(following.data)
            size += following.held
            self._held -= following.held
            self._waiting -= following.waiting
            self._entries.popleft()
        return piece if len(pieces) == 1 else memoryview(b"".join(pieces))

    def clear(self) -> None:
        """Drop everything (the client is gone)."""
        self._entries.clear()
        self._held = 0
        self._waiting = 0
