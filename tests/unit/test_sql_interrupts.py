"""Issue 19, item 2: every function a query can reach is bounded by the statement timeout, or
refused by the policy.

The review lives in `tests/vectors/sql_interrupts.toml` (per C symbol: its verdict and how
it was checked). The tests hold it to the code and to the server:

1. It is in step: every function the connected server lets a query reach
   (`tests/support/sql_reach.py`) has a verdict; what it refuses is what
   `functions.UNINTERRUPTIBLE` and `UNINTERRUPTIBLE_OVERLOADS` refuse, and nothing else.
2. Every refused name is refused by the policy (`check_untrusted_sql`), and every refused
   operator by the tool on the server, before anything runs.
3. Measurements, on a throwaway cluster of this module's own (a control's backend is killed
   with SIGKILL, which restarts every backend of the cluster): each allowed class, given
   input chosen to make it slow, gives the call back within the timeout plus `SLACK_S`;
   each control (a refused function, given input that makes it run for minutes) is still
   running `SLACK_S` after its timeout, which shows it ignores the cancel, and is then
   killed. Nothing here needs a fixed total running time, and no call can hang the test.
"""

import contextlib
import os
import signal
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import psycopg
import pytest

from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.tools.sql.functions import UNINTERRUPTIBLE, UNINTERRUPTIBLE_OVERLOADS
from mcp_server_suite.tools.sql.policy import FunctionPolicy
from mcp_server_suite.tools.sql.tool import check_untrusted_sql
from tests.support.postgres import PostgresServer, reader_settings, throwaway_postgres
from tests.support.sql_reach import reachable_functions
from tests.unit.test_sql_tool import query_failure

pytestmark = pytest.mark.postgres

REVIEW: Final = tomllib.loads(
    (Path(__file__).resolve().parents[1] / "vectors" / "sql_interrupts.toml").read_text("utf-8")
)
REFUSED: Final[dict[str, dict[str, Any]]] = REVIEW["refused"]
BOUNDED: Final[dict[str, str]] = REVIEW["bounded"]

# The statement timeout the allowed classes run under.
TIMEOUT_MS: Final = 200
# How much later than its timeout a backend that heeds the cancel gives the call back: the
# time to notice it and unwind, with room for a loaded machine (2 cores shared by many
# processes). A control still running this long after its timeout ignores the cancel.
SLACK_S: Final = 3.0
# The controls' timeout: longer than building their input takes (which checks for
# interrupts) even with every control building at once on a loaded machine, so that the
# timeout meets the refused function's own work.
CONTROL_TIMEOUT_MS: Final = 3_000
# How long a cluster restarting after a killed backend may take to accept connections.
RECOVERY_S: Final = 60.0

# Allowed classes, each with input that makes it slow.
SLOW_ALLOWED: Final = {
    "regex, nested quantifiers": "SELECT repeat('a', 30000) ~ '(a+)+b'",
    "regex, alternation": "SELECT regexp_matches(repeat('ab', 20000), '(a|b|ab)*c', 'g')",
    "regex replace": "SELECT length(regexp_replace(repeat('a', 3000000), 'a', 'bb', 'g'))",
    "SIMILAR TO": "SELECT repeat('a', 30000) SIMILAR TO '(a|aa)*b'",
    "jsonpath, nested filter": "SELECT jsonb_path_query_array((SELECT jsonb_agg(g) FROM "
    "generate_series(1, 5000) AS g), '$[*] ? (@ > $[*])')",
    "jsonpath, like_regex": "SELECT jsonb_path_exists(to_jsonb(repeat('a', 30000)), "
    "'$ ? (@ like_regex \"(a+)+b\")')",
    "text search, parse": "SELECT length(to_tsvector(repeat('alpha beta ', 600000)))",
    "text search, headline": "SELECT length(ts_headline(repeat('alpha beta ', 300000), "
    "to_tsquery('alpha & beta')))",
    "text search, phrase": "SELECT to_tsvector(repeat('alpha beta ', 300000)) @@ "
    "to_tsquery('alpha <-> beta <-> gamma')",
    "text search, rank": "SELECT ts_rank_cd(to_tsvector(repeat('alpha beta ', 300000)), "
    "to_tsquery('alpha | beta'))",
    "geometry, polygon containment": "SELECT polygon(30000, circle '((0,0),1)') @> "
    "polygon(30000, circle '((0,0),0.5)')",
    "string building": "SELECT length(string_agg(md5(g::text), '')) "
    "FROM generate_series(1, 100000000) AS g",
    "repeat": "SELECT length(repeat('ab', 400000000))",
    "series": "SELECT count(*) FROM generate_series(1, 10000000000) AS g",
    "sorting": "SELECT (array_agg(g ORDER BY -g))[1] FROM generate_series(1, 100000000) AS g",
    "unnest": "SELECT count(*) FROM unnest((SELECT array_agg(g) FROM "
    "generate_series(1, 30000000) AS g))",
}

