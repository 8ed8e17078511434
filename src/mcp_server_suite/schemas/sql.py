"""Contracts of `read_only_sql` and `sql_schema`.

These models import nothing from the SQL stack (pglast, psycopg), so `tools/list` can
describe the tools without loading them.
"""

from typing import Annotated, Final, Literal, Self

from pydantic import Field, JsonValue, field_validator, model_validator

from mcp_server_suite.schemas.arguments import ToolArguments
from mcp_server_suite.schemas.base import StrictModel

__all__ = [
    "DEFAULT_MAX_ROWS",
    "MAX_QUERY_CHARS",
    "MAX_SCHEMA_TABLES",
    "MIN_QUERY_CHARS",
    "ReadOnlySQLParams",
    "ReadOnlySQLResult",
    "SQLColumn",
    "SQLForeignKey",
    "SQLSchemaParams",
    "SQLSchemaResult",
    "SQLTable",
]

# The design document's argument bounds. Six characters is the shortest useful statement
# ("SELECT"); 10,000 bounds the parser's work on one call.
MIN_QUERY_CHARS: Final = 6
MAX_QUERY_CHARS: Final = 10_000
# The design document's row cap: results carry at most 50 rows, and 50 is the default.
DEFAULT_MAX_ROWS: Final = 50
# PostgreSQL's own limit on the columns of a result (MaxTupleAttributeNumber).
MAX_COLUMNS: Final = 1664


class ReadOnlySQLParams(ToolArguments):
    """Arguments of `read_only_sql`."""

    query: str = Field(
        min_length=MIN_QUERY_CHARS,
        max_length=MAX_QUERY_CHARS,
        description=(
            "One PostgreSQL SELECT (or UNION, INTERSECT, EXCEPT of SELECTs), without bind "
            f"parameters; no NUL characters; {MIN_QUERY_CHARS} to {MAX_QUERY_CHARS:,} "
            "characters."
        ),
    )
    max_rows: int = Field(
        default=DEFAULT_MAX_ROWS,
        ge=1,
        le=DEFAULT_MAX_ROWS,
        description=(
            f"The most rows to return, 1 to {DEFAULT_MAX_ROWS}; null means "
            f"{DEFAULT_MAX_ROWS}. The query's own LIMIT applies when smaller."
        ),
    )

    @field_validator("query")
    @classmethod
    def _printable_statement(cls, query: str) -> str:
        if "\x00" in query:
            raise ValueError("must not contain NUL characters")
        if not query.strip():
            raise ValueError("must not be blank")
        return query


class ReadOnlySQLResult(StrictModel):
    """Result of `read_only_sql`."""

    columns: list[str] = Field(max_length=MAX_COLUMNS, description="Column names in result order.")
    rows: list[list[JsonValue]] = Field(
        max_length=DEFAULT_MAX_ROWS,
        description=(
            "Rows of JSON values: numeric, UUID, network and range values as text; dates and "
            "times ISO 8601; intervals ISO 8601 durations; bytea as \\x hex; arrays as lists; "
            "json and jsonb as JSON; NaN and infinities as strings."
        ),
    )
    row_count: int = Field(ge=0, le=DEFAULT_MAX_ROWS, description="Equals the number of rows.")
    truncated: bool = Field(description="True when a server bound, not the query, ended the rows.")
    truncated_reason: Literal["max_rows", "max_result_bytes"] | None = Field(
        default=None,
        description=(
            "Which bound ended the rows: max_rows, or max_result_bytes (the server's bound on "
            "the bytes of row text per call); null when nothing was cut."
        ),
    )

    @model_validator(mode="after")
    def _counts_agree(self) -> Self:
        if self.row_count != len(self.rows):
            raise ValueError("row_count must equal the number of rows")
        if any(len(row) != len(self.columns) for row in self.rows):
            raise ValueError("every row must have one value per column")
        if self.truncated != (self.truncated_reason is not None):
            raise ValueError("truncated_reason must be set exactly when truncated is true")
        return self


# The tables of one `sql_schema` answer: enough for any schema a model can take in at once;
# a larger one is listed in part (`truncated`), and `table` describes any one of them.
MAX_SCHEMA_TABLES: Final = 200
# PostgreSQL's identifiers are at most 63 bytes; a qualified name is two and a dot.
_MAX_NAME_CHARS: Final = 130
# Comments are cut to this many characters: a sentence or two is what a model needs.
MAX_COMMENT_CHARS: Final = 500
_Name = Annotated[str, Field(max_length=_MAX_NAME_CHARS)]
_Comment = Annotated[str, Field(max_length=MAX_COMMENT_CHARS)]


class SQLSchemaParams(ToolArguments):
    """Arguments of `sql_schema`."""

    table: str | None = Field(
        default=None,
        min_length=1,
        max_length=_MAX_NAME_CHARS,
        description=(
            "One table or view to describe, as name or schema.name (names as PostgreSQL "
            f"stores them, usually lower case), 1 to {_MAX_NAME_CHARS} characters; null lists "
            "every table and view."
        ),
    )
    after: str | None = Field(
        default=None,
        min_length=1,
        max_length=_MAX_NAME_CHARS,
        description=(
            "Continue a listing after this table: the next_after (schema.name) of an answer "
            f"whose truncated is true, 1 to {_MAX_NAME_CHARS} characters; null lists from the "
            "first table. Not together with table."
        ),
    )


class SQLColumn(StrictModel):
    """One column of a table or view."""

    name: _Name
    type: Annotated[str, Field(max_length=200)] = Field(
        description="The SQL type, as format_type() spells it."
    )
    nullable: bool
    comment: _Comment | None = None


class SQLForeignKey(StrictModel):
    """A foreign key: these columns reference those of another table."""

    columns: list[_Name] = Field(max_length=32)
    references_schema: _Name
    references_table: _Name
    references_columns: list[_Name] = Field(max_length=32)


class SQLTable(StrictModel):
    """A table or view of an allowed schema."""

    schema_name: _Name = Field(description="The schema that holds it.")
    name: _Name
    kind: Literal["table", "view", "materialized view", "foreign table", "partitioned table"]
    comment: _Comment | None = None
    comments_omitted: bool = Field(
        default=False,
        description=(
            "True when the comments of the table and its columns were left out: with them, "
            "its description alone was larger than one answer may be."
        ),
    )
    columns: list[SQLColumn] = Field(max_length=MAX_COLUMNS)
    primary_key: list[_Name] = Field(max_length=32)
    foreign_keys: list[SQLForeignKey] = Field(max_length=256)


class SQLSchemaResult(StrictModel):
    """Result of `sql_schema`."""

    schemas: list[_Name] = Field(
        max_length=64, description="The schemas searched, in order (MCP_SQL_SCHEMAS)."
    )
    tables: list[SQLTable] = Field(max_length=MAX_SCHEMA_TABLES)
    truncated: bool = Field(
        description=(
            "True when more tables follow than one answer lists; pass next_after as after "
            "to list them."
        )
    )
    next_after: _Name | None = Field(
        default=None,
        description=(
            "When truncated is true, the value of after that continues the listing (the "
            "last table listed, as schema.name); null when the listing is complete."
        ),
    )
