"""The second check of `read_only_sql`: what PostgreSQL resolved the query to, allowed or not.

The policy (`policy.py`) reads the caller's text; PostgreSQL resolves it, and resolution is
where `(expr).f` becomes a call of `f`, a view its stored query, an operator its function.
This layer asks PostgreSQL how it resolves the statement that would run (`probe.py`), reads
the tree it answers (`node_text.py`, `resolution.py`) and allows it only when every function,
operator, type and relation in it is allowed on the connected server (`code_catalog.py`).

Rules:

1. A statement runs only after its resolved tree passed, for the catalog generation the
   statement was built with (`tool.py` keeps only verified statements, and forgets them all
   when the relation catalog is read again).
2. The verdict is kept by `verdict_key`: the statement's shape (`statement.py`, Rule 5: its
   tree without offsets or constant values) and what of its constants can change how
   PostgreSQL resolves it. Resolution reads a constant's node type and, for two kinds, its
   value. (a) A numeric literal that is not a 32-bit integer is a `Float` node, which
   PostgreSQL types by value as `integer`, `bigint` or `numeric` (`make_const()`): the key
   holds each one's class. (b) An integer constant that is a whole ORDER BY, GROUP BY or
   DISTINCT ON item names an output column by position, and so picks that column's sort
   and equality operators: when a statement has such a clause, the key holds the value of
   every integer constant. Every other constant is typed by its node alone: a string literal
   is `unknown` until its context types it (the same for every value), an integer literal
   `integer`, a boolean `boolean`, a bit string `bit`; an input function turns a literal's
   text into a value, which resolution never reads again (a `regclass` literal is an object
   id, no relation is read). Everything else resolution reads (names, node types,
   operators, casts, the catalog) is in the shape or in the catalog generation.
3. The catalog can change after a verdict: a view replaced, a domain constraint added, a
   function granted. Verdicts, and the catalog facts behind them, are kept until the relation
   catalog is read again, at most `session.CATALOG_TTL_S` (30 s) later: a change is seen by
   every statement within that window. Changes a role could use to escape the read-only
   transaction are refused at once by the role audit's guard on every call
   (`role_audit.py`).
4. Every refusal is in-band: `MCP_QUERY_VIOLATION`, naming the object in the caller's terms
   (its name and arguments, never an object id), and what the operator can change.
"""

import re
from typing import TYPE_CHECKING, Final

from mcp_server_suite.schemas.echo import quote
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.tools.sql.code_catalog import (
    ALL_BUILTIN_NAMES,
    CODE_CATALOG_SQL,
    MAX_LOOKUP_ROUNDS,
    OBJECT_FACTS_SQL,
    CodeCatalog,
    ObjectFacts,
    RefusedObject,
    ensure_allowed_code,
    missing_facts,
    read_constraints,
)
from mcp_server_suite.tools.sql.functions import denial_reason, first_major_with
from mcp_server_suite.tools.sql.node_text import NodeTextError, read_node_text
from mcp_server_suite.tools.sql.policy import parse_tree_text
from mcp_server_suite.tools.sql.resolution import (
    ResolutionError,
    ResolvedCode,
    collect_resolved_code,
)
from mcp_server_suite.tools.sql.statement import RelationCatalog, statement_shape

if TYPE_CHECKING:
    from mcp_server_suite.tools.sql.role_audit import TrustedCode
    from mcp_server_suite.tools.sql.session import ReadOnlyDatabase
    from mcp_server_suite.tools.sql.statement import ExecutableStatement

__all__ = ["CodeVerifier", "float_class", "verdict_key"]

