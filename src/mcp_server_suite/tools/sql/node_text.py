"""PostgreSQL's node text, read back: a strict, bounded parser of `nodeToString()` output.

PostgreSQL writes its query trees as text (src/backend/nodes/outfuncs.c): a node is
`{LABEL :field value :field value ...}`, a list is `(item item ...)` (`(i 1 2)`, `(o 1 2)`,
`(x 1 2)` and `(b 1 2)` hold integers, OIDs, transaction ids and bitmapsets), `<>` is a
null pointer, and every other value is one token. `debug_print_rewritten` sends that text
to the client in a notice's detail, cut into lines by `format_node_dump()` (print.c), and
`pg_constraint.conbin` and `pg_rewrite.ev_action` hold it as it is.

Rules:

1. The text is untrusted bytes. Reading it either returns a tree or raises
   `NodeTextError`; it never raises anything else, and its work is linear in the text's
   length: one pass, no recursion (a stack bounded by `MAX_DEPTH`), at most
   `MAX_TEXT_BYTES` read.
2. Tokens follow `pg_strtok()` (read.c): whitespace (space, newline, tab) separates them,
   `(`, `)`, `{` and `}` are tokens of their own, and a backslash makes the next byte an
   ordinary one. `<>` alone is a null.
3. Line breaks. `format_node_dump()` cuts the text into lines of at most 78 bytes: it
   replaces a space with the line break when the line holds one after its first byte, and
   otherwise inserts the break inside a run of 78 bytes without a space. A replaced space is
   whitespace again when read as whitespace, escaped or not, so the tokens are the
   original ones; an inserted break would split a token, and cannot be told apart from a
   replaced space. `unwrap_node_dump()` therefore refuses any break that ends a run of at
   least `SPACELESS_RUN` bytes without a space: only such a break can have been inserted.
   PostgreSQL's own tokens are short, so only a name with many escaped characters (more
   than a dozen parentheses, braces or backslashes in a 63-byte name) makes such a run.
4. A field's value is the one value that follows its name, whatever its text: a name
   written by `outToken()` may look like a field name (`:funcid`) and is still the value.
   The one field whose value spans several tokens, `:constvalue` (`outDatum()`:
   `<length> [ b b ... ]`), is read as such. A field that appears twice in a node is an
   error.
5. This module is data only: no I/O, no PostgreSQL. What the fields mean is
   `resolution.py`'s business.
"""

import re
from dataclasses import dataclass, field
from typing import Final, TypeAlias

__all__ = [
    "DATUM_FIELD",
    "MAX_DEPTH",
    "MAX_TEXT_BYTES",
    "SPACELESS_RUN",
    "Datum",
    "Node",
    "NodeTextError",
    "TypedList",
    "Value",
    "read_node_text",
    "unwrap_node_dump",
]

# A tree's text is read up to this size. The largest trees are those of views over the
# system catalogs (`information_schema.columns` expands to about 200 KiB); 64 MiB leaves
# every query of 10,000 characters over any view room, and bounds the work of a hostile one.
MAX_TEXT_BYTES: Final = 64 * 1024 * 1024
# Nodes and lists nest at most this deep. PostgreSQL's own `max_stack_depth` stops a query
# nested much deeper than a few thousand levels long before its tree is written.
MAX_DEPTH: Final = 10_000
# `format_node_dump()`'s line length (print.c, LINELEN) less the line's first byte: a line
# break that ends a run of this many bytes without a space may have been inserted (Rule 3).
SPACELESS_RUN: Final = 77
# The field `outDatum()` writes over several tokens (Rule 4).
DATUM_FIELD: Final = "constvalue"

# A token (pg_strtok): one of the four special bytes, or a run of other bytes up to
# whitespace (space, newline, tab) or a special byte, a backslash keeping the byte after it
# (and a backslash at the very end kept as it is).
_TOKEN: Final = re.compile(rb"[(){}]|(?:\\[\s\S]|\\\Z|[^ \n\t(){}\\])+")
_NULL: Final = b"<>"
_OPENERS: Final = frozenset({b"{", b"("})
_CLOSERS: Final = frozenset({b"}", b")"})
# The list kinds of `nodeRead()`: integers, OIDs, transaction ids, bitmapset members.
_TYPED_LISTS: Final = frozenset({"i", "o", "x", "b"})


class NodeTextError(ValueError):
    """The text is not node text this parser reads (or is over its bounds)."""


@dataclass(frozen=True, slots=True)
class Datum:
    """A constant's value as `outDatum()` wrote it.

    Attributes:
        length: The length PostgreSQL gave (the value's size in bytes).
        data: The bytes written (all of a by-reference value, the Datum word of a by-value
            one), as the signed integers PostgreSQL printed.
    """

    length: int
    data: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TypedList:
    """A list of integers: `i` (integers), `o` (OIDs), `x` (transaction ids), `b` (a
    bitmapset).

    Attributes:
        kind: One of `i`, `o`, `x`, `b`.
        items: The integers.
    """

    kind: str
    items: tuple[int, ...]


