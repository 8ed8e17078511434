"""`sql_schema`: the tables and views a query may read, from one fixed catalog query.

Rules:

1. The answer comes from `pg_catalog` directly, not `information_schema`, whose views show a
   role only the constraints of tables it owns: a read-only role sees every foreign key here.
2. Only relations of `MCP_SQL_SCHEMAS` on which the role holds SELECT (on the table or on
   any of its columns) are listed; partitions are left out (their parent is listed).
3. The query is fixed text: the only caller inputs, the `table` and `after` arguments, are
   quoted literals. It runs like every query of `read_only_sql`, through the role audit's
   guard in a read-only transaction that is rolled back, bounded in rows and in bytes.
4. A listing is paged: an answer that could not hold every table is `truncated` and gives
   `next_after`, the last table it lists, which `after` continues from (in the listing's
   own order, so tables created or dropped meanwhile neither repeat nor hide the rest). A
   table whose description alone is larger than an answer may be is described alone,
   without comments (`comments_omitted`), so that no table stops the listing.
"""

import functools
from typing import TYPE_CHECKING, Any, Final

from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.schemas.sql import (
    MAX_COMMENT_CHARS,
    MAX_SCHEMA_TABLES,
    SQLColumn,
    SQLForeignKey,
    SQLSchemaParams,
    SQLSchemaResult,
    SQLTable,
)

if TYPE_CHECKING:
    from mcp_server_suite.tools.sql.statement import ExecutableStatement
    from mcp_server_suite.tools.sql.tool import SQLTool

__all__ = ["DESCRIPTION", "SchemaTool", "schema_sql"]

DESCRIPTION: Final = (
    "List the tables and views read_only_sql can read, with their columns (name, type, "
    "nullable), primary keys, foreign keys and comments; with table, describe that one "
    "table or view. When truncated is true, call again with after set to next_after for "
    "the tables that follow. Unqualified names in read_only_sql are looked up in the "
    "schemas listed, in order."
)

_KINDS: Final = (
    "CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' WHEN 'm' THEN "
    "'materialized view' WHEN 'f' THEN 'foreign table' ELSE 'partitioned table' END"
)

# The column names of a key, in key order, for the relation `rel` and the attribute numbers
# `keys`.
_KEY_COLUMNS: Final = (
    "(SELECT pg_catalog.jsonb_agg(a.attname ORDER BY k.ord) "
    "FROM pg_catalog.unnest({keys}) WITH ORDINALITY AS k(attnum, ord) "
    "JOIN pg_catalog.pg_attribute AS a ON a.attrelid OPERATOR(pg_catalog.=) {rel} "
    "AND a.attnum OPERATOR(pg_catalog.=) k.attnum)"
)


def _literal(value: str) -> str:
    # Strings are standard-conforming on every pinned session: doubling quotes is all it takes.
    return "'" + value.replace("'", "''") + "'"