# A numeric literal PostgreSQL's grammar left as a Float node, in a tree's JSON text.
_FLOAT: Final = re.compile(r'"fval":\{"fval":"([^"\\]*)"\}')
# An integer constant's value (absent for zero).
_INTEGER: Final = re.compile(r'"ival":\{(?:"ival":(-?\d+))?\}')
# Clauses in which an integer constant may name an output column (Rule 2 (b)).
_POSITIONAL_MARKS: Final = (
    '"SortBy":{"node":{"A_Const":{"ival"',
    '"groupClause":',
    '"distinctClause":[{"',
)
# PostgreSQL's integer literal syntax (decimal, and 16's hexadecimal, octal, binary and
# underscores), after the sign `make_const()` sees.
_INTEGER_LITERAL: Final = re.compile(
    r"-?(?:[0-9](?:_?[0-9])*|0[xX](?:_?[0-9a-fA-F])+|0[oO](?:_?[0-7])+|0[bB](?:_?[01])+)"
)
_INT4: Final = 2**31
_INT8: Final = 2**63
# The name of a function PostgreSQL reports missing (42883), from its primary message.
_MISSING_FUNCTION: Final = re.compile(r"function (?:pg_catalog\.)?([a-z_][a-z0-9_]*)\(")

# The SQL/JSON syntax of later majors, by its parse node: the first major that reads it, and
# its name for the caller.
_NEWER_SYNTAX: Final = {
    "JsonObjectConstructor": (16, "JSON_OBJECT"),
    "JsonArrayConstructor": (16, "JSON_ARRAY"),
    "JsonArrayQueryConstructor": (16, "JSON_ARRAY"),
    "JsonObjectAgg": (16, "JSON_OBJECTAGG"),
    "JsonArrayAgg": (16, "JSON_ARRAYAGG"),
    "JsonIsPredicate": (16, "IS JSON"),
    "JsonFuncExpr": (17, "JSON_VALUE, JSON_QUERY or JSON_EXISTS"),
    "JsonTable": (17, "JSON_TABLE"),
    "JsonParseExpr": (17, "JSON()"),
    "JsonScalarExpr": (17, "JSON_SCALAR"),
    "JsonSerializeExpr": (17, "JSON_SERIALIZE"),
}

# The object PostgreSQL reports missing (42P01, 42704), from its primary message.
_MISSING_OBJECT: Final = re.compile(r'(relation|type) \\?"([^"\\]{1,64})\\?" does not exist')

# SQL/JSON syntax that an older major reads as a call of a function it lacks.
_NEWER_FUNCTION_SYNTAX: Final = {
    "json_array": (16, "JSON_ARRAY"),
    "json_arrayagg": (16, "JSON_ARRAYAGG"),
    "json_scalar": (17, "JSON_SCALAR"),
    "json_serialize": (17, "JSON_SERIALIZE"),
    "json": (17, "JSON()"),
    "json_value": (17, "JSON_VALUE"),
    "json_query": (17, "JSON_QUERY"),
    "json_exists": (17, "JSON_EXISTS"),
}

# An object's name as `regprocedure`, `regoperator`, `regtype` or `regclass` writes it.
_NAME_SQL: Final = """
WITH x AS (SELECT %(p2)s::pg_catalog.int8::pg_catalog.oid AS oid)
SELECT CASE %(p1)s::pg_catalog.text
  WHEN 'function' THEN x.oid::pg_catalog.regprocedure::pg_catalog.text
  WHEN 'operator' THEN pg_catalog.concat(x.oid::pg_catalog.regoperator::pg_catalog.text, ' (',
    (SELECT o.oprcode::pg_catalog.regprocedure::pg_catalog.text FROM pg_catalog.pg_operator AS o
     WHERE o.oid OPERATOR(pg_catalog.=) x.oid), ')')
  WHEN 'relation' THEN x.oid::pg_catalog.regclass::pg_catalog.text
  ELSE x.oid::pg_catalog.regtype::pg_catalog.text END
FROM x"""
_SHOWN_NAME_CHARS: Final = 120
# A name a query may write without quotes (a keyword aside, which a catalog name rarely is).
_BARE_NAME: Final = re.compile(r"[a-z_][a-z0-9_$]{0,62}")
# What a catalog name may hold to be shown without quotes.
_PLAIN_NAME: Final = re.compile(r"[\w.$ ,()\[\]<>=!~*/+%&|^#@?-]+")