@dataclass(slots=True)
class Node:
    """One node: its label (`FUNCEXPR`) and its fields, in order.

    Attributes:
        label: The node's label as written.
        fields: The values by field name (without the colon).
    """

    label: str
    fields: dict[str, "Value"] = field(default_factory=dict)


# A value: a null, a token's text (backslashes removed), a node, a list, an integer list or
# a constant's datum.
Value: TypeAlias = str | Node | list["Value"] | TypedList | Datum | None


def unwrap_node_dump(text: bytes, *, exact_lengths: bool = True) -> bytes:
    """Undo `format_node_dump()`'s line breaks, or refuse when one may split a token (Rule 3).

    Every line break becomes a space again. The result is read by `read_node_text` exactly
    as PostgreSQL's reader would read the text before it was cut.

    Args:
        text: A notice's detail, as sent by the server in the client's encoding.
        exact_lengths: The client's bytes are the server's (the server encoding is UTF8 or
            SQL_ASCII). Otherwise a character beyond ASCII counts as four bytes, the most
            any server encoding uses, so that no run is taken for shorter than it was.

    Returns:
        The text with its line breaks replaced by spaces.

    Raises:
        NodeTextError: The text is too long, or a line break ends a run of
            `SPACELESS_RUN` bytes without a space.
    """
    if len(text) > MAX_TEXT_BYTES:
        raise NodeTextError("the tree's text is too long to check")
    # Each line break, with the run of bytes before it since the last space or break (a raw
    # newline inside a name is escaped, and is whitespace to the reader all the same).
    start = 0
    while (brk := text.find(b"\n", start)) != -1:
        run = text[max(text.rfind(b" ", start, brk) + 1, start) : brk]
        length = len(run) if exact_lengths else _widest(run)
        if length >= SPACELESS_RUN:
            raise NodeTextError("a line break of the tree's text may split a name")
        start = brk + 1
    return text.replace(b"\n", b" ")


def _widest(run: bytes) -> int:
    # The most bytes a run could have had in the server's encoding: four for each character
    # beyond ASCII (a UTF-8 lead byte), one for each ASCII byte.
    if len(run) * 4 < SPACELESS_RUN:
        return len(run) * 4
    return sum(1 if byte < 0x80 else (4 if byte >= 0xC0 else 0) for byte in run)


def _tokens(text: bytes) -> list[tuple[bytes, bool]]:
    # Rule 2: (token, escaped) pairs; `escaped` tells a backslashed `<>` from the null.
    return [(token, b"\\" in token) for token in _TOKEN.findall(text)]


def _debackslash(token: bytes) -> str:
    # `debackslash()`: a backslash keeps the byte after it as it is.
    out = bytearray()
    position = 0
    while position < len(token):
        if token[position] == 0x5C and position + 1 < len(token):
            position += 1
        out.append(token[position])
        position += 1
    return out.decode("utf-8", errors="surrogateescape")


