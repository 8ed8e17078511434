"""The line framer: frames, blank lines, CRLF, the byte ceiling, and bounded memory."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_server_suite.core.framing import (
    MAX_FRAME_BYTES,
    NEED_DATA,
    FrameTooLarge,
    LineFramer,
)


def drain(framer: LineFramer) -> list[bytes | FrameTooLarge]:
    frames: list[bytes | FrameTooLarge] = []
    while (frame := framer.next_frame()) is not NEED_DATA:
        frames.append(frame)
    return frames


def frames_of(
    data: bytes, *, limit: int = MAX_FRAME_BYTES, eof: bool = False
) -> list[bytes | FrameTooLarge]:
    framer = LineFramer(limit)
    framer.receive_data(data)
    if eof:
        framer.receive_eof()
    return drain(framer)


CASES = [
    pytest.param(b"", [], id="nothing"),
    pytest.param(b"{}\n", [b"{}"], id="one-frame"),
    pytest.param(b"{}\r\n", [b"{}"], id="crlf"),
    pytest.param(b"{}\r\r\n", [b"{}\r"], id="only-one-cr-dropped"),
    pytest.param(b"a\nb\nc\n", [b"a", b"b", b"c"], id="several"),
    pytest.param(b"\n\r\n \t\r\n{}\n", [b"{}"], id="blank-lines-skipped"),
    pytest.param(b"\x0c{}\n", [b"\x0c{}"], id="form-feed-is-not-blank"),
    pytest.param(b"{}", [], id="unterminated-waits"),
]


@pytest.mark.parametrize(("data", "expected"), CASES)
def test_frames(data: bytes, expected: list[bytes]) -> None:
    assert frames_of(data) == expected


def test_unterminated_last_line_is_a_frame_at_eof() -> None:
    assert frames_of(b"a\nb", eof=True) == [b"a", b"b"]


def test_eof_twice_is_harmless() -> None:
    framer = LineFramer()
    framer.receive_data(b"x")
    framer.receive_eof()
    framer.receive_eof()
    assert drain(framer) == [b"x"]


def test_data_after_eof_is_a_bug() -> None:
    framer = LineFramer()
    framer.receive_eof()
    with pytest.raises(RuntimeError):
        framer.receive_data(b"x")


def test_ceiling_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        LineFramer(0)


def test_frame_of_exactly_the_ceiling_passes() -> None:
    assert frames_of(b"a" * 10 + b"\n", limit=10) == [b"a" * 10]
    assert frames_of(b"a" * 10 + b"\r\n", limit=10) == [b"a" * 10]


def test_one_byte_over_is_reported() -> None:
    assert frames_of(b"a" * 11 + b"\n", limit=10) == [FrameTooLarge(10)]


def test_one_byte_over_with_cr_is_reported() -> None:
    assert frames_of(b"a" * 11 + b"\r\n", limit=10) == [FrameTooLarge(10)]


def test_default_ceiling_is_one_mebibyte() -> None:
    assert MAX_FRAME_BYTES == 1_048_576
    assert frames_of(b"a" * MAX_FRAME_BYTES + b"\n") == [b"a" * MAX_FRAME_BYTES]
    assert frames_of(b"a" * (MAX_FRAME_BYTES + 1) + b"\n") == [FrameTooLarge(MAX_FRAME_BYTES)]


def test_ceiling_counts_bytes_not_characters() -> None:
    # 350,000 euro signs are 350,000 characters but 1,050,000 bytes (corpus PROTO-016).
    line = ("\u20ac" * 350_000).encode()
    assert len(line) > MAX_FRAME_BYTES
    assert frames_of(line + b"\n") == [FrameTooLarge(MAX_FRAME_BYTES)]


def test_oversized_line_is_reported_once_and_framing_resumes() -> None:
    framer = LineFramer(10)
    for _ in range(50):
        framer.receive_data(b"x" * 7)
    framer.receive_data(b"tail\nnext\n")
    assert drain(framer) == [FrameTooLarge(10), b"next"]


def test_oversized_line_is_discarded_while_it_streams() -> None:
    framer = LineFramer(1000)
    for _ in range(10_000):
        framer.receive_data(b"y" * 997)
        assert framer.buffered_bytes <= 1001
    assert drain(framer) == []
    framer.receive_data(b"\n{}\n")
    assert drain(framer) == [FrameTooLarge(1000), b"{}"]


def test_oversized_unterminated_line_is_reported_at_eof() -> None:
    framer = LineFramer(4)
    framer.receive_data(b"123456")
    framer.receive_eof()
    assert drain(framer) == [FrameTooLarge(4)]


def test_buffer_never_exceeds_ceiling_plus_one() -> None:
    framer = LineFramer(100)
    framer.receive_data(b"z" * 101)
    assert framer.buffered_bytes == 101
    framer.receive_data(b"z")
    assert framer.buffered_bytes == 0


lines = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=20)


@given(lines, st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=8))
def test_chunk_boundaries_do_not_change_frames(parts: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(part + b"\n" for part in parts)
    whole = frames_of(stream, limit=32)
    framer = LineFramer(32)
    position = 0
    index = 0
    while position < len(stream):
        size = cuts[index % len(cuts)]
        framer.receive_data(stream[position : position + size])
        position += size
        index += 1
    assert drain(framer) == whole


@given(lines)
def test_frames_match_a_simple_model(parts: list[bytes]) -> None:
    limit = 32
    expected: list[object] = []
    for part in parts:
        line = part[:-1] if part.endswith(b"\r") else part
        if len(line) > limit:
            expected.append(FrameTooLarge(limit))
        elif line.strip(b" \t\r"):
            expected.append(line)
    assert frames_of(b"".join(p + b"\n" for p in parts), limit=limit) == expected
