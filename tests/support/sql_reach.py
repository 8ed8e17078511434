"""Every function a `read_only_sql` query can make PostgreSQL run, read from the catalog.

The interrupt review (`tests/vectors/sql_interrupts.toml`) and its measuring harness
(`scripts/measure-sql-interrupts.py`) both start from this list, so that what was reviewed
is what the policy lets a caller reach on the server at hand, not a sample of it.

Rules:

1. A function is reachable when the policy lets a query call it by name on the server's
   major (`code_catalog.builtin_function_names`: the reviewed names, the functions behind
   the operators, the support functions), every overload of each name; and the functions
   refused for the statement timeout alone (`functions.UNINTERRUPTIBLE`,
   `UNINTERRUPTIBLE_OVERLOADS`) are listed too, marked refused, so that the review keeps
   the reasons for refusing them.
2. PostgreSQL also runs code that no query names, for what a query does. Each such route is
   listed with the functions it reaches: a built-in type's input function (a constant or a
   cast from text; `xml`'s never runs on the caller's text, `code_catalog.NO_INPUT_TYPES`)
   and output function (every result is rendered as text), its type-modifier functions and
   subscripting handler; the support functions of an allowed aggregate; the comparison and
   hash functions of the built-in btree and hash operator families (ORDER BY, GROUP BY,
   DISTINCT, joins, set operations); the selectivity estimators of allowed operators and
   the planner support functions of allowed functions (planning, and plain EXPLAIN, run
   them on the query's constants); the functions a reachable SQL-language function's body
   calls; and the text search parsers and dictionary templates that `to_tsvector` and its
   relatives call.
3. A row is one function (one overload), with its C symbol (`pg_proc.prosrc`) for the C
   functions, or `sql:` and its signature for a SQL-language one: the review is kept by
   that key, since overloads share one C function.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import psycopg

from mcp_server_suite.tools.sql.code_catalog import NO_INPUT_TYPES
from mcp_server_suite.tools.sql.functions import (
    DENIED_FUNCTION_PREFIXES,
    DENIED_FUNCTIONS,
    SUPPORT_FUNCTIONS,
    UNINTERRUPTIBLE,
    UNINTERRUPTIBLE_OVERLOADS,
    callable_functions,
    denial_reason,
)
from mcp_server_suite.tools.sql.operator_functions import OPERATOR_FUNCTIONS

__all__ = ["REACH_SQL", "Reachable", "reachable_functions", "reachable_names", "review_key"]

# The routes of Rules 1 and 2, by function object id. %(names)s: Rule 1's names; %(noinput)s:
# the types whose input function never runs on the caller's text.
REACH_SQL: Final = """
WITH named AS (
  SELECT p.oid FROM pg_catalog.pg_proc AS p
  WHERE p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace
    AND p.proname = ANY (%(names)s::pg_catalog.text[])
), routes AS (
  SELECT oid, 'call' AS route FROM named
  UNION SELECT o.oprcode, 'operator' FROM pg_catalog.pg_operator AS o
    JOIN named AS n ON n.oid = o.oprcode
  UNION SELECT c.castfunc, 'cast' FROM pg_catalog.pg_cast AS c
    WHERE c.castfunc IN (SELECT oid FROM named)
  UNION SELECT f, 'aggregate' FROM pg_catalog.pg_aggregate AS a JOIN named AS n
    ON n.oid = a.aggfnoid, pg_catalog.unnest(ARRAY[a.aggtransfn, a.aggfinalfn,
    a.aggcombinefn, a.aggserialfn, a.aggdeserialfn, a.aggmtransfn, a.aggminvtransfn,
    a.aggmfinalfn]::pg_catalog.oid[]) AS f
  UNION SELECT t.typinput, 'input' FROM pg_catalog.pg_type AS t
    WHERE t.oid < 16384 AND t.typtype <> 'p'
      AND NOT t.oid = ANY (%(noinput)s::pg_catalog.oid[])
  UNION SELECT t.typoutput, 'output' FROM pg_catalog.pg_type AS t WHERE t.oid < 16384
  UNION SELECT t.typmodin, 'typmod' FROM pg_catalog.pg_type AS t WHERE t.oid < 16384
  UNION SELECT t.typmodout, 'typmod' FROM pg_catalog.pg_type AS t WHERE t.oid < 16384
  UNION SELECT t.typsubscript, 'subscript' FROM pg_catalog.pg_type AS t WHERE t.oid < 16384
  UNION SELECT ap.amproc, 'sort' FROM pg_catalog.pg_amproc AS ap
    JOIN pg_catalog.pg_opfamily AS f ON f.oid = ap.amprocfamily
    JOIN pg_catalog.pg_am AS m ON m.oid = f.opfmethod
    WHERE m.amname IN ('btree', 'hash')
      AND ap.amproc < 16384
  UNION SELECT o.oprrest::pg_catalog.oid, 'planner' FROM pg_catalog.pg_operator AS o
    JOIN named AS n ON n.oid = o.oprcode
  UNION SELECT o.oprjoin::pg_catalog.oid, 'planner' FROM pg_catalog.pg_operator AS o
    JOIN named AS n ON n.oid = o.oprcode
  UNION SELECT p.prosupport::pg_catalog.oid, 'planner' FROM pg_catalog.pg_proc AS p
    JOIN named USING (oid)
  UNION SELECT u.f, 'text-search' FROM pg_catalog.pg_ts_parser AS s,
    pg_catalog.unnest(ARRAY[s.prsstart, s.prstoken, s.prsend, s.prsheadline,
    s.prslextype]::pg_catalog.oid[]) AS u(f)
  UNION SELECT u.f, 'text-search' FROM pg_catalog.pg_ts_template AS s,
    pg_catalog.unnest(ARRAY[s.tmplinit, s.tmpllexize]::pg_catalog.oid[]) AS u(f)
), bodies AS (
  SELECT d.refobjid AS oid FROM pg_catalog.pg_depend AS d
  JOIN routes AS r ON r.oid = d.objid
  JOIN pg_catalog.pg_proc AS p ON p.oid = r.oid
  JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang
  WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
    AND d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
    AND l.lanname = 'sql'
  UNION SELECT o.oprcode FROM pg_catalog.pg_depend AS d
  JOIN routes AS r ON r.oid = d.objid
  JOIN pg_catalog.pg_operator AS o ON o.oid = d.refobjid
  WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
    AND d.refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass
), everything AS (
  SELECT oid, route FROM routes WHERE oid <> 0
  UNION SELECT oid, 'sql-body' FROM bodies
)
SELECT p.oid::pg_catalog.int8, p.proname::pg_catalog.text,
  pg_catalog.pg_get_function_identity_arguments(p.oid),
  ARRAY(SELECT t::pg_catalog.regtype::pg_catalog.text
        FROM pg_catalog.unnest(p.proargtypes::pg_catalog.oid[]) WITH ORDINALITY AS a(t, i)
        ORDER BY i),
  p.prorettype::pg_catalog.regtype::pg_catalog.text, p.proretset, p.prokind::pg_catalog.text,
  l.lanname::pg_catalog.text, p.prosrc,
  pg_catalog.array_agg(DISTINCT e.route ORDER BY e.route)