def schema_sql(
    schemas: tuple[str, ...],
    table: str | None,
    schema: str | None,
    *,
    after: tuple[str, str] | None = None,
    comments: bool = True,
) -> str:
    """Return the catalog query (Rules 1 to 4).

    Args:
        schemas: `MCP_SQL_SCHEMAS`, in search order.
        table: One relation's name, or None for all.
        schema: The schema `table` was qualified with, or None.
        after: (schema, name) of the table a listing continues after, or None.
        comments: Whether to read the table's and its columns' comments.
    """
    searched = "ARRAY[" + ", ".join(_literal(name) for name in schemas) + "]::pg_catalog.text[]"
    only = ""
    if table is not None:
        only = f" AND c.relname OPERATOR(pg_catalog.=) {_literal(table)}"
        if schema is not None:
            only += f" AND n.nspname OPERATOR(pg_catalog.=) {_literal(schema)}"
    if after is not None:
        # The listing's order, (position of the schema, name), continued past `after`; a
        # name compares in the C collation, as ORDER BY sorts it.
        position = f"pg_catalog.array_position({searched}, n.nspname::pg_catalog.text)"
        at = f"pg_catalog.array_position({searched}, {_literal(after[0])})"
        only += (
            f" AND ({position} OPERATOR(pg_catalog.>) {at} OR ({position} "
            f"OPERATOR(pg_catalog.=) {at} AND c.relname OPERATOR(pg_catalog.>) "
            f"{_literal(after[1])}::pg_catalog.name))"
        )
    table_comment = (
        f"pg_catalog.left(pg_catalog.obj_description(c.oid, 'pg_class'), {MAX_COMMENT_CHARS})"
        if comments
        else "NULL::pg_catalog.text"
    )
    column_comment = (
        f"pg_catalog.left(pg_catalog.col_description(c.oid, a.attnum), {MAX_COMMENT_CHARS})"
        if comments
        else "NULL::pg_catalog.text"
    )
    own_key = _KEY_COLUMNS.format(keys="p.conkey", rel="c.oid")
    fk_from = _KEY_COLUMNS.format(keys="f.conkey", rel="f.conrelid")
    fk_to = _KEY_COLUMNS.format(keys="f.confkey", rel="f.confrelid")
    return (
        "SELECT n.nspname::pg_catalog.text AS schema_name, c.relname::pg_catalog.text AS name, "  # nosec B608  # The caller's table name is a quoted literal.
        f"{_KINDS} AS kind, {table_comment} AS comment, "
        "(SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(a.attname, "
        "pg_catalog.format_type(a.atttypid, a.atttypmod), NOT a.attnotnull, "
        f"{column_comment}) ORDER BY a.attnum) FROM pg_catalog.pg_attribute AS a "
        "WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attnum OPERATOR(pg_catalog.>) 0 "
        "AND NOT a.attisdropped) AS columns, "
        f"(SELECT {own_key} FROM pg_catalog.pg_constraint AS p "
        "WHERE p.conrelid OPERATOR(pg_catalog.=) c.oid AND p.contype OPERATOR(pg_catalog.=) 'p') "
        "AS primary_key, "
        f"(SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array({fk_from}, "
        f"rn.nspname, rc.relname, {fk_to}) ORDER BY f.conname) "
        "FROM pg_catalog.pg_constraint AS f "
        "JOIN pg_catalog.pg_class AS rc ON rc.oid OPERATOR(pg_catalog.=) f.confrelid "
        "JOIN pg_catalog.pg_namespace AS rn ON rn.oid OPERATOR(pg_catalog.=) rc.relnamespace "
        "WHERE f.conrelid OPERATOR(pg_catalog.=) c.oid "
        "AND f.contype OPERATOR(pg_catalog.=) 'f') AS foreign_keys "
        "FROM pg_catalog.pg_class AS c "
        "JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace "
        f"WHERE n.nspname OPERATOR(pg_catalog.=) ANY ({searched}) "
        "AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,v,m,f,p}'::pg_catalog.char[]) "
        "AND NOT c.relispartition "
        "AND (pg_catalog.has_table_privilege(c.oid, 'SELECT') "
        "OR pg_catalog.has_any_column_privilege(c.oid, 'SELECT'))"
        f"{only} "
        f"ORDER BY pg_catalog.array_position({searched}, n.nspname::pg_catalog.text), c.relname"
    )


