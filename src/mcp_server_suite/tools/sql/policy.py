"""The first layer of `read_only_sql`: PostgreSQL's own parser, and allowlists over its tree.

Rules:

1. The caller's text is parsed by PostgreSQL's parser itself (libpg_query through pglast, the
   PostgreSQL 18 grammar), so what the policy reads is what the server reads: there is no
   second grammar whose idea of a token, a string or a comment could differ.
2. Exactly one statement. It is a SELECT (with VALUES, TABLE and UNION, INTERSECT, EXCEPT
   forms), or a plain EXPLAIN of one with the options `FORMAT TEXT | JSON`, `VERBOSE` and
   `COSTS`; EXPLAIN ANALYZE and every other statement are refused.
3. Every node of the tree is a node type in `ALLOWED_NODES` and holds only the fields listed
   for it there. A node or field a later PostgreSQL adds (a new clause, a new option) is
   refused until it is reviewed: the tree is checked against allowlists, never a denylist.
4. Names. A function must be on the `FunctionPolicy` allowlist. Operators and collations
   may be qualified with `pg_catalog` only; `xml` is no type a query may name. Relations and
   types may be qualified with `pg_catalog`, `information_schema` or a schema of
   `MCP_SQL_SCHEMAS`; unqualified ones are collected, for `statement.py` to qualify from the
   catalog (the session's `search_path` holds only trusted schemas, so an unqualified name
   that nobody qualifies can find no table or type of a user).
5. Every refusal is a `ToolFailure`: `MCP_QUERY_VIOLATION` for what the policy forbids,
   `MCP_VALIDATION_ERROR` for text that does not parse or nests too deeply. A refusal quotes
   the caller's own text, never the parser's internal names.
6. The servers supported (PostgreSQL 13 and later) read a few texts that PostgreSQL 18's
   grammar accepts in another way. The one that changes meaning rather than failing is the
   numeric literal of PostgreSQL 16 (`0x1F`, `0o17`, `0b101`, `1_000`), which 13 and 14 read
   as a number and a column alias (`0 AS x1F`) and 15 refuses as trailing junk. A checked
   statement records its first such literal (`CheckedTree.newer_literal`), and
   `ensure_read_alike` refuses it in-band on a server older than 16, so what runs is always
   what was checked. (SYSTEM_USER, which 13 to 15 would read as a column, is refused as a
   function; syntax those majors lack fails there, changing nothing.)
7. This module never touches the database. It imports pglast, so the tool imports it on the
   first call only.
"""

import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from pglast import parser as _pg

from mcp_server_suite.schemas.echo import quote
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.tools.sql.functions import (
    ALL_BUILTIN_FUNCTIONS,
    UNINTERRUPTIBLE_OVERLOADS,
    denial_reason,
)

__all__ = [
    "ALLOWED_NODES",
    "EXPLAIN_OPTIONS",
    "LOCATION_KEYS",
    "MAX_ROWS",
    "NUMERIC_LITERALS_SINCE",
    "TRUSTED_RELATION_SCHEMAS",
    "CheckedTree",
    "FunctionPolicy",
    "NameRef",
    "ParsedStatement",
    "check_untrusted_tree",
    "ensure_read_alike",
    "newer_numeric_literal",
    "parse_tree_json",
    "parse_untrusted_sql",
    "same_tree",
    "show_as_select",
]

# The contract's row cap: `max_rows` is 1 to 50 and results carry at most 50 rows.
MAX_ROWS: Final = 50

# Echoed names and text are cut here: enough for any real identifier (PostgreSQL's own
# limit is 63 bytes), short enough to keep a problem's detail to one line.
_SHOWN_CHARS: Final = 64

# Schemas that hold built-in relations only (initdb creates them, no role can add to them
# without being a superuser): a relation qualified with one of them is always allowed.
TRUSTED_RELATION_SCHEMAS: Final = frozenset({"pg_catalog", "information_schema"})

# The operator kinds of an `A_Expr`: every kind PostgreSQL's grammar builds for a SELECT. Each
# resolves its operator by name in the session's search_path, which holds trusted schemas only.
_EXPRESSION_KINDS: Final = frozenset(
    {
        "AEXPR_OP",
        "AEXPR_OP_ANY",
        "AEXPR_OP_ALL",
        "AEXPR_DISTINCT",
        "AEXPR_NOT_DISTINCT",
        "AEXPR_NULLIF",
        "AEXPR_IN",
        "AEXPR_LIKE",
        "AEXPR_ILIKE",
        "AEXPR_SIMILAR",
        "AEXPR_BETWEEN",
        "AEXPR_NOT_BETWEEN",
        "AEXPR_BETWEEN_SYM",
        "AEXPR_NOT_BETWEEN_SYM",
    }
)

# The first server version (`server_version_num`) whose grammar reads PostgreSQL 16's numeric
# literals as the policy does (Rule 6): non-decimal integers and digits grouped by underscores.
NUMERIC_LITERALS_SINCE: Final = 160_000
# Text that may hold such a literal: a digit before an underscore, or a radix prefix. Most
# queries hold neither, and are never scanned.
_NEWER_NUMBER_HINT: Final = re.compile(rb"[0-9]_|0[xXoObB]")
# The scanner's names for numeric literals, and the prefixes of PostgreSQL 16's radixes.
_NUMERIC_TOKENS: Final = frozenset({"ICONST", "FCONST"})
_RADIX_PREFIXES: Final = frozenset({"0x", "0o", "0b"})

