"""The second layer of `read_only_sql`: the statement that runs, built from the checked tree.

Rules:

1. The session's `search_path` holds trusted schemas only (`pg_catalog`, the schemas of the
   extensions the operator trusts, `pg_temp` last), so unqualified functions and operators
   resolve to trusted code alone. Relations and types are qualified here instead: each
   unqualified relation name is looked up in the `RelationCatalog`, as `search_path` would
   have searched `pg_catalog, <MCP_SQL_SCHEMAS>`, and the schema found is written before it.
   A name that is also a common table expression of the query, or that no schema holds, is
   left as it is (PostgreSQL then names it in a 42P01 error, with the schemas searched).
   An unqualified type name is looked up as `pg_catalog, <the trusted extensions' schemas>,
   <MCP_SQL_SCHEMAS>`: a name the session's own `search_path` finds (a built-in type, an
   extension's) is left as it is, so that a user type cannot change what `text` means, and
   a type of MCP_SQL_SCHEMAS is qualified with the first schema that holds it. What the
   type runs (input, output, casts, a domain's CHECK) is checked as PostgreSQL resolves it
   (`verifier.py`), qualified or not. A type no schema holds is left as it is (42704).
2. The text that runs is the caller's own statement with those schemas inserted, nothing
   else changed, inside a fixed wrapper that bounds the result: at most `max_rows + 1`
   rows, and each row's columns only while the running total of the rows' text sizes,
   computed by PostgreSQL, stays within `max_result_bytes`. Rows past the bound arrive as
   NULLs with their size, so the server never receives more row data than the bound. The
   wrapper does not multiply the largest value in the backend: the query's expressions run
   once, each row's text is measured without being copied into a text value, and a row
   past the bound is dropped before the window's tuplestore would copy it.
3. That text is parsed again, and its tree must equal the checked tree with the
   qualifications (and the wrapper's template around it), byte offsets aside. Anything else
   is a `PolicyDefect`: what runs is exactly what was checked.
4. EXPLAIN runs the qualified query (without the wrapper), with the options as the policy
   rendered them.
5. A statement's shape is its tree without byte offsets and without the values of its
   constants (`statement_shape`). The policy's verdict is a function of the shape: it reads
   node types, fields and names, never a constant's value (EXPLAIN's options, which are
   read, are never given a shape). So is what Rules 1 to 3 did with it: the schemas
   inserted are chosen by relation or type name, and the text that runs is the caller's own
   between them. For a text whose shape is one already checked and proved, `render_same_shape`
   builds the text that runs in the same way, from the text's own parse by PostgreSQL's
   grammar (its constants and offsets), without walking the tree or parsing the result
   again; its tests hold it to `render_statement`, text for text.
"""

import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from mcp_server_suite.tools.sql.policy import (
    CheckedTree,
    NameRef,
    newer_numeric_literal,
    parse_tree_json,
    parse_tree_text,
    same_tree,
)

__all__ = [
    "MAX_CATALOG_RELATIONS",
    "RESULT_BYTES_COLUMN",
    "ExecutableStatement",
    "PolicyDefect",
    "RelationCatalog",
    "quote_identifier",
    "render_same_shape",
    "render_statement",
    "statement_shape",
    "wrap_statement",
]

# The column the wrapper adds: the running total, in bytes, of the rows' text up to this row.
RESULT_BYTES_COLUMN: Final = "mcp_result_bytes"

# A catalog holds at most this many relation names (about 10 MiB of memory); a database with
# more is still served, and the names beyond are reported as not found.
MAX_CATALOG_RELATIONS: Final = 100_000