def float_class(literal: str) -> str:
    """Return how PostgreSQL types a Float node's text: `int4`, `int8` or `numeric`.

    Args:
        literal: The node's text (a literal PostgreSQL's grammar did not read as a 32-bit
            integer, with the sign of a negation folded in).
    """
    if not _INTEGER_LITERAL.fullmatch(literal):
        return "numeric"
    value = int(literal.replace("_", ""), 0)
    if -_INT4 <= value < _INT4:
        return "int4"
    if -_INT8 <= value < _INT8:
        return "int8"
    return "numeric"


def verdict_key(tree: str) -> str:
    """Return the key a statement's verdict is kept by (Rule 2).

    Args:
        tree: The statement's parse as libpg_query's JSON text.

    Returns:
        The statement's shape, and the classes or values of the constants that can change
        how PostgreSQL resolves it.
    """
    shape = statement_shape(tree)
    floats = '"fval"' in tree
    # Substring tests (each a fast scan of the text in C) rather than one regular expression,
    # which costs more than all of them on the common path: neither kind of constant.
    positional = any(mark in tree for mark in _POSITIONAL_MARKS)
    if not floats and not positional:
        return shape
    parts = [shape]
    if floats:
        parts.append(",".join(float_class(found) for found in _FLOAT.findall(tree)))
    if positional:
        parts.append(",".join(found or "0" for found in _INTEGER.findall(tree)))
    return "\x00".join(parts)


def _shown(name: str) -> str:
    # A catalog name as PostgreSQL writes it (`ts_stat(text)`), bounded; quoted only when it
    # holds what a plain name does not.
    if len(name) <= _SHOWN_NAME_CHARS and _PLAIN_NAME.fullmatch(name):
        return name
    return quote(name, _SHOWN_NAME_CHARS)


def _violation(detail: str, **metadata: str | int | float | bool | None) -> ToolFailure:
    return ToolFailure(
        detail, code=MCPErrorCode.QUERY_VIOLATION, invalid_params=("query",), metadata=metadata
    )


