"""The table of text encodings: what it accepts, what it refuses, and the rules each entry keeps.

Rule 2 of `tools/fs/codecs.py` is checked for every entry: either ASCII text does not read
as itself in the codec (then a file of ASCII text cannot hide anything in it), or no ASCII
input decodes to a control, format or surrogate character the bytes do not literally hold.
Stateless codecs are checked on every ASCII byte; stateful ones on every escape sequence
they know, followed by every one- and two-byte continuation. The same checks catch the
codecs the table refuses, which shows they can fail.
"""

from __future__ import annotations

import codecs
import encodings
import unicodedata
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from mcp_server_suite.schemas.fs import SandboxFSReadParams
from mcp_server_suite.tools.fs.codecs import _TABLE, Kind, text_codec
from mcp_server_suite.tools.fs.read import wire_cost

NAMES = [codec.name for codec in _TABLE]
HIDDEN = frozenset({"Cc", "Cf", "Cs"})


@pytest.mark.parametrize("name", NAMES)
def test_each_entry_is_a_python_text_codec_by_its_canonical_name(name: str) -> None:
    info = codecs.lookup(name)
    assert info.name == name
    assert info._is_text_encoding
    assert text_codec(name).name == name


ALIASES = [
    ("UTF8", "utf-8"),
    ("utf_8", "utf-8"),
    ("U8", "utf-8"),
    ("cp65001", "utf-8"),
    ("UTF-8-SIG", "utf-8-sig"),
    ("utf-16", "utf-16"),
    ("UTF-16LE", "utf-16-le"),
    ("unicodelittleunmarked", "utf-16-le"),
    ("utf_32_be", "utf-32-be"),
    ("latin-1", "iso8859-1"),
    ("ISO-8859-1", "iso8859-1"),
    ("l1", "iso8859-1"),
    ("iso8859_15", "iso8859-15"),
    ("us-ascii", "ascii"),
    ("ansi_x3.4_1968", "ascii"),
    ("windows-1252", "cp1252"),
    ("sjis", "shift_jis"),
    ("EUC-JP", "euc_jp"),
    ("koi8_r", "koi8-r"),
    ("macintosh", "mac-roman"),
    ("charmap", "charmap"),
    ("csiso2022jp", "iso2022_jp"),
]


@pytest.mark.parametrize(("spelling", "name"), ALIASES)
def test_aliases_and_spellings(spelling: str, name: str) -> None:
    assert text_codec(spelling).name == name


def test_every_standard_alias_of_an_entry_is_accepted() -> None:
    modules = {encodings.normalize_encoding(codec.name).lower() for codec in _TABLE}
    for alias, module in encodings.aliases.aliases.items():
        if module in modules or module == "latin_1":
            assert text_codec(alias), alias


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("utf-7", "bidi override"),
        ("UTF7", "bidi override"),
        ("iso2022_jp_2", "U+00AD"),
        ("iso2022_kr", "U+00AD"),
        ("unicode_escape", "backslash escapes"),
        ("raw-unicode-escape", "backslash escapes"),
        ("idna", "domain name"),
        ("punycode", "domain name"),
        ("base64", "not a text encoding"),
        ("rot13", "not a text encoding"),
        ("quopri", "not a text encoding"),
        ("zlib", "not a text encoding"),
    ],
)
def test_python_codecs_refused_on_purpose_say_why(name: str, reason: str) -> None:
    with pytest.raises(ValueError, match="is refused") as info:
        text_codec(name)
    assert reason in str(info.value)


@pytest.mark.parametrize(
    "name",
    ["utf8mb4", "mbcs", "utf-9", "", "utf--8", "utf 8", " utf-8", "utf-8\n", "../utf-8", "x" * 64],
)
def test_other_names_are_not_encodings_this_server_reads(name: str) -> None:
    with pytest.raises(ValueError, match="is not a text encoding this server reads"):
        text_codec(name)


def test_unknown_names_never_reach_the_codec_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    # The standard library keeps every name it has looked up, misses included, for the
    # life of the process (30,000 names grew a server by 7 MiB): not one is looked up here.
    def no_lookup(name: str) -> Any:
        raise AssertionError(f"looked up {name!r}")

    cached = dict(encodings._cache)
    monkeypatch.setattr(codecs, "lookup", no_lookup)
    for index in range(30_000):
        with pytest.raises(ValidationError):
            SandboxFSReadParams(relative_path="x", encoding=f"no-such-codec-{index}")
    assert encodings._cache == cached


# --- rule 2: nothing hidden in ASCII ------------------------------------------------------

PRINTABLE = bytes(range(0x20, 0x7F))


def reads_ascii_as_itself(name: str) -> bool:
    # Most printable ASCII bytes decode to themselves: JIS X 0201 has its yen sign, cp864
    # its Arabic percent sign, HZ its tilde escape, and ASCII text still reads as text.
    same = 0
    for value in PRINTABLE:
        try:
            same += bytes([value]).decode(name) == chr(value)
        except UnicodeDecodeError:
            continue
    return same > len(PRINTABLE) // 2


