"""The text encodings `sandbox_fs_read` decodes with: a fixed table, looked up by name.

Rules:

1. A caller's encoding name is matched against this table, and only against it: an unknown
   name never reaches `codecs.lookup`, whose cache keeps every name it has resolved (30,000
   distinct unknown names grew a server by 7 MiB), and no codec outside the table is ever
   loaded on a caller's behalf.
2. Every codec in the table reads bytes as text. In every codec where ASCII text reads as
   itself, no ASCII text decodes to a control or format character the bytes do not hold: a
   file that looks like plain ASCII to a reviewer or a scanner never hides a bidi override
   when read with one of them. That is why `utf-7` (which reads the ASCII `+IC4-` as U+202E)
   and the ISO-2022 variants that can switch to a character set holding U+00AD are refused.
   The codecs where ASCII does not read as itself at all (UTF-16, UTF-32 and EBCDIC) are
   accepted without that promise: there, bytes that look like ASCII text are other text
   altogether, which can hold any character (`. ` read as UTF-16-LE is U+202E, `'` read as
   cp037 is ESC). That is what those encodings mean; a caller who names one gets its text.
   The tests check both halves for every entry.
3. A name matches after case folding and with `-` read as `_`, as Python's own aliases
   spell them; the table holds each codec's module name and the standard library's aliases
   of it, so `UTF8`, `latin-1`, `ISO-8859-1` and `windows-1252` all match.
4. Each codec has a kind that says where a piece of a file may start (see `Kind`).
"""

import codecs
import enum
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from encodings import aliases
from types import MappingProxyType
from typing import Final

from mcp_server_suite.schemas.echo import quote

__all__ = [
    "MAX_ENCODING_CHARS",
    "REFUSED",
    "Kind",
    "TextCodec",
    "text_codec",
]

# The longest codec name or alias in the table has 21 characters ('unicodelittleunmarked');
# 64 leave room for any spelling of them while bounding what is echoed.
MAX_ENCODING_CHARS: Final = 64

# Letters and digits in groups joined by single separators: every name in the table has
# this shape, so anything else is refused before it is even normalised.
_NAME_SHAPE: Final = re.compile(r"[A-Za-z0-9]+(?:[-_.][A-Za-z0-9]+)*")


class Kind(enum.Enum):
    """How a codec maps bytes to characters, which decides where a piece may start."""

    # Every byte is one character: a piece may start at any offset.
    SINGLE_BYTE = enum.auto()
    # UTF-8 is self-synchronising: a piece that starts inside a character skips its
    # continuation bytes (at most three).
    UTF_8 = enum.auto()
    # Fixed code units (2 or 4 bytes, `TextCodec.unit`) counted from the start of the file:
    # a piece starts at the next unit boundary, and a UTF-16 piece also skips the second half
    # of a surrogate pair.
    UNITS = enum.auto()
    # Legacy multi-byte encodings without state (Shift JIS, EUC, GBK, Big5...): a byte that
    # continues a character cannot be told from one that starts it, so a piece must start at
    # 0 or at the `next_offset` of the piece before it.
    MULTI_BYTE = enum.auto()
    # What a byte means depends on escape sequences before it (ISO-2022-JP, HZ): a piece
    # can only start at offset 0.
    STATEFUL = enum.auto()


@dataclass(frozen=True, slots=True)
class TextCodec:
    """One accepted codec.

    Attributes:
        name: The canonical name, as `codecs.lookup(name).name` spells it; a validated
            `encoding` argument is always this name.
        kind: Where a piece may start.
        unit: The code unit in bytes, for `Kind.UNITS`; 1 otherwise.
        byte_orders: For `utf-16` and `utf-32`, whose byte order comes from the mark at the
            start of the file (which the file must have): each mark, with the name of the
            fixed-order codec it selects.
        drops_signature: `utf-8-sig`: a byte order mark at the start of the file is dropped.
    """

    name: str
    kind: Kind
    unit: int = 1
    byte_orders: tuple[tuple[bytes, str], ...] = ()
    drops_signature: bool = False

    def decoder(self) -> codecs.IncrementalDecoder:
        """A strict incremental decoder of this codec."""
        return _decoder_class(self.name)(errors="strict")


def _all(kind: Kind, names: str) -> list[TextCodec]:
    return [TextCodec(name, kind) for name in names.split()]


_UTF_16_ORDERS: Final = ((b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))
_UTF_32_ORDERS: Final = ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"))