_QUERY_MARK: Final = "SELECT 1"
# `q` is the caller's query and `a` its rows, capped at `max_rows + 1` (the cap sits below
# the window, so PostgreSQL stops there), each as one record: the whole row is named `q.*`
# (cast to record, which keeps it a plain whole-row reference), since a bare `q` would mean
# the caller's own column when the query has one of that name. `s` measures each record's
# text (`record_out`'s C string, whose size less its terminating NUL is at least the row's
# columns' text together), without the text value a cast to text would copy it into; `a` is
# a separate plan node (it has a LIMIT, and `s` an OFFSET), so the query's expressions run
# once and each record is formed once. A record larger than the bound is dropped (`k`)
# before the window copies the row into its tuplestore, so no value past the bound is held
# twice; `w` keeps the running total, and the last lateral join expands a row's columns only
# while that total is within the bound. The backend thus holds the largest value about
# twice (the record and its text), where a query sent bare holds it about three times (the
# value, its text and the message): measured with `benchmarks/sql_memory.py --backend`.
_WRAPPER: Final = (
    "SELECT r.*, w.mcp_result_bytes FROM (SELECT k.mcp_row, pg_catalog.sum(s.mcp_row_bytes) "
    "OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS mcp_result_bytes FROM ("
    "SELECT a.mcp_row, pg_catalog.pg_column_size(pg_catalog.record_out(a.mcp_row)) "
    "OPERATOR(pg_catalog.-) 1 AS mcp_row_bytes FROM ("
    "SELECT (q.*)::pg_catalog.record AS mcp_row "
    "FROM (\n{query}\n) AS q LIMIT {rows}) AS a OFFSET 0) AS s "
    "LEFT JOIN LATERAL (SELECT s.mcp_row) AS k "
    "ON s.mcp_row_bytes OPERATOR(pg_catalog.<=) {budget}) AS w "
    "LEFT JOIN LATERAL (SELECT (w.mcp_row).*) AS r "
    "ON w.mcp_result_bytes OPERATOR(pg_catalog.<=) {budget}"
)
# The byte offsets of a tree's JSON text (`policy.LOCATION_KEYS`), which differ between the
# text that was checked and the text that runs and mean nothing else. A string value cannot
# match: inside one, libpg_query escapes every quote.
_OFFSET_KEYS: Final = (
    "location|stmt_location|stmt_len|list_start|list_end|arg_location|name_location|"
    "rexpr_list_start|rexpr_list_end"
)
# An offset after another member (libpg_query writes offsets last); matching the comma first
# makes the scan several times faster than an optional one would.
_OFFSETS: Final = re.compile(r',"(?:' + _OFFSET_KEYS + r')":-?\d+')
# An offset as an object's first member, should a node ever hold one there.
_FIRST_OFFSETS: Final = re.compile(r'(?<=\{)"(?:' + _OFFSET_KEYS + r')":-?\d+,?')
# An unqualified relation in a tree's JSON text (`catalogname` and `schemaname` come first).
_UNQUALIFIED: Final = re.compile(r'\{"RangeVar":\{"relname":("(?:[^"\\]|\\.)*")')
# An unqualified type name in a tree's JSON text: a `TypeName` whose list of names holds one
# name. Every node the policy allows holds a TypeName as a typed pointer, `typeName`, which
# libpg_query writes untagged (a tagged one would fail the proof of Rule 3, never pass it
# unqualified); `names` is its first member, and a string value cannot match, since its
# quotes are escaped.
_UNQUALIFIED_TYPE: Final = re.compile(
    r'"typeName":\{"names":\[\{"String":\{"sval":("(?:[^"\\]|\\.)*")\}\}\]'
)
# A type name's modifiers, written between its names and its own offset: they may hold
# constants with offsets of their own (`mytype(3)`), which the offset search steps over.
_TYPE_MODIFIERS: Final = ',"typmods":'
# What a tree's JSON text holds around its one statement, offsets removed.
_STATEMENT: Final = re.compile(r'\{"version":\d+,"stmts":\[\{"stmt":(.*)\}\]\}', re.S)
# The value of a constant, once offsets are removed (Rule 5): libpg_query writes a constant as
# `{"A_Const":{"ival":{"ival":5}}}`, a zero or false value as an empty object, and a string's
# quotes and backslashes escaped, so a string constant's text cannot end the match early.
_CONSTANT_VALUE: Final = re.compile(
    r'\{"A_Const":\{"(ival|fval|sval|boolval|bsval)":'
    r'\{(?:"\1":(?:-?\d+|true|"(?:[^"\\]|\\.)*"))?\}'
)
# A lone statement's bounds in a tree's JSON text: only the statement's own entry holds these
# members, and each is left out when it is zero. A string inside the tree cannot match, since
# its quotes are escaped.
_STATEMENT_START: Final = re.compile(r',"stmt_location":(\d+)')
_STATEMENT_LENGTH: Final = re.compile(r',"stmt_len":(\d+)')
# The offset of the relation an `_UNQUALIFIED` match found: the first after its name, since a
# RangeVar's alias holds no offset of its own. (A relation never begins a statement, so its
# offset is never zero, which libpg_query would leave out.)
_LOCATION: Final = re.compile(r',"location":(\d+)')


