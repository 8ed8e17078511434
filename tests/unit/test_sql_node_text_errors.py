"""The refusals of the node-text reader that no PostgreSQL server provokes.

`node_text.py` reads text PostgreSQL printed; these inputs are what a server never prints (a
tree over the size bound, a constant cut off after its field name), built by hand, and each
must be the typed `NodeTextError` with its message, never another exception or a tree.
"""

import pytest

from mcp_server_suite.tools.sql.node_text import (
    MAX_TEXT_BYTES,
    SPACELESS_RUN,
    NodeTextError,
    read_node_text,
    unwrap_node_dump,
)


def test_text_over_the_size_bound_is_refused_before_it_is_read() -> None:
    text = b" " * (MAX_TEXT_BYTES + 1)
    with pytest.raises(NodeTextError, match=r"^the tree's text is too long to check$"):
        unwrap_node_dump(text)
    with pytest.raises(NodeTextError, match=r"^the tree's text is too long to check$"):
        read_node_text(text)
    # At the bound itself the text is unwrapped (reading 64 MiB would cost seconds).
    assert unwrap_node_dump(text[:MAX_TEXT_BYTES]) == text[:MAX_TEXT_BYTES]


@pytest.mark.parametrize(
    "text",
    [b"{CONST :constvalue", b"{CONST :constisnull true :constvalue"],
)
def test_a_constant_cut_off_after_its_field_name_is_refused(text: bytes) -> None:
    with pytest.raises(NodeTextError, match=r"^the tree's text ends inside a constant$"):
        read_node_text(text)


def test_short_runs_count_four_bytes_a_character_in_another_encoding() -> None:
    # A server encoding other than UTF8 or SQL_ASCII: the client's bytes may be fewer than
    # the server's, so a run before a line break counts four bytes for each byte when that
    # is already below the bound (no character needs more).
    longest_short = (SPACELESS_RUN - 1) // 4
    text = b"{ALIAS :aliasname " + b"a" * longest_short + b"\n:colnames <>}"
    assert unwrap_node_dump(text, exact_lengths=False) == text.replace(b"\n", b" ")
    # One byte more, and each ASCII byte counts as one again: still far below the bound.
    text = b"{ALIAS :aliasname " + b"a" * (longest_short + 1) + b"\n:colnames <>}"
    assert unwrap_node_dump(text, exact_lengths=False) == text.replace(b"\n", b" ")
    # The same length of two-byte characters could have been four bytes each on the server.
    wide = "é" * SPACELESS_RUN  # A character beyond ASCII, on purpose.
    text = b"{ALIAS :aliasname " + wide.encode()[: longest_short + 1] + b"\n:colnames <>}"
    assert unwrap_node_dump(text) == text.replace(b"\n", b" ")
    text = b"{ALIAS :aliasname " + wide.encode()[: 2 * (longest_short + 1)] + b"\n:colnames <>}"
    with pytest.raises(NodeTextError, match="may split a name"):
        unwrap_node_dump(text, exact_lengths=False)
