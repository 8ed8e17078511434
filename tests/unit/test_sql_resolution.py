"""The resolved-tree layer without a server: node text, what a tree names, verdict keys."""

import contextlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_server_suite.tools.sql import code_catalog
from mcp_server_suite.tools.sql.node_text import (
    MAX_DEPTH,
    SPACELESS_RUN,
    Datum,
    Node,
    NodeTextError,
    TypedList,
    read_node_text,
    unwrap_node_dump,
)
from mcp_server_suite.tools.sql.policy import parse_tree_text
from mcp_server_suite.tools.sql.resolution import (
    NODE_FIELDS,
    ResolutionError,
    ResolvedCode,
    collect_resolved_code,
)
from mcp_server_suite.tools.sql.verifier import float_class, verdict_key


def format_node_dump(dump: bytes) -> bytes:
    # PostgreSQL's format_node_dump() (src/backend/nodes/print.c), byte for byte: lines of at
    # most 78 bytes, broken at a space where the line holds one after its first byte.
    out = bytearray()
    i = 0
    j = 0
    while True:
        line = bytearray()
        j = 0
        while j < 78 and i < len(dump):
            line.append(dump[i])
            i += 1
            j += 1
        if i >= len(dump):
            break
        if dump[i] == 0x20:
            i += 1
        else:
            k = j - 1
            while k > 0 and line[k] != 0x20:
                k -= 1
            if k > 0:
                i -= j - k - 1
                del line[k:]
        out += line + b"\n"
    if j > 0:
        out += line + b"\n"
    return bytes(out)


FUNCEXPR = (
    b"{FUNCEXPR :funcid 3689 :funcresulttype 2249 :funcretset true :funcvariadic false "
    b":funcformat 0 :funccollid 0 :inputcollid 100 :args ({CONST :consttype 25 "
    b":consttypmod -1 :constcollid 100 :constlen -1 :constbyval false :constisnull false "
    b":location 8 :constvalue 5 [ 20 0 0 0 120 ]}) :location 8}"
)


def query(target: bytes = FUNCEXPR, rtable: bytes = b"<>") -> bytes:
    return (
        b"({QUERY :commandType 1 :querySource 0 :canSetTag true :utilityStmt <> "
        b":resultRelation 0 :hasAggs false :rtable " + rtable + b" :jointree {FROMEXPR "
        b":fromlist <> :quals <>} :targetList ({TARGETENTRY :expr " + target + b" :resno 1 "
        b":resname ts_stat :ressortgroupref 0 :resorigtbl 0 :resorigcol 0 :resjunk false}) "
        b":rowMarks <> :stmt_location 0 :stmt_len 0})"
    )


def test_node_text_is_read_as_postgresql_writes_it() -> None:
    tree = read_node_text(query())
    assert isinstance(tree, list)
    (top,) = tree
    assert isinstance(top, Node)
    assert top.label == "QUERY"
    entry = top.fields["targetList"]
    assert isinstance(entry, list)
    assert isinstance(entry[0], Node)
    expr = entry[0].fields["expr"]
    assert isinstance(expr, Node)
    assert expr.fields["funcid"] == "3689"
    args = expr.fields["args"]
    assert isinstance(args, list)
    assert isinstance(args[0], Node)
    assert args[0].fields["constvalue"] == Datum(5, (20, 0, 0, 0, 120))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"(i 1 -2)", TypedList("i", (1, -2))),
        (b"(o 16384)", TypedList("o", (16384,))),
        (b"(b)", TypedList("b", ())),
        (b'("a b" "c")', ['"a', 'b"', '"c"']),
        (b'("a\\ b")', ['"a b"']),
        (b"<>", None),
        (b"\\<>", "<>"),
        (b"{A :x :funcid}", Node("A", {"x": ":funcid"})),
        (
            b"{CONST :constisnull true :constvalue <>}",
            Node("CONST", {"constisnull": "true", "constvalue": None}),
        ),
    ],
)
def test_values(text: bytes, expected: Any) -> None:
    assert read_node_text(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        b"",
        b"{",
        b"{A :x}",
        b"{A :x 1 :x 2}",
        b"{A x 1}",
        b"(i 1 x)",
        b")",
        b"{A :x 1} {B}",
        b"{CONST :constvalue 4 [ 1 2",
        b"{CONST :constvalue x [ ]}",
        b"{CONST :constvalue 4 1 ]}",
        b"{\\A}",
    ],
)
def test_malformed_text_is_a_typed_error(text: bytes) -> None:
    with pytest.raises(NodeTextError):
        read_node_text(text)