# The table. Names are Python's canonical spellings (a test checks each against
# `codecs.lookup`); nothing is looked up until a caller names the codec.
_TABLE: Final = (
    TextCodec("utf-8", Kind.UTF_8),
    TextCodec("utf-8-sig", Kind.UTF_8, drops_signature=True),
    TextCodec("utf-16", Kind.UNITS, 2, _UTF_16_ORDERS),
    TextCodec("utf-16-le", Kind.UNITS, 2),
    TextCodec("utf-16-be", Kind.UNITS, 2),
    TextCodec("utf-32", Kind.UNITS, 4, _UTF_32_ORDERS),
    TextCodec("utf-32-le", Kind.UNITS, 4),
    TextCodec("utf-32-be", Kind.UNITS, 4),
    # `charmap` without a mapping table decodes exactly like latin-1.
    *_all(
        Kind.SINGLE_BYTE,
        """
        ascii charmap iso8859-1 iso8859-2 iso8859-3 iso8859-4 iso8859-5 iso8859-6 iso8859-7
        iso8859-8 iso8859-9 iso8859-10 iso8859-11 iso8859-13 iso8859-14 iso8859-15
        iso8859-16 cp1250 cp1251 cp1252 cp1253 cp1254 cp1255 cp1256 cp1257 cp1258 cp437
        cp720 cp737 cp775 cp850 cp852 cp855 cp857 cp858 cp860 cp861 cp862 cp863 cp864 cp865
        cp866 cp869 cp874 cp1125 koi8-r koi8-t koi8-u kz1048 ptcp154 tis-620 mac-roman
        mac-cyrillic mac-greek mac-iceland mac-latin2 mac-turkish hp-roman8
        """,
    ),
    # EBCDIC: ASCII text does not read as itself in these, so it cannot hide anything in
    # them (rule 2).
    *_all(Kind.SINGLE_BYTE, "cp037 cp273 cp500 cp875 cp1026 cp1140"),
    *_all(
        Kind.MULTI_BYTE,
        """
        shift_jis cp932 shift_jis_2004 shift_jisx0213 euc_jp euc_jis_2004 euc_jisx0213
        euc_kr cp949 johab gb2312 gbk gb18030 big5 big5hkscs cp950
        """,
    ),
    # The ISO-2022 variants whose character sets hold no control or format character; the
    # others (iso2022_jp_2, _2004, _3, iso2022_kr) reach U+00AD SOFT HYPHEN from ASCII.
    *_all(Kind.STATEFUL, "iso2022_jp iso2022_jp_1 iso2022_jp_ext hz"),
)


@functools.cache
def _decoder_class(name: str) -> "codecs._IncrementalDecoder":
    # Only names of the table reach here, so the cache is bounded by the table.
    return codecs.getincrementaldecoder(name)


def _key(name: str) -> str:
    return name.lower().replace("-", "_")


def _index() -> Mapping[str, TextCodec]:
    # The standard library's alias table maps each alias to a module name; a codec's module
    # is its canonical name in that spelling, or the alias of it (`iso8859_1` -> `latin_1`).
    by_module = {aliases.aliases.get(_key(codec.name), _key(codec.name)): codec for codec in _TABLE}
    index = {
        _key(alias): by_module[module]
        for alias, module in aliases.aliases.items()
        if module in by_module
    }
    index.update(by_module)
    index.update({_key(codec.name): codec for codec in _TABLE})
    return MappingProxyType(index)


_BY_NAME: Final = _index()
_CANONICAL: Final = MappingProxyType({codec.name: codec for codec in _TABLE})

# Python codecs refused on purpose, by module name, with the reason a caller is told; the
# standard library's aliases of each are refused with it. Any other name outside the table
# is simply not an encoding this server reads.
_REFUSED_MODULES: Final = {
    "utf_7": "it can turn ASCII text into a bidi override ('+IC4-' is U+202E)",
    **dict.fromkeys(
        ("iso2022_jp_2", "iso2022_jp_2004", "iso2022_jp_3", "iso2022_kr"),
        "its escape sequences can turn ASCII text into a format character (U+00AD)",
    ),
    **dict.fromkeys(
        ("unicode_escape", "raw_unicode_escape"),
        "it interprets backslash escapes, turning the text '\\u202e' into a real one",
    ),
    **dict.fromkeys(("idna", "punycode"), "it decodes domain name labels, not file content"),
    **dict.fromkeys(
        (
            "base64_codec",
            "bz2_codec",
            "hex_codec",
            "quopri_codec",
            "rot_13",
            "uu_codec",
            "zlib_codec",
        ),
        "it is a bytes-to-bytes or text-to-text transform, not a text encoding",
    ),
}

REFUSED: Final[Mapping[str, str]] = MappingProxyType(
    {
        **{
            _key(alias): _REFUSED_MODULES[module]
            for alias, module in aliases.aliases.items()
            if module in _REFUSED_MODULES
        },
        **{_key(module): reason for module, reason in _REFUSED_MODULES.items()},
        # Spellings the alias table lacks but callers use.
        "rot13": _REFUSED_MODULES["rot_13"],
        "base64": _REFUSED_MODULES["base64_codec"],
    }
)

_EXAMPLES: Final = "for example utf-8, utf-16, latin-1, cp1252 or shift_jis"


def text_codec(untrusted_name: str) -> TextCodec:
    """Return the accepted codec a caller's encoding name stands for.

    Args:
        untrusted_name: The caller's name, in any case, with `-` or `_` separators.

    Returns:
        The codec.

    Raises:
        ValueError: The name is not one of the table's; the message says why when the name
            is a Python codec this server refuses on purpose.
    """
    # A canonical name (what a validated argument holds) is found as it is; any other
    # spelling is normalised first, once it has the shape of a name.
    codec = _CANONICAL.get(untrusted_name)
    if codec is not None:
        return codec
    key = _key(untrusted_name) if _NAME_SHAPE.fullmatch(untrusted_name) else ""
    codec = _BY_NAME.get(key)
    if codec is not None:
        return codec
    shown = quote(untrusted_name, MAX_ENCODING_CHARS)
    reason = REFUSED.get(key)
    if reason is not None:
        raise ValueError(f"{shown} is refused: {reason}")
    raise ValueError(f"{shown} is not a text encoding this server reads ({_EXAMPLES})")