# The table-sampling methods of pg_catalog; an extension's method must be named in
# MCP_SQL_ALLOWED_FUNCTIONS like any other function.
_SAMPLING_METHODS: Final = frozenset({"system", "bernoulli"})

# Every node type a query may contain, with the fields it may hold. Field names are those of
# PostgreSQL's parse nodes (src/include/nodes/parsenodes.h); `location` and the other byte
# offsets are implied. Left out on purpose: every statement but SELECT and EXPLAIN,
# `IntoClause` (SELECT INTO), `LockingClause` (FOR UPDATE), `ParamRef` (bind parameters),
# `XmlExpr`, `XmlSerialize` and `RangeTableFunc` (XML documents and XMLTABLE). The SQL/JSON
# constructors and predicates (PostgreSQL 16) and query functions and JSON_TABLE (17) are
# allowed: what they run is checked as PostgreSQL resolves them (`verifier.py`), and a server
# that lacks them refuses their syntax, which `verifier.py` names with the major that has it.
ALLOWED_NODES: Final[Mapping[str, frozenset[str]]] = MappingProxyType(
    {
        "SelectStmt": frozenset(
            {
                "distinctClause",
                "targetList",
                "fromClause",
                "whereClause",
                "groupClause",
                "groupDistinct",
                "havingClause",
                "windowClause",
                "valuesLists",
                "sortClause",
                "limitOffset",
                "limitCount",
                "limitOption",
                "withClause",
                "op",
                "all",
                "larg",
                "rarg",
            }
        ),
        "WithClause": frozenset({"ctes", "recursive"}),
        "CommonTableExpr": frozenset(
            {
                "ctename",
                "aliascolnames",
                "ctematerialized",
                "ctequery",
                "search_clause",
                "cycle_clause",
            }
        ),
        "CTESearchClause": frozenset(
            {"search_col_list", "search_breadth_first", "search_seq_column"}
        ),
        "CTECycleClause": frozenset(
            {
                "cycle_col_list",
                "cycle_mark_column",
                "cycle_mark_value",
                "cycle_mark_default",
                "cycle_path_column",
            }
        ),
        "ResTarget": frozenset({"name", "indirection", "val"}),
        "ColumnRef": frozenset({"fields"}),
        "A_Star": frozenset(),
        "A_Const": frozenset({"ival", "fval", "sval", "boolval", "bsval", "isnull"}),
        "Integer": frozenset({"ival"}),
        "Float": frozenset({"fval"}),
        "String": frozenset({"sval"}),
        "Boolean": frozenset({"boolval"}),
        "BitString": frozenset({"bsval"}),
        "List": frozenset({"items"}),
        "A_Expr": frozenset(
            {"kind", "name", "lexpr", "rexpr", "rexpr_list_start", "rexpr_list_end"}
        ),
        "BoolExpr": frozenset({"boolop", "args"}),
        "NullTest": frozenset({"arg", "nulltesttype", "argisrow"}),
        "BooleanTest": frozenset({"arg", "booltesttype"}),
        "CaseExpr": frozenset({"arg", "args", "defresult"}),
        "CaseWhen": frozenset({"expr", "result"}),
        "CoalesceExpr": frozenset({"args"}),
        "MinMaxExpr": frozenset({"op", "args"}),
        "NullIfExpr": frozenset({"args"}),
        "SQLValueFunction": frozenset({"op", "typmod"}),
        "RowExpr": frozenset({"args", "row_format", "colnames"}),
        "A_ArrayExpr": frozenset({"elements", "list_start", "list_end"}),
        "A_Indirection": frozenset({"arg", "indirection"}),
        "A_Indices": frozenset({"is_slice", "lidx", "uidx"}),
        "SubLink": frozenset({"subLinkType", "subLinkId", "testexpr", "operName", "subselect"}),
        "GroupingSet": frozenset({"kind", "content"}),
        "GroupingFunc": frozenset({"args"}),
        "CollateClause": frozenset({"arg", "collname"}),
        "TypeCast": frozenset({"arg", "typeName"}),
        "TypeName": frozenset({"names", "typmods", "typemod", "arrayBounds"}),
        "FuncCall": frozenset(
            {
                "funcname",
                "args",
                "agg_order",
                "agg_filter",
                "over",
                "agg_within_group",
                "agg_star",
                "agg_distinct",
                "func_variadic",
                "funcformat",
            }
        ),
        "NamedArgExpr": frozenset({"arg", "name", "argnumber"}),
        "WindowDef": frozenset(
            {
                "name",
                "refname",
                "partitionClause",
                "orderClause",
                "frameOptions",
                "startOffset",
                "endOffset",
            }
        ),
        "SortBy": frozenset({"node", "sortby_dir", "sortby_nulls", "useOp"}),
        "RangeVar": frozenset(
            {"catalogname", "schemaname", "relname", "inh", "relpersistence", "alias"}
        ),
        "Alias": frozenset({"aliasname", "colnames"}),
        "JoinExpr": frozenset(
            {
                "jointype",
                "isNatural",
                "larg",
                "rarg",
                "usingClause",
                "join_using_alias",
                "quals",
                "alias",
            }
        ),
        "RangeSubselect": frozenset({"lateral", "subquery", "alias"}),
        "RangeFunction": frozenset(
            {"lateral", "ordinality", "is_rowsfrom", "functions", "alias", "coldeflist"}
        ),
        "ColumnDef": frozenset({"colname", "typeName", "is_local", "collClause"}),
        "RangeTableSample": frozenset({"relation", "method", "args", "repeatable"}),
        "JsonObjectConstructor": frozenset({"exprs", "output", "absent_on_null", "unique"}),
        "JsonArrayConstructor": frozenset({"exprs", "output", "absent_on_null"}),
        "JsonArrayQueryConstructor": frozenset({"query", "output", "format", "absent_on_null"}),
        "JsonObjectAgg": frozenset({"constructor", "arg", "absent_on_null", "unique"}),
        "JsonArrayAgg": frozenset({"constructor", "arg", "absent_on_null"}),
        "JsonAggConstructor": frozenset({"output", "agg_filter", "agg_order", "over"}),
        "JsonKeyValue": frozenset({"key", "value"}),
        "JsonValueExpr": frozenset({"raw_expr", "formatted_expr", "format"}),
        "JsonOutput": frozenset({"typeName", "returning"}),
        "JsonReturning": frozenset({"format", "typid", "typmod"}),
        "JsonFormat": frozenset({"format_type", "encoding"}),
        "JsonIsPredicate": frozenset({"expr", "format", "item_type", "unique_keys"}),
        "JsonParseExpr": frozenset({"expr", "output", "unique_keys"}),
        "JsonScalarExpr": frozenset({"expr", "output"}),
        "JsonSerializeExpr": frozenset({"expr", "output"}),
        "JsonFuncExpr": frozenset(
            {
                "op",
                "column_name",
                "context_item",
                "pathspec",
                "passing",
                "output",
                "on_empty",
                "on_error",
                "wrapper",
                "quotes",
            }
        ),
        "JsonArgument": frozenset({"val", "name"}),
        "JsonBehavior": frozenset({"btype", "expr", "coerce"}),
        "JsonTable": frozenset(
            {"context_item", "pathspec", "passing", "columns", "on_error", "alias", "lateral"}
        ),
        "JsonTableColumn": frozenset(
            {
                "coltype",
                "name",
                "typeName",
                "pathspec",
                "format",
                "wrapper",
                "quotes",
                "columns",
                "on_empty",
                "on_error",
            }
        ),
        "JsonTablePathSpec": frozenset({"string", "name"}),
    }
)