def test_nesting_is_bounded() -> None:
    with pytest.raises(NodeTextError, match="too deeply"):
        read_node_text(b"(" * (MAX_DEPTH + 1) + b")" * (MAX_DEPTH + 1))
    assert read_node_text(b"(" * 50 + b")" * 50) is not None


@given(st.binary(max_size=400))
@settings(max_examples=400)
def test_any_bytes_give_a_tree_or_a_typed_error(data: bytes) -> None:
    for reader in (read_node_text, lambda text: read_node_text(unwrap_node_dump(text))):
        with contextlib.suppress(NodeTextError):
            reader(data)


_TOKENS = st.sampled_from(
    [
        b"{",
        b"}",
        b"(",
        b")",
        b" ",
        b"\n",
        b":funcid",
        b"<>",
        b"\\",
        b"i",
        b"o",
        b"1",
        b"[",
        b"]",
        b":constvalue",
        b"QUERY",
        b'"a"',
        b"\\ ",
        b"\\(",
        b"x" * 40,
    ]
)


@given(st.lists(_TOKENS, max_size=120))
@settings(max_examples=400)
def test_token_soup_gives_a_tree_or_a_typed_error(tokens: list[bytes]) -> None:
    text = b" ".join(tokens)
    try:
        tree = read_node_text(unwrap_node_dump(text))
    except NodeTextError:
        return
    with contextlib.suppress(ResolutionError):
        collect_resolved_code(tree)


_NAMES = st.text(
    alphabet=st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs")), max_size=63
)


def escape(name: str) -> bytes:
    # outToken(): a backslash before whitespace, parentheses, braces and backslashes, and
    # before a leading character the reader would take for something else.
    out = bytearray()
    raw = name.encode("utf-8")
    if raw[:1] in (b"<", b'"') or raw[:1].isdigit():
        out += b"\\"
    for byte in raw:
        if bytes([byte]) in (b" ", b"\n", b"\t", b"(", b")", b"{", b"}", b"\\"):
            out += b"\\"
        out.append(byte)
    return bytes(out) if raw else b"<>"


@given(st.lists(_NAMES, min_size=1, max_size=6))
@settings(max_examples=300)
def test_line_breaks_are_undone_or_refused(names: list[str]) -> None:
    # A tree whose names are arbitrary (aliases, column names): cut as PostgreSQL cuts it, it
    # reads back to the same tree, or is refused when a break may have split a name.
    columns = b" ".join(b'"' + escape(name)[:200] + b'"' for name in names)
    dump = b"{ALIAS :aliasname " + escape(names[0]) + b" :colnames (" + columns + b")}"
    expected = read_node_text(dump)
    try:
        unwrapped = unwrap_node_dump(format_node_dump(dump))
    except NodeTextError:
        assert any(len(escape(name)) + 4 >= SPACELESS_RUN for name in names)
        return
    assert read_node_text(unwrapped) == expected


def test_a_break_inside_a_long_name_is_refused() -> None:
    name = b"\\(" * 50
    dump = b"{ALIAS :aliasname " + name + b" :colnames <>}"
    with pytest.raises(NodeTextError, match="may split a name"):
        unwrap_node_dump(format_node_dump(dump))
    # Counted as four bytes a character beyond ASCII, when the server's encoding differs.
    run = "é" * 20
    text = b"{ALIAS :aliasname " + run.encode() + b"\n:colnames <>}"
    assert unwrap_node_dump(text)
    with pytest.raises(NodeTextError):
        unwrap_node_dump(text, exact_lengths=False)


def test_what_a_tree_names_is_collected() -> None:
    found = collect_resolved_code(read_node_text(query()))
    assert found.functions == {3689: "a call"}
    assert found.types == {2249, 25}
    assert found.input_types == {25}