FROM everything AS e
JOIN pg_catalog.pg_proc AS p ON p.oid = e.oid
JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang
GROUP BY p.oid, l.lanname
ORDER BY p.prosrc, p.oid
"""


@dataclass(frozen=True, slots=True)
class Reachable:
    """One function a query can make PostgreSQL run.

    Attributes:
        oid: Its object id.
        name: Its name.
        arguments: Its identity arguments, as `pg_get_function_identity_arguments` writes
            them.
        argument_types: Its argument types, as `regtype` writes them.
        result: Its result type.
        returns_set: Whether it returns a set.
        kind: `f` function, `a` aggregate, `w` window function.
        language: `internal` (C), `sql`, ...
        source: `pg_proc.prosrc`: the C symbol of an internal function.
        routes: How a query reaches it (Rule 2's names).
        allowed: Whether the policy lets a query call it by name today (False for what is
            refused for the statement timeout).
    """

    oid: int
    name: str
    arguments: str
    argument_types: tuple[str, ...]
    result: str
    returns_set: bool
    kind: str
    language: str
    source: str
    routes: tuple[str, ...]
    allowed: bool

    @property
    def key(self) -> str:
        """The review's key for it (Rule 3)."""
        return review_key(self.language, self.source, self.name, self.arguments)

    @property
    def signature(self) -> str:
        """Its name and identity arguments."""
        return f"{self.name}({self.arguments})"


def review_key(language: str, source: str, name: str, arguments: str) -> str:
    """Return the key the review keeps a function by (Rule 3).

    Args:
        language: Its language's name.
        source: Its `prosrc`.
        name: Its name.
        arguments: Its identity arguments.
    """
    if language == "internal":
        return source
    return f"sql:{name}({arguments})"


def reachable_names(major: int) -> frozenset[str]:
    """Return Rule 1's names on one major, refused ones for the statement timeout included.

    Args:
        major: The server's major version.
    """
    names = callable_functions(major) | OPERATOR_FUNCTIONS | SUPPORT_FUNCTIONS
    names = frozenset(
        name
        for name in names
        if name not in DENIED_FUNCTIONS
        and not any(name.startswith(prefix) for prefix in DENIED_FUNCTION_PREFIXES)
    )
    return names | frozenset(UNINTERRUPTIBLE) | frozenset(UNINTERRUPTIBLE_OVERLOADS)


def _allowed(name: str, argument_count: int, routes: Iterable[str]) -> bool:
    # Whether the policy allows a call of it by name (the route that refusals act on); a
    # function reached only by another route runs whatever its name.
    if not {"call", "operator", "cast"} & set(routes):
        return True
    if denial_reason(name) is not None:
        return False
    overload = UNINTERRUPTIBLE_OVERLOADS.get(name)
    return overload is None or overload[0] != argument_count


def reachable_functions(conn: psycopg.Connection[Any], major: int) -> list[Reachable]:
    """Return every function a query can make the connected server run (Rules 1 and 2).

    Args:
        conn: A connection to the server (any role that can read pg_catalog).
        major: The server's major version.

    Returns:
        One row per function, ordered by C symbol.
    """
    rows = conn.execute(
        REACH_SQL, {"names": sorted(reachable_names(major)), "noinput": sorted(NO_INPUT_TYPES)}
    ).fetchall()
    found = []
    for oid, name, arguments, types, result, retset, kind, language, source, routes in rows:
        found.append(
            Reachable(
                oid=int(oid),
                name=str(name),
                arguments=str(arguments),
                argument_types=tuple(str(t) for t in types),
                result=str(result),
                returns_set=bool(retset),
                kind=str(kind),
                language=str(language),
                source=str(source),
                routes=tuple(str(r) for r in routes),
                allowed=_allowed(str(name), len(types), routes),
            )
        )
    return found