# Fields that hold a node of a known type without its type tag (PostgreSQL's parse nodes hold
# these as typed pointers, so libpg_query writes them untagged).
_INLINE_FIELDS: Final = MappingProxyType(
    {
        "typeName": "TypeName",
        "alias": "Alias",
        "join_using_alias": "Alias",
        "over": "WindowDef",
        "withClause": "WithClause",
        "search_clause": "CTESearchClause",
        "cycle_clause": "CTECycleClause",
        "collClause": "CollateClause",
        "larg": "SelectStmt",
        "rarg": "SelectStmt",
        "ival": "Integer",
        "fval": "Float",
        "sval": "String",
        "boolval": "Boolean",
        "bsval": "BitString",
    }
)
# `larg` and `rarg` are untagged only in a set operation; a join holds tagged nodes there.
_TAGGED_ONLY_IN: Final = frozenset({"JoinExpr"})
# Untagged fields of the SQL/JSON nodes, whose type depends on the node that holds them.
_INLINE_BY_PARENT: Final = MappingProxyType(
    {
        ("JsonObjectAgg", "constructor"): "JsonAggConstructor",
        ("JsonArrayAgg", "constructor"): "JsonAggConstructor",
        ("JsonObjectAgg", "arg"): "JsonKeyValue",
        ("JsonArrayAgg", "arg"): "JsonValueExpr",
        ("JsonKeyValue", "value"): "JsonValueExpr",
        ("JsonArgument", "val"): "JsonValueExpr",
        ("JsonParseExpr", "expr"): "JsonValueExpr",
        ("JsonSerializeExpr", "expr"): "JsonValueExpr",
        ("JsonFuncExpr", "context_item"): "JsonValueExpr",
        ("JsonTable", "context_item"): "JsonValueExpr",
        ("JsonTable", "pathspec"): "JsonTablePathSpec",
        ("JsonTableColumn", "pathspec"): "JsonTablePathSpec",
        ("JsonOutput", "returning"): "JsonReturning",
        ("JsonFuncExpr", "on_empty"): "JsonBehavior",
        ("JsonFuncExpr", "on_error"): "JsonBehavior",
        ("JsonTable", "on_error"): "JsonBehavior",
        ("JsonTableColumn", "on_empty"): "JsonBehavior",
        ("JsonTableColumn", "on_error"): "JsonBehavior",
    }
)
# Untagged fields of the SQL/JSON nodes that hold the same type wherever they appear.
_JSON_INLINE: Final = MappingProxyType(
    {"output": "JsonOutput", "format": "JsonFormat", "typeName": "TypeName"}
)