# The openings of an object whose first member is an offset (rare: `ARRAY[]` is one).
_FIRST_OFFSET_OPENINGS: Final = tuple(
    '{"' + key + '"' for key in _OFFSET_KEYS.split("|") if not key.startswith("rexpr_list_end")
)


def _canonical(tree: str) -> str:
    # The tree's JSON text without byte offsets.
    text = _OFFSETS.sub("", tree)
    if any(opening in text for opening in _FIRST_OFFSET_OPENINGS):
        text = _FIRST_OFFSETS.sub("", text)
    return text


def _statement_text(tree: str) -> str:
    # The canonical JSON text of a parse's one statement.
    match = _STATEMENT.fullmatch(_canonical(tree))
    if match is None:
        raise PolicyDefect("the statement that would run is not one statement")
    return match.group(1)


class PolicyDefect(RuntimeError):
    """The statement that would run is not what was checked: a bug, never the caller's fault."""


@dataclass(frozen=True, slots=True)
class ExecutableStatement:
    """A checked statement, ready to run.

    Attributes:
        sql: The text to execute.
        max_rows: The most rows the caller receives.
        max_result_bytes: The most bytes of row text the server may receive.
        explain_format: None for a query run as a cursor; `text` or `json` for an EXPLAIN,
            which runs as it is.
        wrapped: The statement is inside the byte-bounding wrapper, whose last column is the
            running total of the rows' text bytes.
        newer_literal: A numeric literal that servers older than PostgreSQL 16 read otherwise
            (`policy.ensure_read_alike`), or None.
        qualified: The schema written before each unqualified relation name, by name.
        qualified_types: The schema written before each unqualified type name, by name.
        query: The caller's query as it runs, qualified and without the wrapper or EXPLAIN
            (what `probe.py` has PostgreSQL resolve); empty for the server's own queries.
    """

    sql: str
    max_rows: int
    max_result_bytes: int
    explain_format: str | None = None
    wrapped: bool = True
    newer_literal: str | None = None
    qualified: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    qualified_types: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    query: str = ""


