"""Contracts of `sandbox_fs_read`.

Rules:

1. The models hold on their own: the sanitizer runs before them on the wire, but a model
   built in-process (a test, a future transport) gets the same guarantees. A path never
   carries NUL or a lone surrogate, and an encoding is always a Python text codec that reads
   file content as written.
2. A validated `encoding` is the codec's canonical name (`utf-8`, `iso8859-1`), so the tool
   looks up one name per codec whatever spelling the caller used.
"""

import codecs
import encodings
import functools
import re
from typing import Annotated, Final

from pydantic import AfterValidator, Field

from mcp_server_suite.schemas.base import StrictModel
from mcp_server_suite.schemas.echo import quote

__all__ = [
    "DEFAULT_ENCODING",
    "DEFAULT_MAX_BYTES",
    "MAX_ENCODING_CHARS",
    "MAX_MAX_BYTES",
    "MAX_PATH_CHARS",
    "REFUSED_TEXT_CODECS",
    "SandboxFSReadParams",
    "SandboxFSReadResult",
    "canonical_text_codec",
]

# The design document's limits. 4,096 is Linux's PATH_MAX, the longest path the kernel takes
# in one call. Reads default to 64 KiB and are capped at 1 MiB, the size of the largest
# request frame, so one result never carries more file content than a request could.
MAX_PATH_CHARS: Final = 4096
DEFAULT_MAX_BYTES: Final = 64 * 1024
MAX_MAX_BYTES: Final = 1024 * 1024
DEFAULT_ENCODING: Final = "utf-8"

# The longest codec name or alias in the standard library has 21 characters
# ('unicodelittleunmarked'); 64 leave room for any spelling of them while bounding what is
# echoed and looked up.
MAX_ENCODING_CHARS: Final = 64

# Letters and digits in groups joined by single separators. Together with the normalisation
# below this bounds the distinct names that reach `codecs.lookup`, whose cache keeps every
# spelling it has resolved for the life of the process.
_ENCODING_SHAPE: Final = re.compile(r"[A-Za-z0-9]+(?:[-_.][A-Za-z0-9]+)*")

# Text codecs (bytes to str) that still do not read a file as text, refused by canonical name:
# - idna and punycode decode domain labels, and punycode's decoder is quadratic: 1 MiB of
#   it holds a worker thread and the interpreter lock for seconds, and a thread cannot be
#   cancelled;
# - unicode-escape and raw-unicode-escape interpret backslash escapes, turning the text
#   `\u202e` in a file into a real bidi override, which is the class of character the
#   sanitizer exists to keep out (and they warn on unknown escapes);
# - undefined refuses every input by design.
REFUSED_TEXT_CODECS: Final = frozenset(
    {"idna", "punycode", "unicode-escape", "raw-unicode-escape", "undefined"}
)


def canonical_text_codec(name: str) -> str:
    """Return the canonical name of a Python text codec that may decode file content.

    Args:
        name: A codec name or alias, in any case.

    Returns:
        The codec's canonical name, as `codecs.lookup(name).name` spells it.

    Raises:
        ValueError: The name has separators out of place, names no codec, names a
            bytes-to-bytes or str-to-str codec (`base64`, `zlib`, `rot13`), or names a codec
            in `REFUSED_TEXT_CODECS`.
    """
    return _lookup_text_codec(name)


# Every call names a codec, almost always the same few: their verdicts are kept. Refusals
# raise and so are never kept, and the size bounds what a caller cycling names can hold.
@functools.lru_cache(maxsize=64)
def _lookup_text_codec(name: str) -> str:
    shown = quote(name, MAX_ENCODING_CHARS)
    if not _ENCODING_SHAPE.fullmatch(name):
        raise ValueError(f"{shown} is not a codec name (letters and digits, single separators)")
    key = encodings.normalize_encoding(name).lower()
    try:
        canonical = codecs.lookup(key).name
        # bytes.decode accepts only text encodings: for the bytes-to-bytes and str-to-str
        # codecs it raises LookupError, from the flag the standard library keeps for exactly
        # this check. The probe is not empty because empty input never reaches a codec.
        b"\x00".decode(key)
    except LookupError:
        raise ValueError(f"{shown} is not a Python text codec") from None
    except UnicodeError:
        # A text codec that cannot decode one NUL byte (UTF-16 needs two) is a text codec.
        pass
    if canonical in REFUSED_TEXT_CODECS:
        raise ValueError(f"{shown} is a text codec that does not decode file content")
    return canonical


def _plain_path(untrusted_path: str) -> str:
    # Lone surrogates need no check here: pydantic refuses them in every `str` field
    # (`string_unicode`), which matters because os.fsencode would turn U+DC80..U+DCFF into
    # raw bytes (surrogateescape), a second spelling of a name. The tests pin that.
    if "\x00" in untrusted_path:
        raise ValueError("the path holds a NUL character")
    return untrusted_path


class SandboxFSReadParams(StrictModel):
    """Arguments of `sandbox_fs_read`."""

    relative_path: Annotated[
        str,
        Field(
            min_length=1,
            max_length=MAX_PATH_CHARS,
            description=(
                "Path of the file to read, relative to the sandbox root, with '/' separators "
                "(for example 'reports/2024.txt'). Symbolic links are followed while they "
                "stay inside the sandbox."
            ),
        ),
        AfterValidator(_plain_path),
    ]
    encoding: Annotated[
        str,
        Field(
            min_length=1,
            max_length=MAX_ENCODING_CHARS,
            description=(
                "Python text codec used to decode the file strictly, for example 'utf-8', "
                "'utf-16', 'latin-1', 'cp1252' or 'shift_jis'."
            ),
        ),
        AfterValidator(canonical_text_codec),
    ] = DEFAULT_ENCODING
    max_bytes: int = Field(
        default=DEFAULT_MAX_BYTES,
        ge=1,
        le=MAX_MAX_BYTES,
        description="Read at most this many bytes from the start of the file.",
    )


class SandboxFSReadResult(StrictModel):
    """Result of `sandbox_fs_read`."""

    # Not capped at MAX_PATH_CHARS: symbolic links inside the sandbox can expand a short path
    # into a longer canonical one, and the walk opens it one component at a time, so PATH_MAX
    # does not bound it.
    resolved_path: str = Field(
        min_length=1,
        description="The file's canonical path relative to the sandbox root, '/'-separated.",
    )
    content: str = Field(description="The decoded text.")
    bytes_read: int = Field(
        ge=0,
        le=MAX_MAX_BYTES,
        description=(
            "Bytes decoded into content. A multi-byte character cut by max_bytes is dropped "
            "and not counted."
        ),
    )
    truncated: bool = Field(description="True when the file is longer than max_bytes.")