# What the caller is told about the constructs refused most often, by node type.
_REFUSED: Final = MappingProxyType(
    {
        "intoClause": "SELECT INTO (it creates a table)",
        "lockingClause": "A row lock (FOR UPDATE, FOR SHARE)",
        "ParamRef": "A bind parameter (write the values inline)",
        "XmlExpr": "An XML constructor",
        "XmlSerialize": "XMLSERIALIZE",
        "RangeTableFunc": "XMLTABLE",
        "InsertStmt": "INSERT",
        "UpdateStmt": "UPDATE",
        "DeleteStmt": "DELETE",
        "MergeStmt": "MERGE",
    }
)

# EXPLAIN options that only describe the plan; ANALYZE (which runs the query), BUFFERS, WAL,
# SETTINGS, GENERIC_PLAN, MEMORY, SERIALIZE and the other formats are refused.
EXPLAIN_OPTIONS: Final = frozenset({"format", "verbose", "costs"})
_EXPLAIN_FORMATS: Final = frozenset({"text", "json"})
_TRUE_WORDS: Final = frozenset({"true", "on", "1", "yes"})
_FALSE_WORDS: Final = frozenset({"false", "off", "0", "no"})

# The first word of a statement, to name a refused one by its SQL keyword.
_FIRST_WORD: Final = re.compile(rb"\s*(?:(?:--[^\n]*\n|/\*.*?\*/)\s*)*([A-Za-z_]+)", re.S)

_UNQUOTED_NAME: Final = re.compile(r"[a-z_][a-z0-9_$]*(?:\.[a-z_][a-z0-9_$]*)?")

# Keys that hold byte offsets into the text: they differ between the text that was checked and
# the text that runs, and mean nothing else.
LOCATION_KEYS: Final = frozenset(
    {"location", "stmt_location", "stmt_len", "list_start", "list_end", "arg_location"}
    | {"name_location"}
    | {"rexpr_list_start", "rexpr_list_end"}
)


@dataclass(frozen=True, slots=True)
class FunctionPolicy:
    """Which function names a query may call.

    Attributes:
        builtins: Side-effect-free pg_catalog functions, callable unqualified or as
            `pg_catalog.name`: those of every supported major (`functions.py`); the second
            layer (`verifier.py`) holds a query to the connected server's own.
        extra: Names the operator allows on top (`MCP_SQL_ALLOWED_FUNCTIONS`), lower-case; an
            unqualified entry allows unqualified calls, `schema.name` allows that spelling.
    """

    builtins: frozenset[str] = ALL_BUILTIN_FUNCTIONS
    extra: frozenset[str] = frozenset()

    def ensure_allowed(self, schema: str | None, name: str, arguments: int | None = None) -> None:
        """Refuse a call of `name`, qualified by `schema` when it is not None.

        Args:
            schema: The schema the call names, or None for an unqualified call.
            name: The function's name as PostgreSQL compares it (unquoted names folded).
            arguments: How many arguments the call passes, when known.

        Raises:
            ToolFailure: The call is denied or not on any allowlist (`MCP_QUERY_VIOLATION`).
        """
        shown = _shown(name if schema is None else f"{schema}.{name}")
        reason = denial_reason(name)
        if reason is not None:
            raise _violation(f"Function {shown}() is not allowed: {reason}.")
        overload = UNINTERRUPTIBLE_OVERLOADS.get(name)
        if overload is not None and arguments == overload[0] and schema in (None, "pg_catalog"):
            raise _violation(f"Function {shown}() is not allowed: {overload[1]}.")
        if schema is None:
            if name in self.builtins or name in self.extra:
                return
        elif (schema == "pg_catalog" and name in self.builtins) or f"{schema}.{name}" in self.extra:
            return
        raise _violation(
            f"Function {shown}() is not allowed: only built-in functions known to be free of "
            "side effects may be called, unqualified or qualified with pg_catalog."
        )


@dataclass(slots=True)
class NameRef:
    """An unqualified relation or type name in the checked tree, which the catalog qualifies.

    Attributes:
        name: The name as PostgreSQL compares it.
        offset: The byte offset of the name in the statement's text.
        node: The tree's `RangeVar` or `TypeName` fields, so that the qualification can be
            checked.
    """

    name: str
    offset: int
    node: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ParsedStatement:
    """The one statement of the caller's text, parsed.

    Attributes:
        source: The caller's text, UTF-8 encoded (tree offsets count its bytes).
        start: Where the statement begins in `source`.
        end: Where it ends (before a terminating semicolon).
        root: The statement's node type.
        fields: Its fields.
        tree: The whole parse as libpg_query's JSON text.
    """

    source: bytes
    start: int
    end: int
    root: str
    fields: dict[str, Any]
    tree: str = ""