def _integer(token: bytes) -> int:
    try:
        return int(token.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise NodeTextError("an integer of the tree's text is malformed") from None


class _Frame:
    # A node or list being read: what has been read so far, and where it goes when done.
    __slots__ = ("field_name", "integers", "items", "node", "typed")

    def __init__(self, node: Node | None, typed: str | None = None) -> None:
        self.node = node
        self.items: list[Value] = []
        self.integers: list[int] = []
        self.typed = typed
        # The field whose value comes next, in a node.
        self.field_name: str | None = None


def read_node_text(text: bytes) -> Value:
    """Read one value of node text (Rules 1, 2 and 4).

    Args:
        text: Node text without `format_node_dump()`'s line breaks (`unwrap_node_dump`).

    Returns:
        The value: for a query tree, a list of `QUERY` nodes.

    Raises:
        NodeTextError: The text is malformed, nests deeper than `MAX_DEPTH`, is longer than
            `MAX_TEXT_BYTES`, or holds more than one value.
    """
    if len(text) > MAX_TEXT_BYTES:
        raise NodeTextError("the tree's text is too long to check")
    return _Reader(_tokens(text)).read()


class _Reader:
    # One pass over the tokens with an explicit stack of the nodes and lists being read.

    def __init__(self, tokens: list[tuple[bytes, bool]]) -> None:
        self.tokens = tokens
        self.index = 0
        self.stack: list[_Frame] = []
        self.result: list[Value] = []

    def read(self) -> Value:
        tokens = self.tokens
        stack = self.stack
        count = len(tokens)
        while self.index < count:
            token, escaped = tokens[self.index]
            self.index += 1
            frame = stack[-1] if stack else None
            if frame is None:
                self._value(token, escaped)
            elif frame.node is not None:
                if frame.field_name is None:
                    self._field_name(frame, frame.node, token, escaped)
                elif token not in _OPENERS and not (token == _NULL and not escaped):
                    # The common case: a field's one-token value.
                    if token in _CLOSERS:
                        raise NodeTextError("the tree's text closes what it never opened")
                    frame.node.fields[frame.field_name] = (
                        _debackslash(token) if escaped else token.decode("utf-8", "surrogateescape")
                    )
                    frame.field_name = None
                else:
                    self._value(token, escaped)
            elif frame.typed is not None:
                self._integer(frame, frame.typed, token)
            elif token == b")":
                stack.pop()
                self._deliver(frame.items)
            else:
                self._value(token, escaped)
        if stack:
            raise NodeTextError("the tree's text ends inside a node or a list")
        if len(self.result) != 1:
            raise NodeTextError("the tree's text does not hold exactly one value")
        return self.result[0]

    def _field_name(self, frame: _Frame, node: Node, token: bytes, escaped: bool) -> None:
        # Inside a node: a field name (its value comes next), or the closing brace.
        if token == b"}":
            self.stack.pop()
            self._deliver(node)
            return
        if not token.startswith(b":") or len(token) < 2 or escaped:
            raise NodeTextError("a node of the tree's text lacks a field name")
        name = token[1:].decode("ascii", errors="replace")
        if name in node.fields:
            raise NodeTextError(f"a node of the tree's text repeats :{name}")
        if name == DATUM_FIELD:
            self.index = _read_datum(self.tokens, self.index, node)
        else:
            frame.field_name = name

    def _integer(self, frame: _Frame, kind: str, token: bytes) -> None:
        # Inside an integer list: an integer, or the closing parenthesis.
        if token == b")":
            self.stack.pop()
            self._deliver(TypedList(kind, tuple(frame.integers)))
        else:
            frame.integers.append(_integer(token))

    def _value(self, token: bytes, escaped: bool) -> None:
        # A value: of the field named last, of the list, or the whole text's.
        if token == b"{":
            if self.index >= len(self.tokens):
                raise NodeTextError("the tree's text ends inside a node")
            label, label_escaped = self.tokens[self.index]
            self.index += 1
            if label_escaped or label in (b"}", b"{", b"(", b")"):
                raise NodeTextError("a node of the tree's text has no label")
            self._push(_Frame(Node(label.decode("ascii", errors="replace"))))
        elif token == b"(":
            typed = None
            if self.index < len(self.tokens) and not self.tokens[self.index][1]:
                kind = self.tokens[self.index][0].decode("ascii", errors="replace")
                if kind in _TYPED_LISTS:
                    typed = kind
                    self.index += 1
            self._push(_Frame(None, typed))
        elif token in (b"}", b")"):
            raise NodeTextError("the tree's text closes what it never opened")
        else:
            self._deliver(None if (token == _NULL and not escaped) else _debackslash(token))

    def _push(self, frame: _Frame) -> None:
        if len(self.stack) >= MAX_DEPTH:
            raise NodeTextError("the tree nests too deeply to be checked")
        self.stack.append(frame)

    def _deliver(self, value: Value) -> None:
        # Puts a finished value where it belongs: a node's pending field, a list, the result.
        if not self.stack:
            self.result.append(value)
            return
        frame = self.stack[-1]
        if frame.node is not None:
            # No text reaches this refusal: `read` hands every token inside a node to
            # `_field_name` until a field's name is read, and only that name's value is then
            # pushed or delivered, so a node's frame always has a name waiting here. The
            # check stays so that a change to `read` fails closed rather than misfiling a value.
            if frame.field_name is None:  # pragma: no cover
                raise NodeTextError("a value of the tree's text has no field name")
            frame.node.fields[frame.field_name] = value
            frame.field_name = None
        else:
            frame.items.append(value)


def _read_datum(tokens: list[tuple[bytes, bool]], index: int, node: Node) -> int:
    # `:constvalue <>` or `:constvalue <length> [ b b ... ]` (Rule 4); returns the next index.
    if index >= len(tokens):
        raise NodeTextError("the tree's text ends inside a constant")
    token, escaped = tokens[index]
    if token == _NULL and not escaped:
        node.fields[DATUM_FIELD] = None
        return index + 1
    length = _integer(token)
    if index + 1 >= len(tokens) or tokens[index + 1][0] != b"[":
        raise NodeTextError("a constant of the tree's text is malformed")
    position = index + 2
    data: list[int] = []
    while position < len(tokens) and tokens[position][0] != b"]":
        data.append(_integer(tokens[position][0]))
        position += 1
    if position >= len(tokens):
        raise NodeTextError("the tree's text ends inside a constant")
    node.fields[DATUM_FIELD] = Datum(length, tuple(data))
    return position + 1