# The designations Python's ISO-2022 and HZ codecs know, and their single shifts.
ESCAPES = [
    b"\x1b(B",
    b"\x1b(J",
    b"\x1b(I",
    b"\x1b$@",
    b"\x1b$B",
    b"\x1b$A",
    b"\x1b$(C",
    b"\x1b$(D",
    b"\x1b$(O",
    b"\x1b$(P",
    b"\x1b$(Q",
    b"\x1b.A",
    b"\x1b.F",
    b"\x1b$)C\x0e",
    b"\x1b&@\x1b$B",
    b"~{",
]
SHIFTS = [b"", b"\x1bN", b"\x1bO"]
CONTINUATIONS = [bytes([a]) for a in range(0x20, 0x7F)] + [
    bytes([a, b]) for a in range(0x21, 0x7F) for b in range(0x21, 0x7F)
]


def hidden_in(name: str, data: bytes) -> set[str]:
    try:
        text = data.decode(name)
    except UnicodeDecodeError:
        return set()
    if text.isprintable() or (text.isascii() and text.encode("ascii") == data):
        # Shortcuts for what most inputs decode to, where the check below finds nothing:
        # printable text has no character of the categories Cc, Cf and Cs (str.isprintable is
        # false for each), and text read as itself has only ASCII characters of the input.
        return set()
    return {
        char
        for char in text
        if unicodedata.category(char) in HIDDEN and not (char.isascii() and ord(char) in data)
    }


def ascii_inputs(name: str) -> Iterator[bytes]:
    yield from (bytes([value]) for value in range(0x80))
    for escape in ESCAPES:
        if hidden_in(name, escape) or not _decodes(name, escape):
            continue
        for shift in SHIFTS:
            for continuation in CONTINUATIONS:
                yield escape + shift + continuation


def _decodes(name: str, data: bytes) -> bool:
    try:
        data.decode(name)
    except UnicodeDecodeError:
        return False
    return True


def hidden_characters(name: str, *, stateful: bool) -> set[str]:
    found: set[str] = set()
    for data in ascii_inputs(name) if stateful else (bytes([value]) for value in range(0x80)):
        found |= hidden_in(name, data)
    return found


@pytest.mark.parametrize("name", NAMES)
def test_no_accepted_codec_hides_a_control_in_ascii_text(name: str) -> None:
    if not reads_ascii_as_itself(name):
        # UTF-16, UTF-32 and EBCDIC: a file of ASCII text reads as something else entirely.
        assert name.startswith(("utf-16", "utf-32")) or name in {
            "cp037",
            "cp273",
            "cp500",
            "cp875",
            "cp1026",
            "cp1140",
        }
        return
    assert hidden_characters(name, stateful=text_codec(name).kind is Kind.STATEFUL) == set()


@pytest.mark.parametrize(
    ("name", "ascii_text", "hidden"),
    [
        ("utf-16-le", b"ab. cd", "\u202e"),
        ("utf-16-be", b"a  .b ", "\u202e"),
        ("cp037", b"it's", "\x1b"),
        ("cp1140", b"100%", "\n"),
    ],
)
def test_the_codecs_without_the_promise_can_read_ascii_as_anything(
    name: str, ascii_text: bytes, hidden: str
) -> None:
    # Rule 2 makes no promise for them, and says so: the README must not claim more.
    assert ascii_text.isascii()
    assert not reads_ascii_as_itself(name)
    assert hidden in ascii_text.decode(name)


@pytest.mark.parametrize(
    ("name", "hidden"), [("utf-7", "\u202e"), ("iso2022_jp_2", "\xad"), ("iso2022_kr", "\xad")]
)
def test_the_same_check_finds_what_the_refused_codecs_hide(name: str, hidden: str) -> None:
    if name == "utf-7":
        assert hidden_in(name, b"+IC4-") == {hidden}
    else:
        assert hidden in hidden_characters(name, stateful=True)


# --- what decoding can give ---------------------------------------------------------------


@given(data=st.binary(max_size=64), name=st.sampled_from(NAMES))
def test_no_accepted_codec_decodes_to_a_lone_surrogate(data: bytes, name: str) -> None:
    # Which is why a read needs no check for one: the text could not be written as JSON.
    try:
        text = text_codec(name).decoder().decode(data, final=True)
    except UnicodeError:
        return
    assert not any(0xD800 <= ord(char) <= 0xDFFF for char in text)


# A byte costs at most 13 on the wire (a control character, escaped once in each copy):
# what the response bound relies on when it cuts a piece.
MAX_WIRE_BYTES_PER_BYTE = 13


@pytest.mark.parametrize("name", NAMES)
def test_no_byte_costs_more_than_thirteen_on_the_wire(name: str) -> None:
    empty = wire_cost("")
    pairs = [bytes([value]) for value in range(256)]
    if text_codec(name).kind is Kind.MULTI_BYTE:
        pairs += [bytes([a, b]) for a in range(0x80, 0x100) for b in range(0x40, 0x100)]
    for data in pairs:
        try:
            text = text_codec(name).decoder().decode(data, final=True)
        except UnicodeError:
            continue
        assert wire_cost(text) - empty <= MAX_WIRE_BYTES_PER_BYTE * len(data), (name, data)


@given(data=st.binary(min_size=1, max_size=48), name=st.sampled_from(NAMES))
def test_no_input_costs_more_than_thirteen_a_byte(data: bytes, name: str) -> None:
    try:
        text = text_codec(name).decoder().decode(data, final=True)
    except UnicodeError:
        return
    assert wire_cost(text) - wire_cost("") <= MAX_WIRE_BYTES_PER_BYTE * len(data)