@dataclass(slots=True)
class CheckedTree:
    """A statement that passed the policy.

    Attributes:
        statement: The parsed statement.
        query: The SELECT's fields (for EXPLAIN, those of the query it explains).
        explain: The EXPLAIN options as SQL (`(FORMAT JSON, VERBOSE TRUE)`), or None.
        relations: The unqualified relation names, in text order.
        types: The unqualified type names, in text order.
        ctes: Every common table expression name the statement defines: an unqualified name
            among them is never qualified, since it may name the CTE.
        explain_format: The EXPLAIN format (`text` or `json`), or None.
        start: Where the query begins in the statement's source (after EXPLAIN and its
            options); it ends where the statement does.
        newer_literal: The statement's first numeric literal that servers older than
            PostgreSQL 16 read otherwise (Rule 6), or None.
    """

    statement: ParsedStatement
    query: dict[str, Any]
    start: int = 0
    explain: str | None = None
    relations: list[NameRef] = field(default_factory=list)
    types: list[NameRef] = field(default_factory=list)
    ctes: set[str] = field(default_factory=set)
    explain_format: str | None = None
    newer_literal: str | None = None


def _violation(detail: str) -> ToolFailure:
    return ToolFailure(detail, code=MCPErrorCode.QUERY_VIOLATION, invalid_params=("query",))


def _invalid(detail: str) -> ToolFailure:
    return ToolFailure(detail, code=MCPErrorCode.VALIDATION_ERROR, invalid_params=("query",))


def _shown(name: str) -> str:
    # Ordinary names are shown as they are; anything else is shown escaped and bounded.
    if len(name) <= _SHOWN_CHARS and _UNQUOTED_NAME.fullmatch(name):
        return name
    return quote(name, _SHOWN_CHARS)


def parse_tree_text(text: str) -> str:
    """Parse SQL text with PostgreSQL's parser into its tree, as libpg_query's JSON text.

    Args:
        text: The SQL.

    Returns:
        The tree as JSON text: `{"version": ..., "stmts": [...]}`.

    Raises:
        ToolFailure: The text does not parse (`MCP_VALIDATION_ERROR`).
    """
    try:
        tree: str = _pg.parse_sql_json(text)
    except _pg.ParseError as exc:
        raise _invalid(f"The query could not be parsed: {quote(str(exc.args[0]), 200)}") from None
    except (UnicodeError, ValueError):
        raise _invalid("The query is not valid UTF-8 text.") from None
    return tree


def parse_tree_json(text: bytes | str) -> dict[str, Any]:
    """Parse SQL text with PostgreSQL's parser into its decoded tree.

    Args:
        text: The SQL, as UTF-8 bytes or text.

    Returns:
        The decoded tree: `{"version": ..., "stmts": [...]}`.

    Raises:
        ToolFailure: The text does not parse, or nests too deeply to decode
            (`MCP_VALIDATION_ERROR`).
    """
    try:
        source = text if isinstance(text, str) else text.decode("utf-8")
    except UnicodeError:
        raise _invalid("The query is not valid UTF-8 text.") from None
    return decode_tree(parse_tree_text(source))


def decode_tree(tree: str) -> dict[str, Any]:
    """Decode the JSON text of a tree.

    Raises:
        ToolFailure: The tree nests too deeply to decode (`MCP_VALIDATION_ERROR`).
    """
    try:
        decoded: dict[str, Any] = json.loads(tree)
    except RecursionError:
        raise _invalid("The query nests too deeply to be checked.") from None
    return decoded


def parse_untrusted_sql(text: str) -> ParsedStatement:
    """Parse caller text into its single statement.

    Args:
        text: The untrusted query.

    Returns:
        The statement.

    Raises:
        ToolFailure: The text does not hold exactly one statement (`MCP_QUERY_VIOLATION`),
            or cannot be parsed (`MCP_VALIDATION_ERROR`).
    """
    try:
        source = text.encode("utf-8")
    except UnicodeEncodeError:
        raise _invalid("The query is not valid UTF-8 text (it holds a lone surrogate).") from None
    tree = parse_tree_text(text)
    statements = decode_tree(tree).get("stmts", [])
    if not statements:
        raise _invalid("The query holds no SQL statement.")
    if len(statements) != 1:
        raise _violation(
            f"Exactly one statement is allowed, and the query holds {len(statements)}."
        )
    raw = statements[0]
    start = int(raw.get("stmt_location", 0))
    length = int(raw.get("stmt_len", 0))
    end = start + length if length else len(source)
    ((root, fields),) = raw["stmt"].items()
    return ParsedStatement(source=source, start=start, end=end, root=root, fields=fields, tree=tree)


def show_as_select(statement: ParsedStatement) -> str:
    """Return the query `SHOW name` means: `SELECT pg_catalog.current_setting('name')`.

    Args:
        statement: A parsed `SHOW`.

    Returns:
        The SELECT, whose one column is named as the setting.

    Raises:
        ToolFailure: `SHOW ALL` (`MCP_QUERY_VIOLATION`).
    """
    name = str(statement.fields.get("name", ""))
    if name == "all":
        raise _violation(
            "SHOW ALL is not allowed; SELECT name, setting FROM pg_settings lists them."
        )
    literal = "'" + name.replace("'", "''") + "'"
    alias = '"' + name.replace('"', '""') + '"'
    return f"SELECT pg_catalog.current_setting({literal}) AS {alias}"


