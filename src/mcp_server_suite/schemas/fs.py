"""Contracts of the file tools, `sandbox_fs_read` and `sandbox_fs_list`.

Rules:

1. The models hold on their own: the sanitizer runs before them on the wire, but a model
   built in-process (a test, a future transport) gets the same guarantees. A path never
   carries NUL or a lone surrogate, and an encoding is always one of the accepted text
   codecs (`tools/fs/codecs.py`).
2. A validated `encoding` is the codec's canonical name (`utf-8`, `iso8859-1`), whatever
   spelling the caller used.
"""

from typing import Annotated, Final, Literal

from pydantic import AfterValidator, Field

from mcp_server_suite.schemas.arguments import ToolArguments
from mcp_server_suite.schemas.base import StrictModel
from mcp_server_suite.tools.fs.codecs import MAX_ENCODING_CHARS, text_codec

__all__ = [
    "DEFAULT_ENCODING",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ENTRIES",
    "MAX_ENCODING_CHARS",
    "MAX_MAX_BYTES",
    "MAX_MAX_ENTRIES",
    "MAX_NAME_CHARS",
    "MAX_OFFSET",
    "MAX_PATH_CHARS",
    "EntryType",
    "SandboxFSEntry",
    "SandboxFSListParams",
    "SandboxFSListResult",
    "SandboxFSReadParams",
    "SandboxFSReadResult",
    "canonical_text_codec",
]

# The design document's limits. 4,096 is Linux's PATH_MAX, the longest path the kernel takes
# in one call. Reads default to 64 KiB and are capped at 1 MiB, the size of the largest
# request frame, so one piece never carries more file content than a request could.
MAX_PATH_CHARS: Final = 4096
DEFAULT_MAX_BYTES: Final = 64 * 1024
MAX_MAX_BYTES: Final = 1024 * 1024
DEFAULT_ENCODING: Final = "utf-8"

# The largest integer I-JSON carries exactly (RFC 7493): offsets beyond it could not be
# sent back in `next_offset` without rounding, and no file on Linux is that large anyway.
MAX_OFFSET: Final = 2**53 - 1

# A listing shows 200 entries unless asked for more, at most 1,000: enough to find a file in
# any directory a person keeps, while bounding one answer.
DEFAULT_MAX_ENTRIES: Final = 200
MAX_MAX_ENTRIES: Final = 1000

# The longest name a listing shows: FUSE passes names of up to 1,024 bytes (FUSE_NAME_MAX),
# past Linux's NAME_MAX of 255, so 1,024 characters hold any name the kernel can look up; a
# longer one is left out and counted, as are names no argument can carry.
MAX_NAME_CHARS: Final = 1024

EntryType = Literal["file", "directory", "symlink", "other"]


def canonical_text_codec(name: str) -> str:
    """Return the canonical name of an accepted text codec.

    Raises:
        ValueError: The name is not one of the accepted codecs' names or aliases.
    """
    return text_codec(name).name


def _plain_path(untrusted_path: str) -> str:
    # Lone surrogates need no check here: pydantic refuses them in every `str` field
    # (`string_unicode`), which matters because os.fsencode would turn U+DC80..U+DCFF into
    # raw bytes (surrogateescape), a second spelling of a name. The tests pin that.
    if "\x00" in untrusted_path:
        raise ValueError("the path holds a NUL character")
    return untrusted_path


_PATH_FIELD: Final = Field(
    min_length=1,
    max_length=MAX_PATH_CHARS,
    description=(
        "Path relative to the sandbox root, with '/' separators (for example "
        f"'reports/2024.txt'), 1 to {MAX_PATH_CHARS:,} characters. Symbolic links are "
        "followed while they stay inside the sandbox."
    ),
)


class SandboxFSReadParams(ToolArguments):
    """Arguments of `sandbox_fs_read`."""

    relative_path: Annotated[str, _PATH_FIELD, AfterValidator(_plain_path)]
    encoding: Annotated[
        str,
        Field(
            min_length=1,
            max_length=MAX_ENCODING_CHARS,
            description=(
                "Text encoding used to decode the file strictly, for example 'utf-8', "
                "'utf-16' (the file must start with a byte order mark), 'utf-16-le', "
                f"'latin-1', 'cp1252' or 'shift_jis'; 1 to {MAX_ENCODING_CHARS} characters; "
                f"null means '{DEFAULT_ENCODING}'."
            ),
        ),
        AfterValidator(canonical_text_codec),
    ] = DEFAULT_ENCODING
    max_bytes: int = Field(
        default=DEFAULT_MAX_BYTES,
        ge=1,
        le=MAX_MAX_BYTES,
        description=(
            f"Read at most this many bytes, starting at offset: 1 to {MAX_MAX_BYTES:,} (1 MiB); "
            f"null means {DEFAULT_MAX_BYTES:,} (64 KiB)."
        ),
    )
    offset: int = Field(
        default=0,
        ge=0,
        le=MAX_OFFSET,
        description=(
            "Where to start, in bytes from the start of the file: 0, or the next_offset of "
            f"the piece before, to read a large file in pieces; 0 to {MAX_OFFSET:,} "
            "(2**53 - 1); null means 0."
        ),
    )