# Refused functions, by C symbol, with input that makes each run for minutes: a needle that
# defeats the substring search, a set scanned for every character, arrays and jsonb
# compared pair by pair. Each is killed once it has shown that it ignores the cancel.
CONTROLS: Final = {
    "textpos": "SELECT strpos(repeat('a', 20000000), 'b' || repeat('a', 5000))",
    "text_to_array": "SELECT string_to_array(repeat('a', 20000000), 'b' || repeat('a', 5000))",
    "ltrim": "SELECT length(ltrim(repeat('a', 5000000), repeat('b', 5000) || 'a'))",
    "translate": "SELECT length(translate(repeat('a', 20000000), repeat('b', 5000) || 'a', 'x'))",
    "jsonb_contains": "SELECT (SELECT j FROM inputs WHERE k = 'numbers') @> "
    "(SELECT j FROM inputs WHERE k = 'numbers-reversed')",
    "arrayoverlap": "SELECT (SELECT array_agg(g) FROM generate_series(1, 100000) AS g) && "
    "(SELECT array_agg(-g) FROM generate_series(1, 100000) AS g)",
    "array_position": "SELECT array_position((SELECT a FROM numerics WHERE k = 'many'), "
    "(SELECT n FROM numerics WHERE k = 'wide'))",
    "jsonb_exists_any": "SELECT (SELECT j FROM inputs WHERE k = 'strings') "
    "?| array_fill('absent'::text, ARRAY[100000])",
    "jsonb_exists_all": "SELECT (SELECT j FROM inputs WHERE k = 'strings') "
    "?& array_fill('200000'::text, ARRAY[100000])",
    "jsonb_delete_array": "SELECT length(((SELECT j FROM inputs WHERE k = 'strings') "
    "- array_fill('absent'::text, ARRAY[100000]))::text)",
    "path_inter": "SELECT path(polygon(200000, circle '((0,0),1)')) "
    "?# path(polygon(100000, circle '((0,0),0.5)'))",
    "path_distance": "SELECT path(polygon(200000, circle '((0,0),1)')) "
    "<-> path(polygon(100000, circle '((0,0),0.5)'))",
    "poly_distance": "SELECT polygon(200000, circle '((0,0),1)') "
    "<-> polygon(100000, circle '((0,0),0.5)')",
    "poly_overlap": "SELECT polygon(200000, circle '((0,0),1)') "
    "&& polygon(100000, circle '((0,0),0.5)')",
    "poly_same": "SELECT ('(' || repeat('(0,0),', 200000) || '(1,1))')::polygon "
    "~= ('(' || repeat('(0,0),', 200000) || '(2,2))')::polygon",
    "ts_rank_tt": "SELECT ts_rank((SELECT v FROM inputs WHERE k = 'positions'), "
    "(SELECT t FROM inputs WHERE k = 'terms')::tsquery)",
    "numeric_log": "SELECT log(('1.' || repeat('0', 16381) || '1')::numeric, 1.5)",
    "textlike": "SELECT repeat('a', 20000000) LIKE '%' || repeat('a', 5000) || 'b'",
    "texticlike": "SELECT repeat('a', 20000000) ILIKE '%' || repeat('a', 5000) || 'b'",
    # The measurement: three nested predicates over 1,000 elements, as n^3.
    "xpath": "SELECT xpath('count(//a[count(following::a[count(preceding::a) > 0]) > 0])', "
    "('<r>' || repeat('<a/>', 3000) || '</r>')::xml)",
}
# Core syntax the tool refuses (`array_comparison.py`), shown the same way beside the refused
# functions: the wide stored value is fetched again for each of a million elements.
SYNTAX_CONTROLS: Final = {
    "stored value = ANY (unbounded array)": "SELECT (SELECT n FROM numerics WHERE k = 'wide') "
    "= ANY((SELECT a FROM numerics WHERE k = 'many')::numeric[])",
}
# The controls' inputs that take a while to build, built before any control runs: jsonb
# (`j`), text (`t`) and a tsvector (`v`) in `inputs`; in `numerics`, a wide value stored out
# of line (array_position fetches it again for every element) and a million-element array.
CONTROL_INPUTS: Final = (
    "CREATE TABLE inputs (k text PRIMARY KEY, j jsonb, t text, v tsvector)",
    "INSERT INTO inputs (k, j) SELECT 'numbers', jsonb_agg(g) FROM generate_series(1, 60000) g",
    "INSERT INTO inputs (k, j) SELECT 'numbers-reversed', jsonb_agg(g ORDER BY g DESC) "
    "FROM generate_series(1, 60000) g",
    "INSERT INTO inputs (k, j) SELECT 'strings', jsonb_agg(g::text) "
    "FROM generate_series(1, 200000) g",
    "INSERT INTO inputs (k, v) SELECT 'positions', string_agg('w' || g || ':' || "
    "(SELECT string_agg(p::text, ',') FROM generate_series(1, 256) p), ' ')::tsvector "
    "FROM generate_series(1, 2000) g",
    "INSERT INTO inputs (k, t) SELECT 'terms', string_agg('w' || g, ' & ') "
    "FROM generate_series(1, 1024) g",
    "CREATE TABLE numerics (k text PRIMARY KEY, n numeric, a numeric[])",
    "ALTER TABLE numerics ALTER COLUMN n SET STORAGE EXTERNAL",
    "INSERT INTO numerics (k, n) SELECT 'wide', repeat('9', 131071)::numeric",
    "INSERT INTO numerics (k, a) SELECT 'many', array_agg(g::numeric) "
    "FROM generate_series(1, 1000000) g",
)
# Built without libxml (PyPI's PostgreSQL 18), XML functions fail at once with this state.
NO_LIBXML: Final = "error 0A000"