def check_untrusted_tree(
    statement: ParsedStatement,
    functions: FunctionPolicy,
    *,
    schemas: tuple[str, ...],
) -> CheckedTree:
    """Check every node of a parsed statement against the allowlists.

    Args:
        statement: What `parse_untrusted_sql` returned.
        functions: The functions the query may call.
        schemas: The schemas whose relations the query may read (`MCP_SQL_SCHEMAS`).

    Returns:
        The checked statement, with the relation names left to qualify.

    Raises:
        ToolFailure: A node is not allowed (`MCP_QUERY_VIOLATION`), or the tree nests too
            deeply (`MCP_VALIDATION_ERROR`).
    """
    if statement.root == "ExplainStmt":
        options, explain_format = _explain_options(statement)
        query = statement.fields.get("query", {})
        ((root, fields),) = query.items()
        if root != "SelectStmt":
            raise _violation("EXPLAIN is allowed only of a query this tool would run (a SELECT).")
        checked = CheckedTree(
            statement,
            fields,
            explain=options,
            explain_format=explain_format,
            start=_explained_query_start(statement),
        )
    elif statement.root == "SelectStmt":
        checked = CheckedTree(statement, statement.fields, start=statement.start)
    else:
        raise _violation(
            f"{_first_word(statement)} is not allowed: the query must be a SELECT (or VALUES, "
            "TABLE, UNION, INTERSECT, EXCEPT of them), or a plain EXPLAIN of one."
        )
    walker = _Walker(statement.source, functions, frozenset(schemas) | TRUSTED_RELATION_SCHEMAS)
    try:
        walker.check("SelectStmt", checked.query)
    except RecursionError:
        raise _invalid("The query nests too deeply to be checked.") from None
    checked.relations = walker.relations
    checked.types = walker.types
    checked.ctes = walker.ctes
    checked.newer_literal = newer_numeric_literal(statement.source)
    return checked


def newer_numeric_literal(source: bytes) -> str | None:
    """Return the first numeric literal of PostgreSQL 16's syntax in a statement (Rule 6).

    PostgreSQL's own scanner finds it, so that strings, comments and identifiers that merely
    hold such text are not taken for one.

    Args:
        source: The text of a statement that parsed (so valid UTF-8, and it scans).

    Returns:
        The literal as written, or None.
    """
    if _NEWER_NUMBER_HINT.search(source) is None:
        return None
    text = source.decode("utf-8")
    for token in _pg.scan(text):
        if token.name in _NUMERIC_TOKENS:
            # The scanner's offsets count characters, and its end is inclusive.
            literal = text[token.start : token.end + 1]
            if "_" in literal or literal[:2].lower() in _RADIX_PREFIXES:
                return literal
    return None


def ensure_read_alike(newer_literal: str | None, server_version: int) -> None:
    """Refuse a statement that the connected server would read otherwise than it was checked.

    Args:
        newer_literal: `CheckedTree.newer_literal` of the statement.
        server_version: The connected server's `server_version_num` (160004 for 16.4).

    Raises:
        ToolFailure: The statement holds a numeric literal of PostgreSQL 16's syntax and the
            server is older (`MCP_VALIDATION_ERROR`, naming the literal and the fix).
    """
    if newer_literal is None or server_version >= NUMERIC_LITERALS_SINCE:
        return
    raise ToolFailure(
        f"The numeric literal {quote(newer_literal, _SHOWN_CHARS)} needs PostgreSQL 16 or "
        f"later, and the server is PostgreSQL {server_version // 10_000}, which does not read "
        "it as a number: write it in plain decimal digits.",
        code=MCPErrorCode.VALIDATION_ERROR,
        invalid_params=("query",),
        metadata={"server_version": server_version},
    )


def _first_word(statement: ParsedStatement) -> str:
    match = _FIRST_WORD.match(statement.source, statement.start)
    word = match.group(1).decode("ascii").upper() if match else ""
    return word if word else "This statement"


def _explain_options(statement: ParsedStatement) -> tuple[str, str]:
    rendered: list[str] = []
    explain_format = "text"
    for option in statement.fields.get("options", []):
        element = option.get("DefElem", {})
        name = str(element.get("defname", ""))
        value = _option_value(element.get("arg"))
        if name == "analyze" and value is not False:
            raise _violation("EXPLAIN ANALYZE is not allowed: it runs the query.")
        if name not in EXPLAIN_OPTIONS:
            raise _violation(
                f"The EXPLAIN option {_shown(name.upper())} is not allowed; FORMAT TEXT or "
                "JSON, VERBOSE and COSTS are."
            )
        if name == "format":
            if not isinstance(value, str) or value not in _EXPLAIN_FORMATS:
                raise _violation("EXPLAIN allows FORMAT TEXT and FORMAT JSON only.")
            explain_format = value
            rendered.append(f"FORMAT {value.upper()}")
        elif isinstance(value, bool):
            rendered.append(f"{name.upper()} {'TRUE' if value else 'FALSE'}")
        else:
            raise _violation(f"EXPLAIN's {name.upper()} takes TRUE or FALSE.")
    return (f"({', '.join(rendered)})" if rendered else ""), explain_format