def test_unknown_nodes_and_fields_are_refused() -> None:
    with pytest.raises(ResolutionError, match="XML constructor"):
        collect_resolved_code(read_node_text(query(b"{XMLEXPR :op 0}")))
    with pytest.raises(ResolutionError, match="SOMETHINGNEW"):
        collect_resolved_code(read_node_text(query(b"{SOMETHINGNEW :x 1}")))
    with pytest.raises(ResolutionError, match=r"FUNCEXPR\.newfield"):
        collect_resolved_code(read_node_text(query(FUNCEXPR[:-1] + b" :newfield 1}")))
    with pytest.raises(ResolutionError, match="row lock"):
        collect_resolved_code(read_node_text(query().replace(b":rowMarks <>", b":rowMarks ({X})")))
    with pytest.raises(ResolutionError, match="other than SELECT"):
        collect_resolved_code(read_node_text(query().replace(b":commandType 1", b":commandType 2")))
    with pytest.raises(ResolutionError, match="bind parameter"):
        collect_resolved_code(read_node_text(query(b"{PARAM :paramkind 0 :paramtype 23}")))
    with pytest.raises(ResolutionError, match="malformed object id"):
        collect_resolved_code(read_node_text(query(b"{FUNCEXPR :funcid x}")))


def _relation(relid: int, kind: str = "r", in_from: str = "true") -> bytes:
    return (
        b"{RANGETBLENTRY :alias <> :eref {ALIAS :aliasname t :colnames <>} :rtekind 0 "
        b":relid %d :relkind %s :inFromCl %s :securityQuals <>}"
        % (relid, kind.encode(), in_from.encode())
    )


def _view(relid: int, body: bytes) -> bytes:
    # PostgreSQL 16 and later: the view's entry keeps its relid.
    return (
        b"{RANGETBLENTRY :alias <> :eref <> :rtekind 1 :subquery "
        + body[1:-1]
        + b" :security_barrier false :relid %d :relkind v :inFromCl true}" % relid
    )


def test_views_are_walked_and_initdb_views_trusted() -> None:
    inner = query(rtable=b"(" + _relation(50000) + b")")
    # A user view: its calls are checked, its relations are the owner's.
    found = collect_resolved_code(read_node_text(query(rtable=b"(" + _view(40000, inner) + b")")))
    assert 3689 in found.functions
    assert found.relations == {40000}
    assert found.views == {40000}
    # A view made by initdb is trusted code, and not walked.
    found = collect_resolved_code(read_node_text(query(b"<>", b"(" + _view(12000, inner) + b")")))
    assert found.functions == {}
    # PostgreSQL 15: the view's stored query holds its OLD entry.
    body15 = query(rtable=b"(" + _relation(40001, "v", "false") + _relation(50000) + b")")
    subquery = b"{RANGETBLENTRY :alias <> :eref <> :rtekind 1 :subquery " + body15[1:-1] + b"}"
    found = collect_resolved_code(read_node_text(query(b"<>", b"(" + subquery + b")")))
    assert found.relations == {40001}
    assert 3689 in found.functions
    body15 = body15.replace(b":relid 40001", b":relid 12001")
    subquery = b"{RANGETBLENTRY :alias <> :eref <> :rtekind 1 :subquery " + body15[1:-1] + b"}"
    assert (
        collect_resolved_code(read_node_text(query(b"<>", b"(" + subquery + b")"))).functions == {}
    )
    # A caller's own relation.
    found = collect_resolved_code(read_node_text(query(b"<>", b"(" + _relation(50000) + b")")))
    assert found.relations == {50000}


def test_every_field_kind_is_known() -> None:
    kinds = {kind for fields in NODE_FIELDS.values() for kind in fields.values()}
    assert kinds == {"N", "F", "O", "OL", "T", "TI", "TD", "TL", "R", "S", "L", "Z"}


def _catalog(
    functions: set[int], operators: frozenset[int] | set[int] = frozenset()
) -> code_catalog.CodeCatalog:
    return code_catalog.CodeCatalog(
        15, frozenset(functions), frozenset(operators), frozenset(), frozenset({"public"})
    )


def test_allowed_code_and_its_refusals() -> None:
    code = ResolvedCode(functions={10: "a call"}, operators={20: "an operator"}, types={25})
    code_catalog.ensure_allowed_code(code, _catalog({10}, {20}), code_catalog.ObjectFacts())
    with pytest.raises(code_catalog.RefusedObject) as caught:
        code_catalog.ensure_allowed_code(code, _catalog({11}, {20}), code_catalog.ObjectFacts())
    assert (caught.value.kind, caught.value.oid) == ("function", 10)
    with pytest.raises(code_catalog.RefusedObject) as caught:
        code_catalog.ensure_allowed_code(code, _catalog({10}), code_catalog.ObjectFacts())
    assert caught.value.kind == "operator"
    with pytest.raises(code_catalog.RefusedObject) as caught:
        code_catalog.ensure_allowed_code(
            ResolvedCode(input_types={142}), _catalog(set()), code_catalog.ObjectFacts()
        )
    assert caught.value.kind == "input"


