"""The reviewed function lists, held against the catalog of the running server's major.

Issue 19, item 7: the allowlist is the reviewed list of each supported major. On whatever
major the suite's server runs (15 and 18 in CI): every allowed name exists there, no allowed
name has a volatile overload unless it is a reviewed harmless one, and every function of
pg_catalog is accounted for: allowed, denied with a reason, support code no query names, a
monitoring internal, or left off the list with a reason (`functions.UNLISTED_FUNCTIONS`).
"""

from typing import Final

import pytest

from mcp_server_suite.tools.sql import functions
from mcp_server_suite.tools.sql.code_catalog import builtin_function_names
from mcp_server_suite.tools.sql.operator_functions import OPERATOR_FUNCTIONS
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.postgres

# Every pg_catalog function with the catalog roles it plays: support code that PostgreSQL
# calls for a type, an index, an aggregate, the planner or a trigger, never by a name a
# query writes (`scripts/sql-function-candidates.sql` leaves the same out).
_ROLES: Final = """
SELECT p.proname, p.provolatile, array_remove(ARRAY[
  CASE WHEN EXISTS (SELECT FROM pg_type t WHERE p.oid IN (t.typinput, t.typoutput,
    t.typreceive, t.typsend, t.typmodin, t.typmodout, t.typanalyze, t.typsubscript))
    THEN 'type' END,
  CASE WHEN EXISTS (SELECT FROM pg_aggregate a WHERE p.oid IN (a.aggtransfn, a.aggfinalfn,
    a.aggcombinefn, a.aggserialfn, a.aggdeserialfn, a.aggmtransfn, a.aggminvtransfn,
    a.aggmfinalfn)) THEN 'aggregate' END,
  CASE WHEN EXISTS (SELECT FROM pg_amproc a WHERE a.amproc = p.oid)
    OR EXISTS (SELECT FROM pg_am a WHERE a.amhandler = p.oid) THEN 'index' END,
  CASE WHEN EXISTS (SELECT FROM pg_operator o WHERE p.oid IN (o.oprrest, o.oprjoin))
    OR EXISTS (SELECT FROM pg_proc q WHERE q.prosupport = p.oid)
    OR EXISTS (SELECT FROM pg_range r WHERE p.oid IN (r.rngcanonical, r.rngsubdiff))
    THEN 'planner' END,
  CASE WHEN p.prorettype IN ('trigger'::regtype, 'event_trigger'::regtype,
    'internal'::regtype, 'language_handler'::regtype, 'fdw_handler'::regtype,
    'index_am_handler'::regtype, 'table_am_handler'::regtype, 'tsm_handler'::regtype)
    OR 'internal'::regtype = ANY (p.proargtypes) THEN 'internal' END
], NULL)
FROM pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace
"""


def _catalog(server: PostgresServer) -> tuple[int, dict[str, tuple[set[str], set[str]]]]:
    # The server's major, and (volatilities, roles) of every pg_catalog function name.
    with server.connect() as conn:
        row = conn.execute("SELECT current_setting('server_version_num')::int").fetchone()
        found: dict[str, tuple[set[str], set[str]]] = {}
        for name, volatility, roles in conn.execute(_ROLES).fetchall():
            kinds, played = found.setdefault(str(name), (set(), set()))
            kinds.add(str(volatility))
            played.update(str(role) for role in roles)
        return (int(row[0]) // 10_000 if row else 0), found


def test_every_allowed_name_exists_and_is_free_of_side_effects(
    postgres_server: PostgresServer,
) -> None:
    major, catalog = _catalog(postgres_server)
    callable_names = functions.callable_functions(major)
    assert not (callable_names | OPERATOR_FUNCTIONS | functions.SUPPORT_FUNCTIONS) - set(catalog)
    volatile = {name for name in callable_names if "v" in catalog[name][0]}
    assert volatile == functions.HARMLESS_VOLATILE & callable_names
    assert not {name for name in OPERATOR_FUNCTIONS if "v" in catalog[name][0]}
    # A later major's additions are absent from this major's list; its removals too.
    for since, added in functions.ADDED_FUNCTIONS.items():
        if since > major:
            assert not added & callable_names - functions.BUILTIN_FUNCTIONS
    for since, removed in functions.REMOVED_FUNCTIONS.items():
        if since <= major:
            assert not removed & set(catalog)
            assert not removed & callable_names


def test_every_function_of_the_catalog_is_accounted_for(postgres_server: PostgresServer) -> None:
    major, catalog = _catalog(postgres_server)
    allowed = builtin_function_names(major)
    unaccounted = sorted(
        name
        for name, (_, roles) in catalog.items()
        if name not in allowed
        and functions.denial_reason(name) is None
        and name not in functions.UNINTERRUPTIBLE_OVERLOADS
        and name not in functions.UNLISTED_FUNCTIONS
        and not name.startswith("pg_stat_get_")
        and not roles
    )
    assert unaccounted == [], (
        f"PostgreSQL {major} has functions nobody reviewed: allow each in functions.py, "
        "deny it, or list it in UNLISTED_FUNCTIONS with the reason"
    )
    # Every entry of the reasoned lists is a real name of some supported major.
    assert not set(functions.UNLISTED_FUNCTIONS) & allowed