class CodeVerifier:
    """Checks what PostgreSQL resolves statements to, for one tool (Rules 1 to 4).

    Args:
        trusted: What the operator trusts (`MCP_SQL_SCHEMAS`, trusted extensions).
        allowed: `MCP_SQL_ALLOWED_FUNCTIONS`.
    """

    def __init__(self, trusted: "TrustedCode", allowed: frozenset[str]) -> None:
        self._trusted: Final = trusted
        self._unqualified: Final = sorted(name for name in allowed if "." not in name)
        self._qualified: Final = sorted(name for name in allowed if "." in name)
        self._generation: object = None
        self._catalog: CodeCatalog | None = None
        self._facts = ObjectFacts()

    async def ensure_verified(
        self, database: "ReadOnlyDatabase", statement: "ExecutableStatement", generation: object
    ) -> None:
        """Refuse a statement whose resolved tree names code it may not run.

        Args:
            database: The pool.
            statement: The statement, with its query (`ExecutableStatement.query`).
            generation: The relation catalog the statement was built with (Rule 3).

        Raises:
            ToolFailure: The query resolves to something not allowed, PostgreSQL refused to
                resolve it, or every connection stayed busy (in-band).
            DatabaseUnavailable: PostgreSQL could not be reached or failed.
        """
        catalog = await self._catalog_for(database, generation)
        try:
            tree = await database.resolve(statement.query, statement.newer_literal)
        except ToolFailure as failure:
            later = (
                _later_major(failure, catalog.major)
                or _later_syntax(failure, catalog.major, statement.query)
                or _name_in_a_string(
                    failure,
                    statement.query,
                    generation if isinstance(generation, RelationCatalog) else None,
                )
            )
            raise (later or failure) from failure.__cause__
        try:
            code = collect_resolved_code(read_node_text(tree))
            await self._learn_facts(database, code)
            ensure_allowed_code(code, catalog, self._facts)
        except NodeTextError as exc:
            raise _violation(
                f"The query could not be checked as PostgreSQL resolves it: {exc}."
            ) from None
        except ResolutionError as exc:
            advice = f" {exc.advice}" if exc.advice else ""
            raise _violation(
                f"The query resolves to {exc.construct}, which is not allowed in a read-only "
                f"query.{advice}"
            ) from None
        except RefusedObject as refused:
            raise await self._refusal(database, refused, catalog) from None

    async def _catalog_for(self, database: "ReadOnlyDatabase", generation: object) -> CodeCatalog:
        if self._catalog is None or self._generation is not generation:
            path = ["pg_catalog", *await self._extension_schemas(database)]
            rows = await database.read_catalog(
                CODE_CATALOG_SQL,
                {
                    "p1": sorted(ALL_BUILTIN_NAMES),
                    "p2": self._unqualified,
                    "p3": path,
                    "p4": self._qualified,
                    "p5": list(self._trusted.extensions),
                },
            )
            self._catalog = CodeCatalog.from_rows(self._trusted.schemas, rows)
            self._facts = ObjectFacts()
            self._generation = generation
        return self._catalog

    async def _extension_schemas(self, database: "ReadOnlyDatabase") -> list[str]:
        # Where an unqualified allowed name resolves besides pg_catalog: the trusted
        # extensions' schemas (the session's search_path).
        return list(database.trusted_schemas())

    async def _learn_facts(self, database: "ReadOnlyDatabase", code: ResolvedCode) -> None:
        # Rule 5 of `code_catalog.py`: look up what is not built in, round after round, and
        # decide once what the last round found is known (a chain of MAX_LOOKUP_ROUNDS types
        # is checked; one more is refused).
        lookups = 0
        while True:
            read_constraints(self._facts)
            types, relations = missing_facts(code, self._facts)
            if not types and not relations:
                return
            if lookups == MAX_LOOKUP_ROUNDS:
                raise ResolutionError("types nested too deeply to be checked")
            lookups += 1
            rows = await database.read_catalog(
                OBJECT_FACTS_SQL, {"p1": sorted(types), "p2": sorted(relations)}
            )
            self._facts.add_rows(rows)
            for oid in sorted(types - self._facts.types.keys()):
                raise RefusedObject("type", oid, "a type")
            for oid in sorted(relations - self._facts.relations.keys()):
                raise RefusedObject("relation", oid, "a relation")

    async def _refusal(
        self, database: "ReadOnlyDatabase", refused: RefusedObject, catalog: CodeCatalog
    ) -> ToolFailure:
        # Rule 4: the object by name, and why.
        rows = await database.read_catalog(_NAME_SQL, {"p1": refused.kind, "p2": refused.oid})
        written = str(rows[0][0]) if rows else f"#{refused.oid}"
        name = _shown(written)
        metadata: dict[str, str | int | float | bool | None] = {"refused": refused.kind}
        if refused.kind == "function":
            bare = written.split("(")[0].rpartition(".")[2].strip('"')
            reason = denial_reason(bare) or (
                "only built-in functions known to be free of side effects, and those of "
                "MCP_SQL_ALLOWED_FUNCTIONS, may run"
            )
            return _violation(
                f"The function {name} is not allowed: {reason} (PostgreSQL resolved "
                f"{refused.use} in the query to it).",
                **metadata,
            )
        if refused.kind == "operator":
            return _violation(
                f"The operator {name} is not allowed: the function behind it is not one "
                "that may run (list it in MCP_SQL_ALLOWED_FUNCTIONS to allow it).",
                **metadata,
            )
        if refused.kind == "input":
            return _violation(
                f"Values of the type {name} may not be made from text in a query: its input "
                "function parses XML in libxml2, which the statement timeout cannot stop.",
                **metadata,
            )
        if refused.kind == "domain":
            return _violation(
                f"The domain {name} is not allowed: a CHECK constraint of it calls a function "
                "that may not run.",
                **metadata,
            )
        if refused.kind == "relation":
            shown = ", ".join(sorted(catalog.schemas))
            return _violation(
                f"The relation {name} is not allowed: this tool reads the schemas {shown} only.",
                **metadata,
            )
        return _violation(
            f"The type {name} is not allowed: its input, output or other support functions "
            "are neither built in, part of a trusted extension, nor allowed.",
            **metadata,
        )