class RelationCatalog:
    """Which schema an unqualified relation or type name means, as `search_path` would decide.

    Args:
        schemas: The schemas searched after `pg_catalog` (`MCP_SQL_SCHEMAS`), in order.
        relations: (schema, name) of every relation of `pg_catalog` and those schemas.
        types: (schema, name) of every type of `pg_catalog`, the trusted extensions' schemas
            and `MCP_SQL_SCHEMAS`.
        extension_schemas: The trusted extensions' schemas, which the session's `search_path`
            holds after `pg_catalog`: a type name they hold needs no qualification (Rule 1).
    """

    def __init__(
        self,
        schemas: tuple[str, ...],
        relations: Iterable[tuple[str, str]],
        types: Iterable[tuple[str, str]] = (),
        *,
        extension_schemas: tuple[str, ...] = (),
    ) -> None:
        self.schemas: Final = schemas
        self._schema_of: Final = _first_holders(("pg_catalog", *schemas), relations)
        # What the session's search_path finds by itself is never qualified (Rule 1).
        searched = ("pg_catalog", *extension_schemas)
        self._type_schema_of: Final = _first_holders((*searched, *schemas), types)
        self._searched: Final = frozenset(searched)

    def schema_of(self, name: str) -> str | None:
        """Return the schema that holds the relation `name` first, or None when none does."""
        return self._schema_of.get(name)

    def type_schema_of(self, name: str) -> str | None:
        """Return the schema of MCP_SQL_SCHEMAS to qualify the type name `name` with.

        Returns:
            The first schema of MCP_SQL_SCHEMAS that holds the type, or None when none does
            or when `pg_catalog` or a trusted extension's schema holds it first (the session's
            `search_path` then finds it, as it would for a query sent as it is).
        """
        schema = self._type_schema_of.get(name)
        return None if schema in self._searched else schema

    def has_type(self, name: str) -> bool:
        """Tell whether any schema searched for an unqualified type name holds `name`."""
        return name in self._type_schema_of

    def __contains__(self, name: object) -> bool:
        return name in self._schema_of


def _first_holders(order: tuple[str, ...], objects: Iterable[tuple[str, str]]) -> Mapping[str, str]:
    # Each name of (schema, name) pairs, with the first schema of `order` that holds it; at
    # most MAX_CATALOG_RELATIONS pairs are read. A schema named twice keeps its first place.
    rank_of: dict[str, int] = {}
    for place, schema in enumerate(order):
        rank_of.setdefault(schema, place)
    found: dict[str, tuple[int, str]] = {}
    for count, (schema, name) in enumerate(objects):
        if count >= MAX_CATALOG_RELATIONS:
            break
        rank = rank_of.get(schema)
        if rank is not None and (name not in found or rank < found[name][0]):
            found[name] = (rank, schema)
    return MappingProxyType({name: schema for name, (_, schema) in found.items()})