class SchemaTool:
    """The `sql_schema` tool, on the pool of `read_only_sql`.

    Args:
        sql: The `read_only_sql` tool whose database this tool reads.
    """

    def __init__(self, sql: "SQLTool") -> None:
        self._sql: Final = sql

    async def run(self, params: SQLSchemaParams) -> SQLSchemaResult:
        """Describe the allowed tables, or one of them.

        Args:
            params: The validated arguments.

        Returns:
            The tables.

        Raises:
            ToolFailure: The table is not one the tool reads, the role audit refused, or
                every connection stayed busy (in-band problems).
            DatabaseUnavailable: PostgreSQL could not be reached or failed.
        """
        schemas = self._sql.schemas
        if params.table is not None and params.after is not None:
            raise ToolFailure(
                "Pass table to describe one table, or after to continue a listing; not both.",
                code=MCPErrorCode.VALIDATION_ERROR,
                invalid_params=("after",),
            )
        table, schema = _split(params.table, schemas, "table")
        after = _after(params.after, schemas)
        database = await self._sql.database()
        rows = MAX_SCHEMA_TABLES if table is None else 1
        query = functools.partial(schema_sql, schemas, table, schema, after=after)
        try:
            fetched = await database.run(self._bounded(query(), rows))
            omitted = False
        except ToolFailure as failure:
            if "row_bytes" not in failure.problem.metadata:
                raise
            # Rule 4: the next table alone is larger than an answer may be. It is described
            # alone, without comments, so that the listing goes on past it.
            try:
                fetched = await database.run(self._bounded(query(comments=False), 1))
            except ToolFailure as again:
                if "row_bytes" not in again.problem.metadata:
                    raise
                raise _too_large(again) from None
            omitted = True
        if table is not None and not fetched.rows:
            where = f"the schema {schema}" if schema else "the schemas " + ", ".join(schemas)
            raise ToolFailure(
                f"No table or view named {table!r} that this role may read is in {where}.",
                code=MCPErrorCode.VALIDATION_ERROR,
                invalid_params=("table",),
            )
        tables = [_table(row, comments_omitted=omitted) for row in fetched.rows]
        last = tables[-1] if tables and fetched.truncated else None
        return SQLSchemaResult(
            schemas=list(schemas),
            tables=tables,
            truncated=fetched.truncated,
            next_after=None if last is None else f"{last.schema_name}.{last.name}",
        )

    def _bounded(self, query: str, rows: int) -> "ExecutableStatement":
        from mcp_server_suite.tools.sql.statement import wrap_statement  # noqa: PLC0415

        return wrap_statement(query, max_rows=rows, max_result_bytes=self._sql.max_result_bytes)


def _too_large(failure: ToolFailure) -> ToolFailure:
    # Even without comments, the next table's description is larger than an answer may be.
    metadata = failure.problem.metadata
    return ToolFailure(
        f"The next table's description alone holds {metadata['row_bytes']} bytes even without "
        f"comments, more than the {metadata['max_result_bytes']} bytes MCP_SQL_MAX_RESULT_BYTES "
        "allows for one answer: the operator can raise MCP_SQL_MAX_RESULT_BYTES.",
        code=MCPErrorCode.VALIDATION_ERROR,
        metadata=dict(metadata),
    )


def _after(name: str | None, schemas: tuple[str, ...]) -> tuple[str, str] | None:
    # "schema.name", as next_after gives it: schema names hold no dot (config.py), so the
    # first dot ends the schema whatever the table's name holds.
    if name is None:
        return None
    schema, dot, table = name.partition(".")
    if not dot or not table:
        raise ToolFailure(
            "after takes schema.name, as next_after gives it.",
            code=MCPErrorCode.VALIDATION_ERROR,
            invalid_params=("after",),
        )
    _split(name, schemas, "after")
    return schema, table


def _split(
    name: str | None, schemas: tuple[str, ...], argument: str
) -> tuple[str | None, str | None]:
    # "name" or "schema.name", as PostgreSQL stores them; a schema outside the allowed ones
    # is refused, and a NUL, which no name holds, too.
    if name is None:
        return None, None
    if "\x00" in name:
        raise ToolFailure(
            "A table name cannot hold NUL.",
            code=MCPErrorCode.VALIDATION_ERROR,
            invalid_params=(argument,),
        )
    schema, dot, table = name.partition(".")
    if not dot:
        return name, None
    if schema not in schemas:
        raise ToolFailure(
            f"The schema {schema!r} is not one this tool reads (MCP_SQL_SCHEMAS: "
            + ", ".join(schemas)
            + ").",
            code=MCPErrorCode.ACCESS_DENIED,
            invalid_params=(argument,),
        )
    return table, schema


def _table(row: list[Any], *, comments_omitted: bool) -> SQLTable:
    schema_name, name, kind, comment, columns, primary_key, foreign_keys = row
    return SQLTable(
        schema_name=schema_name,
        name=name,
        kind=kind,
        comment=comment,
        comments_omitted=comments_omitted,
        columns=[
            SQLColumn(name=column, type=type_name, nullable=nullable, comment=note)
            for column, type_name, nullable, note in columns or []
        ],
        primary_key=primary_key or [],
        foreign_keys=[
            SQLForeignKey(
                columns=source or [],
                references_schema=target_schema,
                references_table=target,
                references_columns=target_columns or [],
            )
            for source, target_schema, target, target_columns in foreign_keys or []
        ],
    )
