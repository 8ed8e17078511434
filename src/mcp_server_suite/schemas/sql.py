"""Contracts of `read_only_sql`.

These models import nothing from the SQL stack (sqlglot, psycopg), so `tools/list` can
describe the tool without loading it.
"""

from typing import Final, Self

from pydantic import Field, JsonValue, field_validator, model_validator

from mcp_server_suite.schemas.base import StrictModel

__all__ = [
    "DEFAULT_MAX_ROWS",
    "MAX_QUERY_CHARS",
    "MIN_QUERY_CHARS",
    "ReadOnlySQLParams",
    "ReadOnlySQLResult",
]

# The design document's argument bounds. Six characters is the shortest useful statement
# ("SELECT"); 10,000 bounds the parser's work on one call.
MIN_QUERY_CHARS: Final = 6
MAX_QUERY_CHARS: Final = 10_000
# The design document's row cap: results carry at most 50 rows, and 50 is the default.
DEFAULT_MAX_ROWS: Final = 50
# PostgreSQL's own limit on the columns of a result (MaxTupleAttributeNumber).
MAX_COLUMNS: Final = 1664


class ReadOnlySQLParams(StrictModel):
    """Arguments of `read_only_sql`."""

    query: str = Field(
        min_length=MIN_QUERY_CHARS,
        max_length=MAX_QUERY_CHARS,
        description=(
            "One PostgreSQL SELECT (or UNION, INTERSECT, EXCEPT of SELECTs), without bind "
            "parameters; no NUL characters."
        ),
    )
    max_rows: int = Field(
        default=DEFAULT_MAX_ROWS,
        ge=1,
        le=DEFAULT_MAX_ROWS,
        description="The most rows to return; the query's own LIMIT applies when smaller.",
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
    truncated: bool = Field(
        description="True when the server's row cap, not the query, bounded the rows."
    )

    @model_validator(mode="after")
    def _counts_agree(self) -> Self:
        if self.row_count != len(self.rows):
            raise ValueError("row_count must equal the number of rows")
        if any(len(row) != len(self.columns) for row in self.rows):
            raise ValueError("every row must have one value per column")
        return self