# Refused operators, each with a query that reaches the refused function only through it.
REFUSED_OPERATORS: Final = {
    "arraycontains": "SELECT ARRAY[1, 2] @> ARRAY[1]",
    "arraycontained": "SELECT ARRAY[1] <@ ARRAY[1, 2]",
    "arrayoverlap": "SELECT ARRAY[1, 2] && ARRAY[2]",
    "jsonb_contains": "SELECT '[1, 2]'::jsonb @> '[1]'",
    "jsonb_contained": "SELECT '[1]'::jsonb <@ '[1, 2]'",
    "jsonb_exists_any": "SELECT '[\"a\"]'::jsonb ?| ARRAY['a']",
    "jsonb_exists_all": "SELECT '[\"a\"]'::jsonb ?& ARRAY['a']",
    "jsonb_delete": "SELECT '{\"a\": 1}'::jsonb - 'a'",
    "jsonb_delete_array": "SELECT '{\"a\": 1}'::jsonb - ARRAY['a']",
    "jsonb_delete_idx": "SELECT '[1]'::jsonb - 0",
    "path_inter": "SELECT '[(0,0),(1,1)]'::path ?# '[(0,1),(1,0)]'::path",
    "path_distance": "SELECT '[(0,0),(1,1)]'::path <-> '[(0,1),(1,0)]'::path",
    "poly_distance": "SELECT '((0,0),(1,1),(1,0))'::polygon <-> '((5,5),(6,6),(6,5))'::polygon",
    "poly_overlap": "SELECT '((0,0),(1,1),(1,0))'::polygon && '((0,0),(1,1),(1,0))'::polygon",
    "poly_same": "SELECT '((0,0),(1,1),(1,0))'::polygon ~= '((0,0),(1,1),(1,0))'::polygon",
    "textlike": "SELECT 'abc' LIKE 'a%'",
    "textnlike": "SELECT 'abc' NOT LIKE 'a%'",
    "texticlike": "SELECT 'abc' ILIKE 'A%'",
    "texticnlike": "SELECT 'abc' NOT ILIKE 'A%'",
    "namelike": "SELECT 'abc'::name LIKE 'a%'",
    "bytealike": "SELECT 'abc'::bytea LIKE 'a%'::bytea",
}
# The name the tool's refusal gives for each operator's function.
OPERATOR_FUNCTION_NAME: Final = {
    "jsonb_delete_array": "jsonb_delete",
    "jsonb_delete_idx": "jsonb_delete",
}


