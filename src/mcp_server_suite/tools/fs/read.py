"""`sandbox_fs_read`: one piece of a text file beneath the root, bounded in bytes and on the wire.

The steps of a read, in the order they run:

1. Resolution (`resolution.py`): the caller's path becomes an `O_PATH` descriptor beneath the
   root, by the kernel's `openat2` or the walk that stands in for it.
2. File type: `fstat` on that descriptor. Only a regular file goes on: a FIFO, socket or
   device is refused without ever being opened for I/O, so no writer waiting on a FIFO is
   released and no device's open runs.
3. Reopen: the same inode, and only it, is opened for reading (`Resolver.reopen`).
4. Bounded read: at most `max_bytes + 1` bytes from `offset`; the extra byte says whether the
   file goes on.
5. Strict decoding: a character cut at the start of the piece is skipped where the encoding
   lets that be known (UTF-8, UTF-16, UTF-32), one cut at the end is left for the next piece,
   and `next_offset` says where that piece starts.
6. Bounded answer: the response carries the content twice (`structuredContent` and the
   text block), with every escape JSON needs: a control character costs 13 bytes, so 1 MiB
   of NUL bytes would be a 13.6 MB response. A piece whose response would exceed
   `MAX_RESPONSE_BYTES` is cut shorter; it says so (`truncated`) and where to go on.
7. No path leaks (`_refusals.py`).

Where it runs: on the event loop when nothing in it can wait (a local file system, no mount
crossing, a lookup the kernel answers from its caches, data in the page cache, a piece of at
most `INLINE_MAX_BYTES`); otherwise in a worker thread, so a hung file system never stalls
the session. Both give the same answers.
"""

import errno
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from mcp_server_suite.config import Settings
from mcp_server_suite.core.registry import ToolOutput, ToolSpec
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.fs import (
    MAX_MAX_BYTES,
    MAX_OFFSET,
    SandboxFSReadParams,
    SandboxFSReadResult,
)
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.tools.fs import _wire
from mcp_server_suite.tools.fs._refusals import (
    SPECIAL_FILE,
    os_failure,
    refusal,
    subject_of,
)
from mcp_server_suite.tools.fs.codecs import Kind, TextCodec, text_codec
from mcp_server_suite.tools.fs.mounts import INLINE_FILESYSTEMS, MEMORY_FILESYSTEMS
from mcp_server_suite.tools.fs.resolution import (
    Resolved,
    Resolver,
    configured_resolver,
    relative_beneath,
)
from mcp_server_suite.tools.fs.root import SandboxClosed, SandboxRoot
from mcp_server_suite.workers import run_blocking

__all__ = [
    "DESCRIPTION",
    "INLINE_MAX_BYTES",
    "MAX_RESPONSE_BYTES",
    "MAX_WIRE_BYTES_PER_CHAR",
    "FileReader",
    "Piece",
    "build_read_tool",
    "decode_piece",
    "wire_cost",
]

TOOL: Final = "sandbox_fs_read"

DESCRIPTION: Final = (
    "Read a text file from the sandbox directory. relative_path is relative to the sandbox "
    "root; symbolic links are followed only while they stay inside it. Paths outside the "
    "sandbox, directories, FIFOs, sockets and devices are refused. At most max_bytes bytes "
    "are read, from offset, and strictly decoded with encoding; when truncated is true, call "
    "again with offset set to next_offset for the next piece. Use sandbox_fs_list to find "
    "file names."
)

# The most bytes one response may take, whatever the file holds: four times the largest
# request frame, which holds a 1 MiB read of plain text with room to spare (plain text costs
# two bytes a character, one per copy), and keeps 16 responses waiting to be written within
# 64 MiB.
MAX_RESPONSE_BYTES: Final = 4 * 1024 * 1024

# What a response holds besides the content and the resolved path, at most: the envelope's
# members, three offsets, and a request id of 256 characters escaped at 12 bytes each.
_ENVELOPE_BYTES: Final = 8 * 1024

# The most wire bytes one character of content can cost, over both copies: a character
# outside the BMP is a surrogate pair escape, `\\ud83d\\ude00`, in each (12 + 12). A control
# character costs 13 (6 + 7), but it is one byte; a test checks every code point.
MAX_WIRE_BYTES_PER_CHAR: Final = 24

# Pieces this small are read on the event loop when nothing can wait: 64 KiB (the default
# max_bytes) decodes in well under a millisecond, so pings and other calls are not held up.
INLINE_MAX_BYTES: Final = 64 * 1024