def quote_identifier(name: str) -> str:
    """Return `name` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def render_statement(
    checked: CheckedTree,
    catalog: RelationCatalog,
    *,
    max_rows: int,
    max_result_bytes: int,
) -> ExecutableStatement:
    """Qualify the checked statement's relations and types, wrap it, and prove the result
    (Rules 1-4).

    Args:
        checked: The statement, as the policy returned it.
        catalog: Where unqualified relations and types are found.
        max_rows: The most rows the caller receives.
        max_result_bytes: The most bytes of row text the server may receive.

    Returns:
        The statement to execute.

    Raises:
        ToolFailure: The text to run could not be parsed (`MCP_VALIDATION_ERROR`).
        PolicyDefect: The text to run does not hold exactly the checked tree.
    """
    statement = checked.statement
    # Every unqualified use of one name is qualified alike (the decision is the name's).
    qualified: dict[str, str] = {}
    for relation in checked.relations:
        schema = None if relation.name in checked.ctes else catalog.schema_of(relation.name)
        if schema is not None and schema != "pg_catalog":
            qualified[relation.name] = schema
            # The tree the text must parse to: the same node, now qualified.
            relation.node["schemaname"] = schema
    qualified_types: dict[str, str] = {}
    for type_name in checked.types:
        schema = catalog.type_schema_of(type_name.name)
        if schema is not None:
            qualified_types[type_name.name] = schema
            # The tree the text must parse to: the same node, now qualified.
            type_name.node["names"] = [{"String": {"sval": schema}}, type_name.node["names"][-1]]
    query = _qualified_text(
        statement.source,
        checked.start,
        statement.end,
        _insertions(checked.relations, qualified, checked.types, qualified_types),
    )
    if checked.explain_format is not None:
        sql = f"EXPLAIN {checked.explain}\n{query}"
        tree = _only_statement(sql)
        inner = tree.get("ExplainStmt", {}).get("query", {}).get("SelectStmt")
        if inner is None or not same_tree(inner, checked.query):
            raise PolicyDefect("the EXPLAIN that would run differs from the checked query")
        return ExecutableStatement(
            sql,
            max_rows,
            max_result_bytes,
            explain_format=checked.explain_format,
            wrapped=False,
            newer_literal=checked.newer_literal,
            qualified=MappingProxyType(qualified),
            qualified_types=MappingProxyType(qualified_types),
            query=query,
        )
    sql = wrap_statement(query, max_rows=max_rows, max_result_bytes=max_result_bytes).sql
    # Rule 3, on the JSON texts of the trees (far cheaper than walking them): the caller's
    # statement with the schemas inserted, inside the wrapper's own tree.
    expected = _UNQUALIFIED.sub(
        lambda found: _qualified(found, qualified), _statement_text(statement.tree)
    )
    if qualified_types:
        expected = _UNQUALIFIED_TYPE.sub(
            lambda found: _qualified_type(found, qualified_types), expected
        )
    before, after = _template(max_rows + 1, max_result_bytes)
    if _statement_text(parse_tree_text(sql)) != before + expected + after:
        raise PolicyDefect("the statement that would run differs from the checked query")
    return ExecutableStatement(
        sql,
        max_rows,
        max_result_bytes,
        newer_literal=checked.newer_literal,
        qualified=MappingProxyType(qualified),
        qualified_types=MappingProxyType(qualified_types),
        query=query,
    )


def _insertions(
    relations: Iterable[NameRef],
    qualified: Mapping[str, str],
    types: Iterable[NameRef],
    qualified_types: Mapping[str, str],
) -> list[tuple[int, str]]:
    # (byte offset, schema) of every schema to write before a name, relations and types.
    found = [(ref.offset, qualified[ref.name]) for ref in relations if ref.name in qualified]
    found += [
        (ref.offset, qualified_types[ref.name]) for ref in types if ref.name in qualified_types
    ]
    return found


def _qualified_text(
    source: bytes, start: int, end: int, insertions: Iterable[tuple[int, str]]
) -> str:
    # The statement's text from `start` to `end`, with each schema of (byte offset, schema)
    # written before the name at that offset, and nothing else.
    pieces: list[bytes] = []
    position = start
    for offset, schema in sorted(insertions):
        pieces.append(source[position:offset])
        pieces.append(quote_identifier(schema).encode() + b".")
        position = offset
    pieces.append(source[position:end])
    return b"".join(pieces).decode("utf-8")


def statement_shape(tree: str) -> str:
    """Return the shape of a parse (Rule 5): its JSON text without offsets or constant values.

    Args:
        tree: A parse's JSON text (`policy.parse_tree_text`).
    """
    return _CONSTANT_VALUE.sub(r'{"A_Const":{"\1":{}', _canonical(tree))


def render_same_shape(
    text: str,
    tree: str,
    like: ExecutableStatement,
    *,
    max_rows: int,
    max_result_bytes: int,
) -> ExecutableStatement:
    """Build the statement that runs for a text of a shape already checked (Rule 5).

    Call it only when `statement_shape(tree)` is the shape of a query (not an EXPLAIN) that
    `render_statement` built, with the catalog it was built with: the result is then the
    statement `render_statement` would build for this text.

    Args:
        text: The caller's query.
        tree: Its parse's JSON text.
        like: The statement `render_statement` built for that shape.
        max_rows: The most rows the caller receives.
        max_result_bytes: The most bytes of row text the server may receive.

    Raises:
        PolicyDefect: The tree is not one libpg_query wrote.
    """
    source = text.encode("utf-8")
    start_member = _STATEMENT_START.search(tree)
    length_member = _STATEMENT_LENGTH.search(tree)
    start = int(start_member.group(1)) if start_member else 0
    length = int(length_member.group(1)) if length_member else 0
    insertions = []
    for found in _UNQUALIFIED.finditer(tree):
        schema = like.qualified.get(json.loads(found.group(1)))
        if schema is not None:
            insertions.append((_offset_after(tree, found.end()), schema))
    if like.qualified_types:
        for found in _UNQUALIFIED_TYPE.finditer(tree):
            schema = like.qualified_types.get(json.loads(found.group(1)))
            if schema is not None:
                insertions.append(
                    (_offset_after(tree, _after_modifiers(tree, found.end())), schema)
                )
    query = _qualified_text(source, start, start + length if length else len(source), insertions)
    sql = wrap_statement(query, max_rows=max_rows, max_result_bytes=max_result_bytes).sql
    return ExecutableStatement(
        sql,
        max_rows,
        max_result_bytes,
        newer_literal=newer_numeric_literal(source),
        qualified=like.qualified,
        qualified_types=like.qualified_types,
        query=query,
    )


def _offset_after(tree: str, position: int) -> int:
    # The offset of the name whose node's JSON text ends its name at `position`: the first
    # after it, since neither a RangeVar's alias nor a TypeName's other members hold one.
    location = _LOCATION.search(tree, position)
    if location is None:
        raise PolicyDefect("a name of the statement has no offset")
    return int(location.group(1))


def _after_modifiers(tree: str, position: int) -> int:
    # Where a TypeName's members after its modifiers begin: its modifiers are a list of
    # expressions, whose own offsets come before the name's.
    if not tree.startswith(_TYPE_MODIFIERS, position):
        return position
    try:
        _, end = _JSON_DECODER.raw_decode(tree, position + len(_TYPE_MODIFIERS))
    except ValueError:
        raise PolicyDefect("a type name of the statement is malformed") from None
    return int(end)


_JSON_DECODER: Final = json.JSONDecoder()


def _qualified(found: "re.Match[str]", qualified: Mapping[str, str]) -> str:
    # An unqualified relation's JSON, with the schema the catalog chose when there is one.
    schema = qualified.get(json.loads(found.group(1)))
    if schema is None:
        return found.group(0)
    return '{"RangeVar":{"schemaname":' + json.dumps(schema) + ',"relname":' + found.group(1)


def _qualified_type(found: "re.Match[str]", qualified_types: Mapping[str, str]) -> str:
    # An unqualified type name's JSON, with the schema the catalog chose when there is one.
    schema = qualified_types.get(json.loads(found.group(1)))
    if schema is None:
        return found.group(0)
    return (
        '"typeName":{"names":[{"String":{"sval":'
        + json.dumps(schema)
        + '}},{"String":{"sval":'
        + found.group(1)
        + "}}]"
    )


def wrap_statement(query: str, *, max_rows: int, max_result_bytes: int) -> ExecutableStatement:
    """Put a trusted SELECT inside the byte-bounding wrapper (Rule 2), without a check.

    For the server's own fixed queries (`schema_tool.py`); a caller's query goes through
    `render_statement`, which proves the result.

    Args:
        query: One SELECT.
        max_rows: The most rows the caller receives.
        max_result_bytes: The most bytes of row text the server may receive.
    """
    sql = _WRAPPER.format(query=query, rows=max_rows + 1, budget=max_result_bytes)
    return ExecutableStatement(sql, max_rows, max_result_bytes)


def _only_statement(sql: str) -> dict[str, Any]:
    statements = parse_tree_json(sql).get("stmts", [])
    if len(statements) != 1:
        raise PolicyDefect("the statement that would run is not one statement")
    stmt: dict[str, Any] = statements[0]["stmt"]
    return stmt


@functools.lru_cache(maxsize=64)
def _template(rows: int, budget: int) -> tuple[str, str]:
    # The canonical JSON text of the wrapper's own tree, before and after its query, for each
    # row cap and bound in use (at most 50 caps times the one configured bound).
    marker = _WRAPPER.format(query=_QUERY_MARK, rows=rows, budget=budget)
    inner = _statement_text(parse_tree_text(_QUERY_MARK))
    parts = _statement_text(parse_tree_text(marker)).split(inner)
    if len(parts) != 2:
        raise PolicyDefect("the wrapper's template does not hold its query once")
    return parts[0], parts[1]
