"""Issue 19, item 2: every allowed function class is bounded by the statement timeout.

Each case runs an allowed function class with input chosen to make it slow (backtracking
patterns, quadratic matches, large documents), as the superuser, under a statement timeout
of `TIMEOUT_MS`: the backend must give the call back within the timeout plus `SLACK_S`,
done or cancelled. The controls are what `functions.UNINTERRUPTIBLE` refuses: the same
measurement shows each running far past the timeout, which is why they are refused (and
shows this test can tell the two apart on the machine it runs on).
"""

import time
from typing import Final

import psycopg
import pytest

from mcp_server_suite.tools.sql.functions import UNINTERRUPTIBLE, UNINTERRUPTIBLE_OVERLOADS
from mcp_server_suite.tools.sql.policy import FunctionPolicy
from mcp_server_suite.tools.sql.tool import check_untrusted_sql
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.postgres

# The statement timeout the cases run under.
TIMEOUT_MS: Final = 200
# How much later than the timeout a backend may give the call back: the time to notice the
# cancel and unwind, with room for a loaded machine (2 cores shared by many processes).
SLACK_S: Final = 2.5
# The controls run under a longer timeout, so that building their input (which checks for
# interrupts) ends before it even on a loaded machine; each must then run at least
# `CONTROL_MIN_S` to show that it ignores the cancel.
CONTROL_TIMEOUT_MS: Final = 1_000
CONTROL_MIN_S: Final = 4.0

# Allowed classes, each with input that makes it slow.
BOUNDED: Final = {
    "regex, nested quantifiers": "SELECT repeat('a', 30000) ~ '(a+)+b'",
    "regex, alternation": "SELECT regexp_matches(repeat('ab', 20000), '(a|b|ab)*c', 'g')",
    "regex replace": "SELECT length(regexp_replace(repeat('a', 3000000), 'a', 'bb', 'g'))",
    "LIKE, many wildcards": "SELECT repeat('a', 300000) LIKE repeat('%a', 100) || 'b'",
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
    "translate, long set": "SELECT length(translate(repeat('a', 20000000), "
    "repeat('b', 5000) || 'a', 'x'))",
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

# What UNINTERRUPTIBLE refuses, with input sized to run for seconds without a timeout.
CONTROLS: Final = {
    "strpos": "SELECT strpos(repeat('a', 3000000), 'b' || repeat('a', 2000))",
    "string_to_array": "SELECT string_to_array(repeat('a', 3000000), 'b' || repeat('a', 2000))",
    "ltrim": "SELECT length(ltrim(repeat('a', 150000), repeat('b', 3000) || 'a'))",
    "jsonb_contains": "SELECT (SELECT jsonb_agg(g) FROM generate_series(1, 15000) AS g) @> "
    "(SELECT jsonb_agg(g) FROM generate_series(15000, 1, -1) AS g)",
    "arrayoverlap": "SELECT (SELECT array_agg(g) FROM generate_series(1, 20000) AS g) && "
    "(SELECT array_agg(-g) FROM generate_series(1, 20000) AS g)",
}


def _elapsed(server: PostgresServer, text: str, timeout_ms: int = TIMEOUT_MS) -> tuple[float, str]:
    # Seconds until the backend gave the call back, and how it ended.
    with server.connect() as conn:
        conn.execute(f"SET statement_timeout = {timeout_ms}")
        started = time.monotonic()
        try:
            conn.execute(text)
            outcome = "done"
        except psycopg.errors.QueryCanceled:
            outcome = "cancelled"
        except psycopg.Error as exc:
            outcome = f"error {exc.sqlstate}"
        return time.monotonic() - started, outcome


@pytest.mark.parametrize("case", sorted(BOUNDED))
def test_allowed_functions_are_bounded_by_the_statement_timeout(
    postgres_server: PostgresServer, case: str
) -> None:
    text = BOUNDED[case]
    # The case is one the policy lets through: the class is allowed.
    check_untrusted_sql(text, functions=FunctionPolicy(), schemas=("public",))
    elapsed, outcome = _elapsed(postgres_server, text)
    assert outcome in ("done", "cancelled"), (case, outcome)
    assert elapsed < TIMEOUT_MS / 1000 + SLACK_S, (case, elapsed, outcome)


@pytest.mark.parametrize("case", sorted(CONTROLS))
def test_refused_functions_run_past_the_statement_timeout(
    postgres_server: PostgresServer, case: str
) -> None:
    assert case in UNINTERRUPTIBLE or case in UNINTERRUPTIBLE_OVERLOADS
    elapsed, outcome = _elapsed(postgres_server, CONTROLS[case], CONTROL_TIMEOUT_MS)
    assert elapsed > CONTROL_MIN_S, (case, elapsed, outcome)


def test_xpath_runs_past_the_statement_timeout_where_the_server_has_libxml(
    postgres_server: PostgresServer,
) -> None:
    # The measurement: three nested predicates over 1,000 elements, as n^3.
    document = "<r>" + "<a/>" * 800 + "</r>"
    text = (
        f"SELECT xpath('count(//a[count(following::a[count(preceding::a) > 0]) > 0])', "
        f"'{document}'::xml)"
    )
    elapsed, outcome = _elapsed(postgres_server, text, CONTROL_TIMEOUT_MS)
    if outcome == "error 0A000":
        # Built without libxml (PyPI's PostgreSQL 18): XML functions fail at once.
        assert elapsed < CONTROL_TIMEOUT_MS / 1000 + SLACK_S
    else:
        assert elapsed > CONTROL_MIN_S, (elapsed, outcome)