# Tokens that begin the query an EXPLAIN explains.
_QUERY_STARTS: Final = frozenset({"SELECT", "VALUES", "TABLE", "WITH", "ASCII_40"})
_PARENTHESES: Final = MappingProxyType({"ASCII_40": 1, "ASCII_41": -1})
# The options of EXPLAIN's unparenthesised form.
_LEGACY_OPTIONS: Final = frozenset({"ANALYZE", "ANALYSE", "VERBOSE"})


def _explained_query_start(statement: ParsedStatement) -> int:
    # The byte offset where the explained query begins: after EXPLAIN, its parenthesised
    # options (a parenthesis followed by anything but a query) and its legacy keywords.
    # The statement parsed, so its parentheses balance and a query follows the options.
    text = statement.source[statement.start : statement.end].decode("utf-8")
    names = [token.name for token in _pg.scan(text)]
    index = 1
    if names[1] == "ASCII_40" and names[2] not in _QUERY_STARTS:
        depths = itertools.accumulate(_PARENTHESES.get(name, 0) for name in names[1:])
        index = 2 + next(position for position, depth in enumerate(depths) if depth == 0)
    while names[index] in _LEGACY_OPTIONS:
        index += 1
    start = _pg.scan(text)[index].start
    # The scanner counts characters; the tree's offsets count bytes.
    return statement.start + len(text[:start].encode("utf-8"))


def _option_value(arg: dict[str, Any] | None) -> bool | str | None:
    # An option without a value is on; booleans are spelled as words or as 0 and 1.
    if arg is None:
        return True
    ((kind, value),) = arg.items()
    if kind == "String":
        word = str(value.get("sval", "")).lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
        return word
    if kind == "Integer" and value.get("ival", 0) in (0, 1):
        return bool(value.get("ival", 0))
    # (PostgreSQL's grammar spells TRUE and FALSE here as words, never as Boolean nodes.)
    return None


