"""The naive comparison server for `bench_sql.py`: the MCP SDK's `MCPServer` with one SQL tool.

`run_sql(query)` runs the caller's text the way a quick SDK server would: on one psycopg
connection, `execute` then `fetchall`, and returns the rows. It has none of the controls of
`read_only_sql` (no policy, no read-only transaction, no row cap, no value normalisation); it
exists only to measure what the SDK's own server machinery costs per call.

Run it as `python benchmarks/sdk_sql_server.py` with `BENCH_DSN` set; it speaks MCP over stdio.
"""

import os
from typing import Any

import psycopg
from mcp.server import MCPServer

__all__ = ["run_sql", "server"]

server: MCPServer = MCPServer("sdk-sql-bench", log_level="WARNING")

_connection = psycopg.connect(os.environ["BENCH_DSN"], autocommit=True)


@server.tool()
def run_sql(query: str) -> dict[str, Any]:
    """Run a SQL query and return its rows.

    Args:
        query: The SQL text.

    Returns:
        The column names and the rows.
    """
    cursor = _connection.execute(query)
    columns = [column.name for column in cursor.description or ()]
    return {"columns": columns, "rows": [list(row) for row in cursor.fetchall()]}


if __name__ == "__main__":
    server.run()