def _later_major(failure: ToolFailure, major: int) -> ToolFailure | None:
    # A function PostgreSQL does not have, that a later major's list holds: say which major.
    problem = failure.problem
    if problem.metadata.get("sqlstate") != "42883":
        return None
    found = _MISSING_FUNCTION.search(problem.detail)
    if found is None:
        return None
    name = found.group(1)
    since, shown = _NEWER_FUNCTION_SYNTAX.get(name) or (
        first_major_with(name),
        f"The function {name}()",
    )
    if since is None or since <= major:
        return None
    return _needs(shown, since, major, "42883")


def _later_syntax(failure: ToolFailure, major: int, query: str) -> ToolFailure | None:
    # SQL/JSON syntax a server older than its major reads as a syntax error: say which.
    if failure.problem.metadata.get("sqlstate") != "42601":
        return None
    tree = parse_tree_text(query)
    for tag, (since, shown) in _NEWER_SYNTAX.items():
        if since > major and f'"{tag}":' in tree:
            return _needs(shown, since, major, "42601")
    return None


def _name_in_a_string(
    failure: ToolFailure, query: str, names: "RelationCatalog | None"
) -> ToolFailure | None:
    # A relation or type named in a string ('film_list'::regclass, to_regtype('mood')) is
    # looked up when the query runs, in the session's search_path, which holds trusted
    # schemas only: say how to write it, with the schema that holds it when the catalog
    # knows one. An unqualified type name outside a string that PostgreSQL did not find is
    # in none of the schemas it is looked up in (`statement.py`, Rule 1): say which.
    problem = failure.problem
    sqlstate = problem.metadata.get("sqlstate")
    if sqlstate not in ("42P01", "42704"):
        return None
    found = _MISSING_OBJECT.search(problem.detail)
    if found is None:
        return None
    kind, name = found.group(1), found.group(2)
    in_string = f"'{name}'" in query
    if not in_string and (kind != "type" or "." in name):
        return None
    exposed = ", ".join(names.schemas) if names is not None else "none"
    if kind == "relation":
        schema = names.schema_of(name) if names is not None else None
        listed = "tables and views"
    else:
        schema = names.type_schema_of(name) if names is not None else None
        listed = "columns and their types"
    prefix = f"PostgreSQL refused the query (SQLSTATE {sqlstate}): the {kind} {quote(name, 64)}"
    if in_string and schema is not None:
        spelled = f"{_identifier(schema)}.{_identifier(name)}"
        detail = (
            f"{prefix} named in a string is looked up when the query runs, in pg_catalog and "
            f"the trusted extensions' schemas only: write it with its schema ('{spelled}')."
        )
    else:
        where = "named in a string " if in_string else ""
        detail = (
            f"{prefix} {where}is in none of pg_catalog, the trusted extensions' schemas and "
            f"MCP_SQL_SCHEMAS ({exposed}); sql_schema lists the {listed} there."
        )
    return ToolFailure(
        detail,
        code=problem.code,
        invalid_params=("query",),
        metadata={"sqlstate": str(sqlstate)},
    )


def _identifier(name: str) -> str:
    # A name as a query writes it: bare when PostgreSQL would read it back unchanged.
    if _BARE_NAME.fullmatch(name):
        return name
    return '"' + name.replace('"', '""') + '"'


def _needs(what: str, since: int, major: int, sqlstate: str) -> ToolFailure:
    return ToolFailure(
        f"{what} needs PostgreSQL {since} or later, and the server is PostgreSQL {major}.",
        code=MCPErrorCode.VALIDATION_ERROR,
        invalid_params=("query",),
        metadata={"sqlstate": sqlstate, "server_major": major, "needs_major": since},
    )