# The byte order marks of UTF-32 are the longest a codec in the table looks for.
_SIGNATURE_BYTES: Final = 4

_READ_FLAGS: Final = os.O_RDONLY

# Characters escaped at once when a piece's wire cost is counted: 64 Ki characters escape
# to well under 2 MB even in the worst case, whatever the size of the piece.
_COST_SLICE_CHARS: Final = 64 * 1024

# JSON as the wire writes it (ASCII, the structured copy) and as a text block holds it (the
# text copy, which the wire then escapes once more).
_ASCII_JSON: Final = json.JSONEncoder(ensure_ascii=True)
_TEXT_JSON: Final = json.JSONEncoder(ensure_ascii=False)


def wire_cost(text: str) -> int:
    """The bytes `text` takes on the wire as content: in `structuredContent` and in the text.

    Escaping is per character, so the cost of a concatenation is the sum of the costs, and it
    is counted a slice at a time: escaping a whole mebibyte of NUL characters at once would
    hold some 20 MB for a moment, per read in flight.
    """
    # Each copy's quotes, counted once: '""' in one, '"\\"\\""' in the other.
    quotes = 8
    cost = quotes
    for start in range(0, len(text), _COST_SLICE_CHARS):
        piece = text[start : start + _COST_SLICE_CHARS]
        cost += len(_ASCII_JSON.encode(piece)) + len(_ASCII_JSON.encode(_TEXT_JSON.encode(piece)))
        cost -= quotes
    return cost


@dataclass(frozen=True, slots=True)
class Piece:
    """A decoded piece of a file.

    Attributes:
        content: The text.
        start: Where it starts in the file.
        bytes_read: How many bytes it was decoded from.
        truncated: Whether the file goes on after `start + bytes_read`.
    """

    content: str
    start: int
    bytes_read: int
    truncated: bool


class _Undecodable(Exception):
    """The bytes are not valid text in the codec."""


class _NoByteOrderMark(Exception):
    """`utf-16` or `utf-32` on a file that does not start with a byte order mark."""


def _byte_order(codec: TextCodec, signature: bytes) -> TextCodec:
    for mark, name in codec.byte_orders:
        if signature.startswith(mark):
            return text_codec(name)
    raise _NoByteOrderMark


def _skipped_at_start(codec: TextCodec, data: bytes, at: int) -> int:
    # Bytes of a character that started before `at`. Only a piece that does not start the
    # file can begin inside a character; at offset 0 such bytes are simply invalid.
    if at == 0:
        return 0
    if codec.kind is Kind.UTF_8:
        skip = 0
        while skip < min(3, len(data)) and 0x80 <= data[skip] <= 0xBF:
            skip += 1
        return skip
    if codec.kind is Kind.UNITS:
        skip = -at % codec.unit
        if codec.unit == 2:
            # The second half of a surrogate pair: the first unit's high byte, in the
            # codec's byte order, is DC to DF.
            high = data[skip + 1 : skip + 2] if codec.name.endswith("le") else data[skip : skip + 1]
            if high and 0xDC <= high[0] <= 0xDF:
                skip += 2
        return skip
    return 0


