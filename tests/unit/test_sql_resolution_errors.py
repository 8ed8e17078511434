"""What the resolved-tree walker refuses or reads in trees no PostgreSQL 15 server prints.

`resolution.py` reads the trees PostgreSQL 15 to 18 print. The suite's coverage run talks to
PostgreSQL 15, so the tree of a view inside a view as 16 and later mark it is built here by
hand (the same test against the server, on each major, is in test_sql_verifier_errors.py);
the rest are malformed trees a server never prints, and each must be a `ResolutionError`
naming the construct, never another exception or a tree accepted.
"""

import pytest

from mcp_server_suite.tools.sql.node_text import read_node_text
from mcp_server_suite.tools.sql.resolution import ResolutionError, collect_resolved_code
from tests.unit.test_sql_resolution import query

# A user view's object id and a table's (both above FirstNormalObjectId).
OUTER_VIEW = 40000
INNER_VIEW = 40001
TABLE = 50000


def _entry(fields: bytes) -> bytes:
    return b"{RANGETBLENTRY :alias <> :eref <> " + fields + b"}"


def _table(relid: int) -> bytes:
    return _entry(b":rtekind 0 :relid %d :relkind r :inFromCl true :securityQuals <>" % relid)


def _view(relid: int, body: bytes) -> bytes:
    # PostgreSQL 16 and later: the subquery entry of a view keeps the view's relid.
    return _entry(
        b":rtekind 1 :subquery "
        + body[1:-1]
        + b" :security_barrier false :relid %d :relkind v :inFromCl true" % relid
    )


def _old_entry(relid: int) -> bytes:
    # PostgreSQL 15: a view's stored query holds the view's OLD entry, not in its FROM.
    return _entry(b":rtekind 0 :relid %d :relkind v :inFromCl false :securityQuals <>" % relid)


def _subquery(body: bytes) -> bytes:
    return _entry(b":rtekind 1 :subquery " + body[1:-1] + b" :relid 0 :inFromCl true")


def test_a_view_inside_a_view_is_walked_as_the_view_owners_postgresql_16() -> None:
    inner = query(rtable=b"(" + _table(TABLE) + b")")
    middle = query(rtable=b"(" + _view(INNER_VIEW, inner) + b")")
    found = collect_resolved_code(
        read_node_text(query(rtable=b"(" + _view(OUTER_VIEW, middle) + b")"))
    )
    # Both views' calls are checked; only the view the caller named is the caller's relation.
    assert found.views == {OUTER_VIEW, INNER_VIEW}
    assert found.relations == {OUTER_VIEW}
    assert 3689 in found.functions


def test_a_view_inside_a_view_is_walked_as_the_view_owners_postgresql_15() -> None:
    inner = query(rtable=b"(" + _old_entry(INNER_VIEW) + _table(TABLE) + b")")
    middle = query(rtable=b"(" + _old_entry(OUTER_VIEW) + _subquery(inner) + b")")
    found = collect_resolved_code(read_node_text(query(b"<>", b"(" + _subquery(middle) + b")")))
    assert found.views == {OUTER_VIEW, INNER_VIEW}
    assert found.relations == {OUTER_VIEW}
    assert 3689 in found.functions


def test_a_range_table_that_holds_other_nodes_is_still_searched_for_the_view() -> None:
    # The OLD entry is found behind an item that is not a range-table entry.
    body = query(rtable=b"(name {ALIAS :aliasname a :colnames <>} " + _old_entry(OUTER_VIEW) + b")")
    found = collect_resolved_code(read_node_text(query(b"<>", b"(" + _subquery(body) + b")")))
    assert found.views == {OUTER_VIEW}
    assert found.relations == {OUTER_VIEW}


@pytest.mark.parametrize(
    ("tree", "construct"),
    [
        # A field that holds nodes, holding a bare token.
        (
            query().replace(
                b":jointree {FROMEXPR :fromlist <>", b":jointree {FROMEXPR :fromlist x"
            ),
            "a malformed FROMEXPR",
        ),
        # A scalar field holding a node.
        (query().replace(b":resno 1", b":resno {ALIAS :aliasname a}"), "a malformed TARGETENTRY"),
        # A list of types that is not a list of object ids.
        (
            query(b"<>", b"(" + _entry(b":rtekind 5 :coltypes (i 23)") + b")"),
            "a malformed list of object ids",
        ),
        # A named tuplestore (a trigger's transition table), which a SELECT never holds.
        (
            query(b"<>", b"(" + _entry(b":rtekind 7 :enrname <>") + b")"),
            "a range-table entry of a kind a SELECT never holds",
        ),
        # XMLTABLE's table function in the caller's own query (the policy refuses its text).
        (
            query(b"<>", b"(" + _entry(b":rtekind 4 :tablefunc {TABLEFUNC :functype 0}") + b")"),
            "XMLTABLE",
        ),
    ],
)
def test_malformed_trees_are_refused_by_construct(tree: bytes, construct: str) -> None:
    with pytest.raises(ResolutionError) as caught:
        collect_resolved_code(read_node_text(tree))
    assert caught.value.construct == construct
