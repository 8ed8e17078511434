"""A transaction-pooling proxy for the SQL tests: one PostgreSQL session for every client.

PgBouncer in `pool_mode = transaction` hands a server session to a client for one
transaction, then to whichever client comes next. `TransactionPooler` does the same with the
least machinery that shows it, so that the tests need nothing but Python: it opens one
session to the test server, answers each client's start-up itself (authentication, the
server's parameters, made-up key data), and relays a client's messages to that session
while the client holds it. A client takes the session with its first message and gives it
back when PostgreSQL is idle outside a transaction (`ReadyForQuery` with status `I`) and
every Sync or simple query it sent has been answered. It listens on a Unix socket only.

It runs its own event loop in a daemon thread; `start()` returns once it listens, `stop()`
closes it.
"""

import asyncio
import contextlib
import struct
import tempfile
import threading
from pathlib import Path
from typing import Final

__all__ = ["TransactionPooler"]

# Protocol 3.0, and the request codes a start-up packet may carry instead.
_PROTOCOL_3: Final = 196_608
_SSL_REQUEST: Final = 80_877_103
_GSSENC_REQUEST: Final = 80_877_104
_CANCEL_REQUEST: Final = 80_877_102
# The made-up port of the proxy's socket (`.s.PGSQL.<port>`).
PORT: Final = 6_599


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


async def _read_message(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    header = await reader.readexactly(5)
    (length,) = struct.unpack("!I", header[1:])
    return header[:1], await reader.readexactly(length - 4)


class TransactionPooler:
    """Share one session of `server_socket_dir`'s PostgreSQL between every client.

    Args:
        server_socket_dir: The directory of the server's Unix socket (port 5432).
        user: The role of the shared session (trust authentication).
        database: Its database.
    """

    def __init__(self, server_socket_dir: Path, user: str, database: str) -> None:
        self._server = server_socket_dir / ".s.PGSQL.5432"
        self._user = user
        self._database = database
        self.socket_dir = Path(tempfile.mkdtemp(prefix="mcp-txpool-", dir="/tmp"))
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="txpool")
        self._parameters = b""
        self._holder: asyncio.StreamWriter | None = None
        self._outstanding = 0
        self._free: asyncio.Event | None = None
        self._backend: asyncio.StreamWriter | None = None
        self._stopping: asyncio.Event | None = None
        self.clients = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def dsn(self) -> str:
        """A URI for the shared session's role, through the proxy."""
        return f"postgresql://{self._user}@/{self._database}?host={self.socket_dir}&port={PORT}"

    def start(self) -> "TransactionPooler":
        """Listen; return once clients can connect."""
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the transaction pooler did not start")
        return self

    def stop(self) -> None:
        """Close the listener, the clients and the shared session."""
        if self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(10)

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._free = asyncio.Event()
        self._free.set()
        self._stopping = asyncio.Event()
        reader, writer = await asyncio.open_unix_connection(str(self._server))
        params = f"user\0{self._user}\0database\0{self._database}\0\0".encode()
        writer.write(struct.pack("!II", len(params) + 8, _PROTOCOL_3) + params)
        parameters = []
        while True:
            kind, body = await _read_message(reader)
            if kind == b"E":
                raise RuntimeError(f"the shared session was refused: {body!r}")
            if kind == b"S":
                parameters.append(_message(kind, body))
            if kind == b"Z":
                break
        self._parameters = b"".join(parameters)
        self._backend = writer
        relay = asyncio.create_task(self._relay(reader))
        listener = await asyncio.start_unix_server(
            self._client, path=str(self.socket_dir / f".s.PGSQL.{PORT}")
        )
        self._ready.set()
        await self._stopping.wait()
        listener.close()
        await listener.wait_closed()
        tasks = [relay, *self._tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader) -> None:
        # PostgreSQL's replies go to the client that holds the session.
        assert self._free is not None
        while True:
            kind, body = await _read_message(reader)
            holder = self._holder
            if holder is not None:
                with contextlib.suppress(ConnectionError):
                    holder.write(_message(kind, body))
            if kind == b"Z":
                self._outstanding -= 1
                if self._outstanding <= 0 and body == b"I":
                    self._outstanding = 0
                    self._holder = None
                    self._free.set()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._free is not None
        assert self._backend is not None
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            while True:
                (length,) = struct.unpack("!I", await reader.readexactly(4))
                body = await reader.readexactly(length - 4)
                (code,) = struct.unpack("!I", body[:4])
                if code in (_SSL_REQUEST, _GSSENC_REQUEST):
                    writer.write(b"N")
                    continue
                if code == _CANCEL_REQUEST:
                    return
                break
            self.clients += 1
            writer.write(
                _message(b"R", struct.pack("!I", 0))
                + self._parameters
                + _message(b"K", struct.pack("!II", 4_000_000 + self.clients, 0))
                + _message(b"Z", b"I")
            )
            while True:
                kind, body = await _read_message(reader)
                if kind == b"X":
                    return
                if self._holder is not writer:
                    while self._holder is not None:
                        self._free.clear()
                        await self._free.wait()
                    self._holder = writer
                if kind in (b"S", b"Q"):
                    self._outstanding += 1
                self._backend.write(_message(kind, body))
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()
            if task is not None:
                self._tasks.discard(task)