class Call:
    """One query running on its own connection, in a thread, under a statement timeout."""

    def __init__(self, server: PostgresServer, text: str, timeout_ms: int) -> None:
        self.text = text
        self.ending = "still running"
        self.conn = server.connect()
        self.conn.execute(f"SET statement_timeout = {timeout_ms}")
        row = self.conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        self.pid = int(row[0])
        self.deadline = time.monotonic() + timeout_ms / 1000 + SLACK_S
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.conn.execute(self.text)
            ending = "done"
        except psycopg.errors.QueryCanceled:
            ending = "cancelled"
        except psycopg.Error as exc:
            ending = f"error {exc.sqlstate}"
        if self.ending == "still running":
            self.ending = ending

    def wait(self) -> bool:
        """Wait until the call's deadline; return whether it is still running then."""
        self.thread.join(max(0.0, self.deadline - time.monotonic()))
        running = self.thread.is_alive()
        if not running:
            self.conn.close()
        return running

    def kill(self) -> None:
        """Kill the call's backend (SIGKILL) and wait for the thread to see it."""
        self.ending = "killed"
        with contextlib.suppress(ProcessLookupError):
            # It may have ended since the deadline; then there is nothing to kill.
            os.kill(self.pid, signal.SIGKILL)
        self.thread.join(RECOVERY_S)
        self.conn.close()


def _wait_for_recovery(server: PostgresServer) -> None:
    # After a killed backend, the postmaster restarts every backend and replays the WAL.
    deadline = time.monotonic() + RECOVERY_S
    while True:
        try:
            with server.connect() as conn:
                conn.execute("SELECT 1")
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture(scope="module")
def measuring_server() -> Iterator[PostgresServer]:
    with throwaway_postgres(log_statements=False) as server:
        with server.connect() as conn:
            for statement in CONTROL_INPUTS:
                conn.execute(statement)
        yield server


def _major(server: PostgresServer) -> int:
    with server.connect() as conn:
        row = conn.execute("SELECT current_setting('server_version_num')::int").fetchone()
        return int(row[0]) // 10_000 if row else 0


# --- 1. The review is in step with the policy and the server ---------------------------------


def test_the_review_refuses_what_the_policy_refuses() -> None:
    by_name = {name for entry in REFUSED.values() for name in entry["names"]}
    overloads = {item for entry in REFUSED.values() for item in entry.get("overloads", {}).items()}
    assert by_name == set(UNINTERRUPTIBLE)
    assert overloads == {(name, count) for name, (count, _) in UNINTERRUPTIBLE_OVERLOADS.items()}
    assert not set(REFUSED) & set(BOUNDED)
    for symbol, entry in REFUSED.items():
        assert entry["names"] or entry.get("overloads"), symbol
        assert entry["source"], symbol
        assert entry["review"], symbol