class SandboxFSReadResult(StrictModel):
    """Result of `sandbox_fs_read`."""

    # Not capped at MAX_PATH_CHARS: symbolic links inside the sandbox can expand a short path
    # into a longer canonical one, which the tool bounds itself.
    resolved_path: str = Field(
        min_length=1,
        description="The file's canonical path relative to the sandbox root, '/'-separated.",
    )
    content: str = Field(description="The decoded text.")
    offset: int = Field(
        ge=0,
        le=MAX_OFFSET,
        description=(
            "Where content starts in the file: the offset asked for, moved past the rest of "
            "a character that started before it."
        ),
    )
    bytes_read: int = Field(
        ge=0,
        le=MAX_MAX_BYTES,
        description=(
            "Bytes decoded into content. A character cut at the end of the piece is left "
            "for the next one and not counted."
        ),
    )
    next_offset: int = Field(
        ge=0,
        le=MAX_OFFSET,
        description=(
            "Where the next piece starts: offset + bytes_read, never past 2^53 - 1 (the "
            "largest offset JSON carries exactly; nothing after it is read)."
        ),
    )
    truncated: bool = Field(
        description=(
            "True when the file goes on after next_offset: read on from there. A stateful "
            "encoding (iso2022_jp, hz) is read in one piece from offset 0, so a file longer "
            "than one piece is refused in it rather than truncated."
        )
    )


class SandboxFSListParams(ToolArguments):
    """Arguments of `sandbox_fs_list`."""

    relative_path: Annotated[
        str,
        Field(
            min_length=1,
            max_length=MAX_PATH_CHARS,
            description=(
                "Directory to list, relative to the sandbox root ('.' is the root itself), "
                f"1 to {MAX_PATH_CHARS:,} characters; null means '.'. Symbolic links are "
                "followed while they stay inside the sandbox."
            ),
        ),
        AfterValidator(_plain_path),
    ] = "."
    max_entries: int = Field(
        default=DEFAULT_MAX_ENTRIES,
        ge=1,
        le=MAX_MAX_ENTRIES,
        description=(
            "List at most this many entries: the first the file system returns (its own "
            f"order), sorted by name; 1 to {MAX_MAX_ENTRIES:,}; null means {DEFAULT_MAX_ENTRIES}."
        ),
    )


class SandboxFSEntry(StrictModel):
    """One entry of a directory listing."""

    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS, description="The entry's name.")
    type: EntryType = Field(
        description=(
            "'file' and 'directory' as they are; 'symlink' for a symbolic link that leads to "
            "a file or directory inside the sandbox; 'other' for anything the tools do not "
            "read: FIFOs, sockets, devices, links that lead outside or nowhere, and mount "
            "points the sandbox does not cross."
        )
    )
    size: int | None = Field(
        ge=0,
        le=MAX_OFFSET,
        description=(
            "Size in bytes, for files; null otherwise, and for a size past 2^53 - 1, which "
            "JSON cannot carry exactly."
        ),
    )
    modified: str | None = Field(
        description=(
            "Last modification time, ISO 8601 in UTC; null for a mount point, whose own "
            "times lie outside the sandbox, and for a time outside the years 1 to 9999."
        )
    )


class SandboxFSListResult(StrictModel):
    """Result of `sandbox_fs_list`."""

    resolved_path: str = Field(
        min_length=1,
        description="The directory's canonical path relative to the sandbox root ('.' for it).",
    )
    entries: list[SandboxFSEntry] = Field(
        max_length=MAX_MAX_ENTRIES,
        description=(
            "The first entries the file system returned (at most max_entries), sorted by name."
        ),
    )
    truncated: bool = Field(
        description=(
            "True when the directory holds more entries than were listed: past max_entries, "
            "past what one response holds, or past the work one listing may do resolving "
            "symbolic links."
        )
    )
    unnamed_entries: int = Field(
        ge=0,
        description=(
            "Entries met and left out because no argument could name them: names that are not "
            "valid UTF-8, that hold a control or format character the argument sanitizer "
            "refuses, or that are longer than 1,024 characters."
        ),
    )
