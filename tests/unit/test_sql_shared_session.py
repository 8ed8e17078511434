"""A session a transaction pooler shares is found when a new connection is set up.

Behind a pooler in transaction mode, every client's statements land on whichever server
session is free. The first client to connect prepares the session's guard there; a
connection set up later (here, another tool's, through the same pooler) finds it prepared
already, and the call it waited for is refused in-band with the pooling advice. The
overlapping calls of test_sql_deployments.py meet the sharing at whichever step the race
puts it; this test puts it at the set-up, every time.
"""

import asyncio
import shutil

import pytest

from mcp_server_suite.config import SecretStr
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.sql import ReadOnlySQLParams
from mcp_server_suite.tools.sql.conditions import POOLING_ADVICE
from mcp_server_suite.tools.sql.tool import SQLTool
from tests.support.postgres import READER_ROLE, PostgresServer, reader_settings
from tests.support.txpool import TransactionPooler

pytestmark = pytest.mark.postgres


def test_a_session_prepared_by_another_client_is_refused_at_set_up(
    postgres_server: PostgresServer,
) -> None:
    pooler = TransactionPooler(postgres_server.socket_dir, READER_ROLE, "app").start()
    settings = reader_settings(
        postgres_server, sql_dsn=SecretStr(pooler.dsn()), sql_pool_max_size=1
    )

    async def call() -> object:
        tool = SQLTool(settings)
        try:
            return (await tool.run(ReadOnlySQLParams(query="SELECT 1"))).rows
        except ToolFailure as failure:
            return failure
        finally:
            await tool.aclose()

    try:
        first = asyncio.run(call())
        second = asyncio.run(call())
    finally:
        pooler.stop()
        shutil.rmtree(pooler.socket_dir, ignore_errors=True)
    # The first client had the shared session to itself.
    assert first == [[1]]
    assert isinstance(second, ToolFailure)
    assert POOLING_ADVICE in second.problem.detail
    assert second.problem.metadata["cause"] == "configuration"