def test_user_types_are_allowed_by_the_code_they_run() -> None:
    facts = code_catalog.ObjectFacts()
    code = ResolvedCode(types={40000})
    assert code_catalog.missing_facts(code, facts) == (frozenset({40000}), frozenset())
    facts.add_rows([("t", 40000, [3504, 3505, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0], [], "mood")])
    assert code_catalog.missing_facts(code, facts) == (frozenset(), frozenset())
    code_catalog.ensure_allowed_code(code, _catalog(set()), facts)
    # Planted input or output code.
    facts.add_rows([("t", 40001, [50000, 3505, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0], [], "evil")])
    with pytest.raises(code_catalog.RefusedObject):
        code_catalog.ensure_allowed_code(ResolvedCode(types={40001}), _catalog(set()), facts)
    code_catalog.ensure_allowed_code(ResolvedCode(types={40001}), _catalog({50000}), facts)
    # A domain whose CHECK calls a function, allowed or not.
    check = "{FUNCEXPR :funcid 60000 :funcresulttype 16 :args <> :location 1}"
    facts.add_rows([("t", 40002, [0] * 9, [0, 40000, 0, 0], [check], "d")])
    code_catalog.read_constraints(facts)
    with pytest.raises(code_catalog.RefusedObject) as caught:
        code_catalog.ensure_allowed_code(ResolvedCode(types={40002}), _catalog(set()), facts)
    assert caught.value.kind == "domain"
    code_catalog.ensure_allowed_code(ResolvedCode(types={40002}), _catalog({60000}), facts)
    # A relation of a schema not exposed.
    facts.add_rows([("r", 50001, None, None, None, "private")])
    with pytest.raises(code_catalog.RefusedObject):
        code_catalog.ensure_allowed_code(ResolvedCode(relations={50001}), _catalog(set()), facts)
    with pytest.raises(ValueError, match="shape"):
        facts.add_rows([("x", 1, None, None, None, "")])


@pytest.mark.parametrize(
    ("literal", "kind"),
    [
        ("2147483647", "int4"),
        ("2147483648", "int8"),
        ("-2147483648", "int4"),
        ("-2147483649", "int8"),
        ("9223372036854775807", "int8"),
        ("9223372036854775808", "numeric"),
        ("-9223372036854775808", "int8"),
        ("1.5", "numeric"),
        ("1e3", "numeric"),
        ("0x7FFFFFFFF", "int8"),
        ("1_000_000_000_000", "int8"),
        ("0b1", "int4"),
        ("0o777777777777777777777777", "numeric"),
    ],
)
def test_float_nodes_are_classed_as_postgresql_types_them(literal: str, kind: str) -> None:
    assert float_class(literal) == kind


def test_verdict_keys_hold_what_changes_resolution() -> None:
    def key(text: str) -> str:
        return verdict_key(parse_tree_text(text))

    assert key("SELECT 1 + id FROM t WHERE id = 5") == key("SELECT 1 + id FROM t WHERE id = 6")
    assert key("SELECT 'a' || x FROM t") == key("SELECT 'bb' || x FROM t")
    # A Float node's class decides int8 or numeric.
    assert key("SELECT 2147483648 + 1") != key("SELECT 9223372036854775808 + 1")
    assert key("SELECT 2147483648 + 1") == key("SELECT 3000000000 + 1")
    # A position in ORDER BY, GROUP BY or DISTINCT ON names a column.
    assert key("SELECT a, b FROM t ORDER BY 1") != key("SELECT a, b FROM t ORDER BY 2")
    assert key("SELECT a, b FROM t GROUP BY 1, 2") != key("SELECT a, b FROM t GROUP BY 2, 1")
    assert key("SELECT DISTINCT ON (1) a, b FROM t") != key("SELECT DISTINCT ON (2) a, b FROM t")
    assert key("SELECT a FROM t ORDER BY a") == key("SELECT a FROM t ORDER BY a")