class _Walker:
    # One walk over a statement's tree: every node is checked against ALLOWED_NODES, every
    # name against its rule, and the unqualified relations and CTE names are collected.

    def __init__(self, source: bytes, functions: FunctionPolicy, schemas: frozenset[str]) -> None:
        self._source = source
        self._functions = functions
        self._schemas = schemas
        self.relations: list[NameRef] = []
        self.types: list[NameRef] = []
        self.ctes: set[str] = set()
        # The offset of the innermost node with one: a node without an offset is named by
        # the caller's text around the node that holds it.
        self._near = -1

    def check(self, tag: str, fields: dict[str, Any]) -> None:
        offset = fields.get("location")
        if isinstance(offset, int) and offset >= 0:
            self._near = offset
        allowed = ALLOWED_NODES.get(tag)
        if allowed is None:
            raise _violation(f"{self._describe(tag, fields)} is not allowed in a read-only query.")
        special = _SPECIAL.get(tag)
        if special is not None:
            special(self, fields)
        for name, value in fields.items():
            if name in LOCATION_KEYS:
                continue
            if name not in allowed:
                raise _violation(
                    f"{_REFUSED.get(name) or self._describe(tag, fields)} is not allowed in a "
                    "read-only query."
                )
            if isinstance(value, dict):
                if value:
                    self._value(tag, name, value)
            elif isinstance(value, list):
                for item in value:
                    # An empty object is a NULL member of a list (a function in FROM
                    # without a column definition list).
                    if isinstance(item, dict) and item:
                        self._value(tag, name, item)

    def _value(self, parent: str, name: str, value: dict[str, Any]) -> None:
        if len(value) == 1:
            ((key, inner),) = value.items()
            if key[:1].isupper() and isinstance(inner, dict):
                self.check(key, inner)
                return
        inline = _INLINE_BY_PARENT.get((parent, name)) or _INLINE_FIELDS.get(name)
        if inline is None and parent.startswith("Json"):
            inline = _JSON_INLINE.get(name)
        if inline is None or (parent in _TAGGED_ONLY_IN and name in ("larg", "rarg")):
            raise _violation(
                f"{self._describe(parent, value)} is not allowed in a read-only query."
            )
        self.check(inline, value)

    def _describe(self, tag: str, fields: Mapping[str, Any]) -> str:
        # Names a refused construct by the caller's own text around it, never by the
        # parser's node name.
        refused = _REFUSED.get(tag)
        if refused is not None:
            return refused
        offset = fields.get("location") if isinstance(fields, Mapping) else None
        if not isinstance(offset, int) or offset < 0:
            offset = self._near
        if 0 <= offset < len(self._source):
            excerpt = self._source[offset : offset + 24].decode("utf-8", errors="replace")
            return f"The construct at {quote(excerpt.split(chr(10))[0], 24)}"
        start = self._source[:24].decode("utf-8", "replace")
        return f"The construct at the start of {quote(start, 24)}"

    # -- Names ---------------------------------------------------------------------------

    def func_call(self, fields: dict[str, Any]) -> None:
        schema, name = self._qualified(fields.get("funcname", []), "function")
        self._functions.ensure_allowed(schema, name, len(fields.get("args", [])))

    def operator(self, names: list[dict[str, Any]]) -> None:
        schema, name = self._qualified(names, "operator")
        if schema is not None and schema != "pg_catalog":
            raise _violation(
                f"The operator OPERATOR({_shown(schema)}.{quote(name, 8)}) is not allowed: "
                "operators may be qualified with pg_catalog only."
            )

    def a_expr(self, fields: dict[str, Any]) -> None:
        kind = fields.get("kind")
        if kind not in _EXPRESSION_KINDS:
            raise _violation(f"{self._describe('A_Expr', fields)} is not allowed.")
        self.operator(fields.get("name", []))

    def sub_link(self, fields: dict[str, Any]) -> None:
        if "operName" in fields:
            self.operator(fields["operName"])

    def sort_by(self, fields: dict[str, Any]) -> None:
        if "useOp" in fields:
            self.operator(fields["useOp"])

    def type_name(self, fields: dict[str, Any]) -> None:
        schema, name = self._qualified(fields.get("names", []), "type")
        shown = _shown(name if schema is None else f"{schema}.{name}")
        # A type of MCP_SQL_SCHEMAS may be named as its relations may, qualified or not (an
        # unqualified name is qualified from the catalog by `statement.py`): the code it runs
        # (input, output, casts, CHECK constraints) is checked as PostgreSQL resolves it
        # (`verifier.py`). information_schema's types are built in.
        if schema is None:
            self.types.append(NameRef(name, int(fields.get("location", -1)), fields))
        elif schema != "pg_catalog" and schema not in self._schemas:
            raise _violation(
                f"The type {shown} is not allowed: types may be qualified with pg_catalog, "
                "information_schema or a schema of MCP_SQL_SCHEMAS ("
                + ", ".join(sorted(self._schemas - TRUSTED_RELATION_SCHEMAS))
                + ") only."
            )
        if name == "xml":
            raise _violation("The xml type is not allowed: casts to xml parse caller documents.")

    def collate(self, fields: dict[str, Any]) -> None:
        schema, name = self._qualified(fields.get("collname", []), "collation")
        if schema is not None and schema != "pg_catalog":
            raise _violation(
                f"The collation {_shown(schema)}.{_shown(name)} is not allowed: collations may "
                "be qualified with pg_catalog only."
            )

    def range_var(self, fields: dict[str, Any]) -> None:
        if "catalogname" in fields:
            raise _violation("A relation may be qualified with a schema only, not a database.")
        name = str(fields.get("relname", ""))
        schema = fields.get("schemaname")
        if schema is None:
            self.relations.append(NameRef(name, int(fields.get("location", -1)), fields))
        elif schema not in self._schemas:
            raise _violation(
                f"The relation {_shown(str(schema))}.{_shown(name)} is not allowed: this tool "
                "reads pg_catalog, information_schema and the schemas of MCP_SQL_SCHEMAS ("
                + ", ".join(sorted(self._schemas - TRUSTED_RELATION_SCHEMAS))
                + ") only."
            )

    def common_table(self, fields: dict[str, Any]) -> None:
        self.ctes.add(str(fields.get("ctename", "")))
        kind = next(iter(fields.get("ctequery", {})), None)
        if kind != "SelectStmt":
            what = _REFUSED.get(str(kind), "This statement")
            raise _violation(
                f"{what} is not allowed in WITH: a common table expression must be a SELECT."
            )

    def table_sample(self, fields: dict[str, Any]) -> None:
        schema, name = self._qualified(fields.get("method", []), "sampling method")
        if schema is None and name in _SAMPLING_METHODS:
            return
        self._functions.ensure_allowed(schema, name)

    def _qualified(self, names: list[dict[str, Any]], what: str) -> tuple[str | None, str]:
        parts = [str(item.get("String", {}).get("sval", "")) for item in names]
        if len(parts) == 1:
            return None, parts[0]
        if len(parts) == 2:
            return parts[0], parts[1]
        raise _violation(f"A {what} may be qualified with a schema only, not a database.")


_SPECIAL: Final = MappingProxyType(
    {
        "FuncCall": _Walker.func_call,
        "A_Expr": _Walker.a_expr,
        "SubLink": _Walker.sub_link,
        "SortBy": _Walker.sort_by,
        "TypeName": _Walker.type_name,
        "CollateClause": _Walker.collate,
        "RangeVar": _Walker.range_var,
        "CommonTableExpr": _Walker.common_table,
        "RangeTableSample": _Walker.table_sample,
    }
)


def same_tree(left: Any, right: Any) -> bool:
    """Tell whether two decoded trees are the same, byte offsets aside.

    Args:
        left: A tree or part of one.
        right: Another.

    Returns:
        True when they hold the same nodes with the same values.
    """
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        keys = left.keys() - LOCATION_KEYS
        if keys != right.keys() - LOCATION_KEYS:
            return False
        return all(same_tree(left[key], right[key]) for key in keys)
    if isinstance(left, list):
        return len(left) == len(right) and all(map(same_tree, left, right))
    return bool(left == right)