def decode_piece(
    data: bytes, *, at: int, window: int, codec: TextCodec, signature: bytes, budget: int
) -> Piece:
    """Strictly decode a piece of a file.

    Args:
        data: Up to `window + 1` bytes read from offset `at` (fewer at the end of the file).
        at: The offset they were read from.
        window: `max_bytes`: at most this many bytes are decoded.
        codec: The codec. A stateful one is only ever given `at == 0`.
        signature: The first bytes of the file, for codecs whose byte order comes from a
            mark there (`_SIGNATURE_BYTES` of them, or the whole file if shorter).
        budget: The most wire bytes the content may cost (`wire_cost`).

    Returns:
        The piece.

    Raises:
        _Undecodable: The bytes are not valid text in `codec`.
        _NoByteOrderMark: The codec needs a byte order mark the file does not have.
    """
    goes_on = len(data) > window
    effective = codec
    if codec.byte_orders and signature:
        ordered = _byte_order(codec, signature)
        if at > 0:
            effective = ordered
    elif codec.drops_signature and at > 0:
        effective = text_codec("utf-8")
    # The rest of a character that started before `at` is skipped, judged on all the bytes
    # read (one more than the window), so a window that holds only such bytes still moves on.
    skip = _skipped_at_start(effective, data, at)
    body = data[skip:window]
    content, consumed = _decode(effective, body, final=not goes_on)
    if len(content) * MAX_WIRE_BYTES_PER_CHAR > budget:
        cost = wire_cost(content)
        while cost > budget:
            # Cut the bytes in proportion, then decode again: each round is shorter, and a
            # piece of `budget / 13` bytes always fits (a byte costs at most 13).
            goes_on = True
            content, consumed = _decode(effective, body[: consumed * budget // cost], final=False)
            cost = wire_cost(content)
    return Piece(content, at + skip, consumed, goes_on)


def _decode(codec: TextCodec, body: bytes, *, final: bool) -> tuple[str, int]:
    try:
        if final:
            # The whole rest of the file: `bytes.decode` is the incremental decoder's final
            # step without its machinery (the byte order mark, when a codec needs one, was
            # checked before this).
            return body.decode(codec.name), len(body)
        decoder = codec.decoder()
        content = decoder.decode(body, final=False)
    except UnicodeError:
        # UnicodeDecodeError, and the plain UnicodeError Python's UTF-16 and UTF-32
        # decoders raise for a stream without a byte order mark.
        raise _Undecodable from None
    pending, _ = decoder.getstate()
    return content, len(body) - len(pending)


def _window(params: SandboxFSReadParams) -> int:
    # `max_bytes`, or fewer where the piece would end past MAX_OFFSET, the largest offset
    # I-JSON carries exactly (on main, offset 2**53 - 9 of a 2**60-byte sparse file answered a
    # next_offset past it).
    return min(params.max_bytes, MAX_OFFSET - params.offset)


def _read_at_most(fd: int, limit: int, offset: int) -> bytes:
    chunks: list[bytes] = []
    remaining = limit
    while remaining:
        chunk = os.pread(fd, remaining, offset)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


class FileReader:
    """Reads pieces of files beneath one root.

    Args:
        resolver: How paths are resolved beneath the root.
    """

    def __init__(self, resolver: Resolver) -> None:
        self._resolver: Final = resolver
        self._root: Final = resolver.root
        filesystem = resolver.root_filesystem
        # Reads on the event loop need every lookup answered from the caches, no mount
        # crossed into a file system of another kind, the inode reopened through /proc, and
        # a file system where nothing waits for a network or a daemon.
        self._inline = (
            resolver.kernel
            and resolver.cached
            and resolver.proc_reopen
            and not resolver.cross_mounts
            and filesystem in INLINE_FILESYSTEMS
        )
        self._in_memory = filesystem in MEMORY_FILESYSTEMS
        # Used only by `read_now`, which runs on the event loop thread alone.
        self._buffer = bytearray(INLINE_MAX_BYTES + 1)

    @property
    def reads_inline(self) -> bool:
        """Whether `read_now` can answer at all (else every read goes to a worker thread)."""
        return self._inline

    async def read(self, params: SandboxFSReadParams) -> SandboxFSReadResult:
        """Read one piece in a worker thread; see `read_blocking`."""
        return await run_blocking(self.read_blocking, params)

    def read_blocking(self, params: SandboxFSReadParams) -> SandboxFSReadResult:
        """Read one piece of a file, in the calling thread.

        Args:
            params: The validated arguments.

        Returns:
            The decoded piece and where it lies in the file.

        Raises:
            ToolFailure: The path is outside the sandbox, missing, not a regular file or not
                permitted, the content is not valid text in the encoding, the sandbox is
                closed, or the file system failed (internal error, details withheld).
        """
        codec = self._codec(params)
        try:
            resolved = self._lookup(params)
            try:
                self._ensure_regular(resolved, params.relative_path)
                fd = self._resolver.reopen(resolved, _READ_FLAGS)
                try:
                    data = _read_at_most(fd, _window(params) + 1, params.offset)
                    signature = b""
                    if codec.byte_orders:
                        signature = os.pread(fd, _SIGNATURE_BYTES, 0)
                finally:
                    os.close(fd)
            finally:
                resolved.close()
        except OSError as exc:
            raise os_failure(exc, subject_of(params.relative_path), TOOL) from None
        return SandboxFSReadResult(**self._fields(params, codec, resolved.path, data, signature))

    def read_now(self, params: SandboxFSReadParams) -> dict[str, Any] | None:
        """Read one piece on the event loop, if that can be done without waiting.

        Returns:
            The fields of the result `read_blocking` would give, not yet checked against the
            result model, or None when some step would have to wait (or the piece is larger
            than `INLINE_MAX_BYTES`): then call `read_blocking`.

        Raises:
            ToolFailure: As `read_blocking`.
        """
        if not self._inline:
            return None
        codec = self._codec(params)
        if codec.byte_orders and params.offset > 0:
            # The byte order mark would need a second read; the worker thread does it.
            return None
        try:
            resolved = self._lookup_cached(params)
            if resolved is None:
                return None
            try:
                self._ensure_regular(resolved, params.relative_path)
                wanted = _window(params) + 1
                count = min(wanted, INLINE_MAX_BYTES + 1)
                if count < wanted and resolved.status.st_size - params.offset >= count:
                    # Larger than the inline buffer when it was looked up: a hint only, the
                    # read below decides.
                    return None
                fd = self._resolver.reopen(resolved, _READ_FLAGS)
                try:
                    data = self._read_cached(fd, count, params.offset)
                    if data is not None and len(data) < count:
                        data = self._at_end(fd, data, params.offset)
                finally:
                    os.close(fd)
            finally:
                resolved.close()
        except OSError as exc:
            raise os_failure(exc, subject_of(params.relative_path), TOOL) from None
        # Complete when every byte wanted came, or the read ended where the file ends. A read
        # that filled the inline buffer but not the window is not complete: the file may go
        # on (on main, a file a writer flipped between two sizes was answered with the
        # buffer's 65,537 bytes, a size it never had).
        if data is None or len(data) == count < wanted:
            return None
        if codec.byte_orders and len(data) < _SIGNATURE_BYTES and len(data) == count:
            # A piece shorter than the longest mark, of a file that goes on: read the mark
            # in a worker thread.
            return None
        return self._fields(params, codec, resolved.path, data, data[:_SIGNATURE_BYTES])

    def _codec(self, params: SandboxFSReadParams) -> TextCodec:
        codec = text_codec(params.encoding)
        if codec.kind is Kind.STATEFUL and params.offset > 0:
            raise ToolFailure(
                f"{codec.name} is a stateful encoding (what a byte means depends on escape "
                "sequences before it), so it can only be read from offset 0",
                invalid_params=("offset",),
            )
        return codec

    def _lookup(self, params: SandboxFSReadParams) -> Resolved:
        relative = relative_beneath(params.relative_path, self._root.names)
        root_fd = self._borrow_root()
        try:
            return self._resolver.resolve(root_fd, relative)
        finally:
            self._root.release()

    def _lookup_cached(self, params: SandboxFSReadParams) -> Resolved | None:
        relative = relative_beneath(params.relative_path, self._root.names)
        root_fd = self._borrow_root()
        try:
            return self._resolver.resolve_cached(root_fd, relative)
        finally:
            self._root.release()

    def _borrow_root(self) -> int:
        try:
            return self._root.acquire()
        except SandboxClosed:
            raise ToolFailure(
                "The sandbox is closed because the server is shutting down.",
                code=MCPErrorCode.INTERNAL_ERROR,
            ) from None

    @staticmethod
    def _ensure_regular(resolved: Resolved, untrusted_path: str) -> None:
        mode = resolved.status.st_mode
        if stat.S_ISREG(mode):
            return
        if stat.S_ISDIR(mode):
            raise OSError(errno.EISDIR, "a directory")
        raise refusal(MCPErrorCode.ACCESS_DENIED, subject_of(untrusted_path), SPECIAL_FILE)

    @staticmethod
    def _at_end(fd: int, data: bytes, offset: int) -> bytes | None:
        # A short read is the end of the file, or a page cache that could serve only part of
        # the range (RWF_NOWAIT). It is taken for the end only when the file's size, asked
        # after the read, is where the read stopped: a size the file had, never one made up
        # of a stale size and a later read. The size is asked with lseek(SEEK_END), which
        # every file system in INLINE_FILESYSTEMS answers from the inode's size, as fstat
        # does, without the stat result Python builds (about as costly as the openat2 call;
        # the descriptor's own offset is never used, every read names its offset).
        end = max(os.lseek(fd, 0, os.SEEK_END), offset)
        return data if end == offset + len(data) else None

    def _read_cached(self, fd: int, count: int, offset: int) -> bytes | None:
        view = memoryview(self._buffer)[:count]
        try:
            if self._in_memory:
                read = os.preadv(fd, [view], offset)
            else:
                read = os.preadv(fd, [view], offset, os.RWF_NOWAIT)
        except OSError as exc:
            if exc.errno == errno.EOPNOTSUPP:
                # This file system cannot promise not to wait: every read goes to a worker
                # thread from now on.
                self._inline = False
                return None
            if exc.errno == errno.EAGAIN:
                return None
            raise
        return bytes(view[:read])

    def _fields(
        self,
        params: SandboxFSReadParams,
        codec: TextCodec,
        resolved_path: str,
        data: bytes,
        signature: bytes,
    ) -> dict[str, Any]:
        """The result's fields, as JSON data, not yet checked against the result model."""
        # The path is in the response twice too; its cost is bounded by its length (a
        # character costs at most MAX_WIRE_BYTES_PER_CHAR), which spares computing it exactly
        # for every read, and gives away at most 2% of the budget for the longest path.
        budget = MAX_RESPONSE_BYTES - _ENVELOPE_BYTES - len(resolved_path) * MAX_WIRE_BYTES_PER_CHAR
        window = _window(params)
        try:
            piece = decode_piece(
                data,
                at=params.offset,
                window=window,
                codec=codec,
                signature=signature,
                budget=budget,
            )
        except _Undecodable:
            raise refusal(
                MCPErrorCode.VALIDATION_ERROR,
                subject_of(params.relative_path),
                f"holds bytes that are not valid {codec.name} text",
                field="encoding",
            ) from None
        except _NoByteOrderMark:
            raise refusal(
                MCPErrorCode.VALIDATION_ERROR,
                subject_of(params.relative_path),
                f"does not start with a byte order mark, so its {codec.name} byte order is "
                f"unknown: name {codec.name}-le or {codec.name}-be",
                field="encoding",
            ) from None
        if piece.truncated and codec.kind is Kind.STATEFUL and piece.bytes_read > 0:
            # The next piece would have to start at an offset past 0, which a stateful
            # encoding cannot: no next_offset is offered that would then be refused (on main,
            # iso2022_jp answered next_offset 5, then refused offset 5). A piece cut before
            # its first character offers 0 again, which a larger max_bytes reads on from.
            raise refusal(
                MCPErrorCode.VALIDATION_ERROR,
                subject_of(params.relative_path),
                f"goes on past what one piece holds, and {codec.name} is a stateful encoding, "
                "read only in one piece from offset 0: read it with a larger max_bytes (at "
                f"most {MAX_MAX_BYTES:,}), or with latin-1 to see its bytes",
                field="max_bytes",
            )
        return {
            "resolved_path": resolved_path,
            "content": piece.content,
            "offset": piece.start,
            "bytes_read": piece.bytes_read,
            "next_offset": piece.start + piece.bytes_read,
            # A piece that reaches MAX_OFFSET is the last one read: no offset past it can be
            # sent exactly, so none is offered.
            "truncated": (
                piece.truncated
                and window == params.max_bytes
                and piece.start + piece.bytes_read < MAX_OFFSET
            ),
        }

    def read_inline(self, arguments: Mapping[str, Any]) -> ToolOutput | None:
        """The tool's `run_inline`: the whole call, answered at once when nothing must wait.

        The arguments are accepted only when the strict model accepts them as they are (any
        fault goes to the full path, which reports it), and the output is checked against
        the result model as the full path checks it (`_wire`).
        """
        params = _wire.accept(SandboxFSReadParams, arguments)
        if params is None:
            return None
        fields = self.read_now(params)
        if fields is None:
            return None
        return _wire.render_read(fields)


def build_read_tool(
    settings: Settings, root: SandboxRoot | None = None, *, use_kernel: bool = True
) -> ToolSpec[SandboxFSReadParams, SandboxFSReadResult]:
    """Describe `sandbox_fs_read` over the configured sandbox root.

    Args:
        settings: The validated configuration; `safe_data_dir` must be set.
        root: The root opened at start-up; opened here when None.
        use_kernel: False to resolve with the walk even where `openat2` works.

    Returns:
        The tool, whose `close` hook releases its hold on the root.

    Raises:
        ConfigError: `MCP_SAFE_DATA_DIR` is unset, or its directory cannot be opened.
    """
    root, resolver = configured_resolver(settings, root, use_kernel=use_kernel)
    reader = FileReader(resolver)
    return ToolSpec(
        name=TOOL,
        title="Sandboxed file read",
        description=DESCRIPTION,
        params_model=SandboxFSReadParams,
        result_model=SandboxFSReadResult,
        run=reader.read,
        run_inline=reader.read_inline,
        close=root.aclose,
    )