def test_every_reachable_function_has_a_verdict(postgres_server: PostgresServer) -> None:
    with postgres_server.connect() as conn:
        reach = reachable_functions(conn, _major(postgres_server))
    missing = sorted({fn.key for fn in reach} - set(REFUSED) - set(BOUNDED))
    assert missing == [], "review these in tests/vectors/sql_interrupts.toml"
    for fn in reach:
        if fn.key in REFUSED and {"call", "operator", "cast"} & set(fn.routes):
            # A refused symbol's every named route is refused (an overload refused by its
            # number of arguments shares its C function with no allowed overload).
            assert not fn.allowed, (fn.key, fn.signature)


# --- 2. The policy refuses every refused name and operator -----------------------------------


def _refused_calls() -> Iterator[tuple[str, int]]:
    # Each refused name with one and with three arguments (a name refuses every overload),
    # and each refused overload with its number of arguments.
    for entry in REFUSED.values():
        for name in entry["names"]:
            yield name, 1
            yield name, 3
        yield from entry.get("overloads", {}).items()


@pytest.mark.parametrize(("name", "arguments"), sorted(set(_refused_calls())))
def test_the_policy_refuses_every_refused_function(name: str, arguments: int) -> None:
    # Qualified, since some names (position) are keywords with a syntax of their own.
    nulls = ", ".join(["NULL"] * arguments)
    text = f"SELECT pg_catalog.{name}({nulls})"
    with pytest.raises(ToolFailure) as caught:
        check_untrusted_sql(text, functions=FunctionPolicy(), schemas=("public",))
    assert caught.value.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert f"{name}() is not allowed" in caught.value.problem.detail
    assert "the statement timeout cannot stop it" in caught.value.problem.detail


@pytest.mark.parametrize(
    "text",
    [
        "SELECT ltrim('  a'), rtrim('a  '), btrim('  a  ')",
        "SELECT log(100.0), ln(2.0), log(100.0::float8)",
        "SELECT ts_rank_cd(to_tsvector('a b'), to_tsquery('a'))",
    ],
)
def test_the_overloads_left_allowed_pass_the_policy(text: str) -> None:
    check_untrusted_sql(text, functions=FunctionPolicy(), schemas=("public",))


@pytest.mark.parametrize("symbol", sorted(REFUSED_OPERATORS))
def test_the_tool_refuses_every_refused_operator(
    postgres_server: PostgresServer, symbol: str
) -> None:
    assert symbol in REFUSED
    failure = query_failure(reader_settings(postgres_server), REFUSED_OPERATORS[symbol])
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert OPERATOR_FUNCTION_NAME.get(symbol, symbol) in failure.problem.detail


# --- 3. Measurements ------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(SLOW_ALLOWED))
def test_allowed_functions_are_bounded_by_the_statement_timeout(
    measuring_server: PostgresServer, case: str
) -> None:
    text = SLOW_ALLOWED[case]
    # The case is one the policy lets through: the class is allowed.
    check_untrusted_sql(text, functions=FunctionPolicy(), schemas=("public",))
    call = Call(measuring_server, text, TIMEOUT_MS)
    if call.wait():
        call.kill()
        _wait_for_recovery(measuring_server)
    assert call.ending in ("done", "cancelled"), (case, call.ending)


def test_refused_functions_ignore_the_statement_timeout(
    measuring_server: PostgresServer,
) -> None:
    for symbol in CONTROLS:
        assert symbol in REFUSED, symbol
    # Every control at once: one crash restart for all of them.
    calls = {
        symbol: Call(measuring_server, text, CONTROL_TIMEOUT_MS)
        for symbol, text in {**CONTROLS, **SYNTAX_CONTROLS}.items()
    }
    running = {symbol: call.wait() for symbol, call in calls.items()}
    for symbol, call in calls.items():
        if running[symbol]:
            call.kill()
    if any(running.values()):
        _wait_for_recovery(measuring_server)
    # What came back in time heeded the cancel (or ended): it is no control.
    came_back = {symbol: call.ending for symbol, call in calls.items() if not running[symbol]}
    if came_back.get("xpath") == NO_LIBXML:
        del came_back["xpath"]
    assert came_back == {}
