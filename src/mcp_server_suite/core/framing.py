"""Newline-delimited framing with a hard ceiling on the size of one frame.

Rules:

1. A frame is the bytes before a `\\n`. One trailing `\\r` is dropped, so CRLF peers work.
   Blank frames (empty, or only spaces, tabs and carriage returns) are framing noise and
   are skipped silently. Other whitespace, such as a form feed, is not JSON whitespace and
   reaches the parser, which refuses it.
2. A frame longer than `max_frame_bytes` is never held in memory: once the buffered part
   of a line exceeds the ceiling, the buffer is dropped and the rest of the line is
   discarded as it streams in. The line is reported once, as `FrameTooLarge`, when its
   newline arrives, and framing resumes at the next byte.
3. The ceiling counts bytes, not characters: a line of 350,000 three-byte characters is
   1,050,000 bytes and is over a 1 MiB ceiling.
4. Memory is bounded by the ceiling plus the one chunk being scanned: the buffer never
   holds more than `max_frame_bytes` bytes of an unfinished line, and complete frames are
   handed out before more data is accepted.

Calling order: `receive_data(chunk)`, then `next_frame()` until it returns `NEED_DATA`; at
end of input, call `receive_eof()` and drain `next_frame()` once more.
"""

from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Final, Literal

__all__ = ["MAX_FRAME_BYTES", "NEED_DATA", "FrameTooLarge", "LineFramer", "NeedData"]

# The design document's ceiling: 1 MiB per JSON-RPC message, enough for the largest tool
# argument (a 10,000-character query or a 4,096-character path) many times over.
MAX_FRAME_BYTES: Final = 1_048_576


# JSON's own insignificant whitespace, minus the newline that ends the frame.
_BLANK: Final = b" \t\r"


class NeedData(Enum):
    """Sentinel type: no complete frame is buffered."""

    NEED_DATA = "need-data"


NEED_DATA: Final = NeedData.NEED_DATA


@dataclass(frozen=True, slots=True)
class FrameTooLarge:
    """A line exceeded the ceiling and was discarded.

    Attributes:
        max_frame_bytes: The ceiling it exceeded, for the error's `data`.
    """

    max_frame_bytes: int


class LineFramer:
    """Split a byte stream into newline-terminated frames of bounded size.

    Args:
        max_frame_bytes: The largest frame, in bytes, excluding its line terminator.
    """

    __slots__ = ("_buffer", "_discarding", "_eof", "_max", "_ready")

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < 1:
            raise ValueError("max_frame_bytes must be positive")
        self._max: Final = max_frame_bytes
        self._buffer = bytearray()
        self._ready: deque[bytes | FrameTooLarge] = deque()
        self._discarding = False
        self._eof = False

    @property
    def at_eof(self) -> bool:
        """Whether `receive_eof` has been called (frames may still be waiting)."""
        return self._eof

    @property
    def buffered_bytes(self) -> int:
        """Bytes held for an unfinished line (never more than the ceiling plus one `\\r`)."""
        return len(self._buffer)

    def receive_data(self, data: bytes) -> None:
        """Feed the next chunk of the stream.

        Args:
            data: Any bytes; may hold no newline, or many.

        Raises:
            RuntimeError: Called after `receive_eof`.
        """
        if self._eof:
            raise RuntimeError("receive_data after receive_eof")
        start = 0
        end = len(data)
        while start < end:
            newline = data.find(b"\n", start)
            stop = end if newline < 0 else newline
            if not self._discarding:
                # The slice is checked before it is copied, so an over-long line costs at
                # most one chunk of transient memory, never the whole line.
                if len(self._buffer) + (stop - start) > self._max + 1:
                    self._buffer.clear()
                    self._discarding = True
                else:
                    self._buffer += data[start:stop]
            if newline < 0:
                return
            self._end_line()
            start = newline + 1

    def receive_eof(self) -> None:
        """Mark the end of the stream; an unterminated last line still counts as a frame."""
        if not self._eof:
            self._eof = True
            if self._buffer or self._discarding:
                self._end_line()

    def next_frame(self) -> bytes | FrameTooLarge | Literal[NeedData.NEED_DATA]:
        """Return the next complete frame, a `FrameTooLarge` report, or `NEED_DATA`."""
        if self._ready:
            return self._ready.popleft()
        return NEED_DATA

    def _end_line(self) -> None:
        if self._discarding:
            self._discarding = False
            self._ready.append(FrameTooLarge(self._max))
            return
        line = bytes(self._buffer)
        self._buffer.clear()
        if line.endswith(b"\r"):
            line = line[:-1]
        if len(line) > self._max:
            # Exactly one byte over, with no `\r` to excuse it.
            self._ready.append(FrameTooLarge(self._max))
        elif line.strip(_BLANK):
            self._ready.append(line)
