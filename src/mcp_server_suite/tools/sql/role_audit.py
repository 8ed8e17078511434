"""The third layer of `read_only_sql`: what the database role could run, audited.

Name resolution (`statement.py`, the pinned `search_path`) cannot see code that PostgreSQL
reaches without a name: an implicit cast on a user's type, a view or a row-level-security
policy whose stored definition calls a function, a domain's CHECK. For all of those,
PostgreSQL checks EXECUTE on the function for the role running the query (verified on
PostgreSQL 15 in `tests/unit/test_sql_role_audit.py`), so a role that may execute nothing
but trusted code cannot run planted code by any of those routes. This module checks that.

Rules:

1. Trusted code is what initdb created (object ids below 16384: `pg_catalog` and
   `information_schema`), the members of the extensions the operator names
   (`MCP_SQL_TRUSTED_EXTENSIONS`), and the schema-qualified functions of
   `MCP_SQL_ALLOWED_FUNCTIONS`.
2. A problem is any of: the role is a superuser; it is a member of a role that reads or
   writes server files, runs programs or signals other sessions; it may create objects in a
   schema it reads or resolves names in; it may execute a function that is not trusted; a
   type, range type or operator runs untrusted code that PostgreSQL calls without checking
   EXECUTE (type input and output, a range's `subtype_diff` and `canonical`, which the
   planner calls while estimating; operator estimators); a view, policy or constraint calls a
   built-in whose effect survives the rolled-back transaction (`ESCAPING_FUNCTIONS`) that the
   role may execute. PostgreSQL records no dependency on a built-in, so stored expressions
   are read as the node trees they are stored as (`:funcid <oid>`).
3. `AUDIT_SQL` lists every problem with the statement that fixes it; it runs when a pooled
   connection is set up and for `--check-config`. `guard_sql` is the same check as one
   statement that fails (division by zero, SQLSTATE 22012) when any problem exists: it runs
   in every call's read segment, in the same transaction and round trip as the query and
   just before it, so a failing check aborts the query. It skips its checks while nothing
   has committed in the cluster since it last passed; `UNCHANGED_GUARD` is that comparison
   alone, for a session that expects the cluster to be unchanged (`session.py`, Rule 4).
4. What remains is a race the check cannot close: a role that owns an object the query
   reaches, and that grants EXECUTE on new code in the microseconds between the guard and
   the query's planning. The least-privilege role's schemas must therefore hold only objects
   of trusted owners (README, "PostgreSQL least-privilege role").
"""

from dataclasses import dataclass
from typing import Final

from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MAX_DETAIL_CHARS, MCPErrorCode
from mcp_server_suite.tools.sql.functions import ESCAPING_FUNCTIONS

__all__ = [
    "CHECK_CONNECT_TIMEOUT_S",
    "DANGEROUS_ROLES",
    "FIRST_USER_OID",
    "GUARD_SQLSTATE",
    "UNCHANGED_GUARD",
    "RoleProblem",
    "TrustedCode",
    "audit_database",
    "audit_sql",
    "guard_sql",
    "refusal",
]

# PostgreSQL's FirstNormalObjectId: every object initdb creates has a smaller object id, and
# every object created afterwards (by any role, extensions included) a larger one.
FIRST_USER_OID: Final = 16384

# Predefined roles whose members act outside the transaction: they read or write server files,
# run programs on the server, or signal other sessions.
DANGEROUS_ROLES: Final = (
    "pg_read_server_files",
    "pg_write_server_files",
    "pg_execute_server_program",
    "pg_signal_backend",
)

# The SQLSTATE of the guard's refusal: division_by_zero, which no other part of the guard
# statement can raise.
GUARD_SQLSTATE: Final = "22012"

# `--check-config` waits this long at most for the database (libpq counts whole seconds).
CHECK_CONNECT_TIMEOUT_S: Final = 10
# Connection failures are reported by their first line, cut to this length.
_SHOWN_ERROR_CHARS: Final = 300

# How many problems a refusal names in its detail; `--check-config` lists them all.
_SHOWN_PROBLEMS: Final = 3


@dataclass(frozen=True, slots=True)
class TrustedCode:
    """What the operator trusts, and where the role reads and resolves names.

    Attributes:
        schemas: `MCP_SQL_SCHEMAS`.
        extensions: `MCP_SQL_TRUSTED_EXTENSIONS`.
        functions: The schema-qualified entries of `MCP_SQL_ALLOWED_FUNCTIONS`.
    """

    schemas: tuple[str, ...]
    extensions: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RoleProblem:
    """One thing the role could do that the boundary does not allow.

    Attributes:
        kind: `superuser`, `membership`, `create`, `execute`, `unchecked`, `stored` or
            `extension` (a trusted extension that is not installed; reported, not refused).
        subject: What is wrong, as a clause.
        fix: The statement (or step) that fixes it.
    """

    kind: str
    subject: str
    fix: str

    def line(self) -> str:
        """The problem as one line for an operator."""
        return f"{self.subject}; fix: {self.fix}"


def _text_array(items: tuple[str, ...] | frozenset[str]) -> str:
    # The items are validated identifiers (config.py), quoted here all the same.
    quoted = ", ".join("'" + item.replace("'", "''") + "'" for item in sorted(items))
    return f"ARRAY[{quoted}]::pg_catalog.text[]" if quoted else "'{}'::pg_catalog.text[]"


# Every problem of Rule 2, one row each: (kind, subject, fix). The fields are filled by
# `_problems_sql` with arrays of validated identifiers (config.py) and constants.
_PROBLEMS: Final = """
WITH me AS (
  SELECT r.oid, r.rolname, r.rolsuper FROM pg_catalog.pg_roles AS r
  WHERE r.rolname OPERATOR(pg_catalog.=) pg_catalog.current_user()
), trusted_extensions AS (
  SELECT e.oid, e.extnamespace FROM pg_catalog.pg_extension AS e
  WHERE e.extname OPERATOR(pg_catalog.=) ANY ({extensions})
), members AS (
  SELECT d.objid FROM pg_catalog.pg_depend AS d JOIN trusted_extensions AS e
    ON e.oid OPERATOR(pg_catalog.=) d.refobjid
  WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
    AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
    AND d.deptype OPERATOR(pg_catalog.=) 'e'
), untrusted AS (
  SELECT p.oid, p.proacl, p.proowner, pg_catalog.format('%I.%I(%s)', n.nspname, p.proname,
         pg_catalog.pg_get_function_identity_arguments(p.oid)) AS name
  FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS n
    ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
  WHERE p.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
    AND p.oid NOT IN (SELECT objid FROM members)
    AND NOT (pg_catalog.concat(n.nspname, '.', p.proname)
             OPERATOR(pg_catalog.=) ANY ({functions}))
)
SELECT 'superuser' AS kind, pg_catalog.format('the role %I is a superuser', me.rolname) AS subject,
       'connect as a least-privilege role (scripts/least-privilege-role.sql)' AS fix
FROM me WHERE me.rolsuper
UNION ALL
SELECT 'membership', pg_catalog.format('the role %I is a member of %I', me.rolname, g.rolname),
       pg_catalog.format('REVOKE %I FROM %I', g.rolname, me.rolname)
FROM me, pg_catalog.pg_roles AS g
WHERE g.rolname OPERATOR(pg_catalog.=) ANY ({roles})
  AND pg_catalog.pg_has_role(me.oid, g.oid, 'MEMBER')
UNION ALL
SELECT 'create',
       pg_catalog.format('the role %I may create objects in the schema %I', me.rolname, n.nspname),
       CASE WHEN n.nspowner OPERATOR(pg_catalog.=) me.oid
              THEN pg_catalog.format('ALTER SCHEMA %I OWNER TO another role', n.nspname)
            WHEN EXISTS (SELECT FROM pg_catalog.aclexplode(n.nspacl) AS a
                         WHERE a.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE')
              THEN pg_catalog.format('REVOKE CREATE ON SCHEMA %I FROM PUBLIC', n.nspname)
            ELSE pg_catalog.format('REVOKE CREATE ON SCHEMA %I FROM %I', n.nspname, me.rolname)
       END
FROM me, pg_catalog.pg_namespace AS n
WHERE (n.nspname OPERATOR(pg_catalog.=) ANY ({schemas})
       OR n.oid IN (SELECT extnamespace FROM trusted_extensions))
  AND n.nspname OPERATOR(pg_catalog.<>) 'pg_catalog'
  AND pg_catalog.has_schema_privilege(me.oid, n.oid, 'CREATE')
UNION ALL
SELECT 'execute',
       pg_catalog.format('the role %I may execute %s, which is neither built in nor part of a '
                         'trusted extension', me.rolname, u.name),
       CASE WHEN u.proowner OPERATOR(pg_catalog.=) me.oid
              THEN pg_catalog.format('ALTER FUNCTION %s OWNER TO another role', u.name)
            WHEN EXISTS (SELECT FROM pg_catalog.aclexplode(
                           COALESCE(u.proacl, pg_catalog.acldefault('f', u.proowner))) AS a
                         WHERE a.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE')
              THEN pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', u.name)
            ELSE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM %I', u.name, me.rolname)
       END
FROM me, untrusted AS u WHERE pg_catalog.has_function_privilege(me.oid, u.oid, 'EXECUTE')
UNION ALL
SELECT 'unchecked',
       pg_catalog.format('the type %s runs %s, which PostgreSQL calls without checking EXECUTE',
                         t.oid::pg_catalog.regtype, u.name),
       pg_catalog.format('DROP TYPE %s, or trust the extension that provides %s',
                         t.oid::pg_catalog.regtype, u.name)
FROM pg_catalog.pg_type AS t JOIN untrusted AS u
  ON u.oid IN (t.typinput, t.typoutput, t.typreceive, t.typsend, t.typmodin, t.typmodout)
WHERE t.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
UNION ALL
SELECT 'unchecked',
       pg_catalog.format('the range type %s runs %s, which the planner calls without checking '
                         'EXECUTE', r.rngtypid::pg_catalog.regtype, u.name),
       pg_catalog.format('DROP TYPE %s, or trust the extension that provides %s',
                         r.rngtypid::pg_catalog.regtype, u.name)
FROM pg_catalog.pg_range AS r JOIN untrusted AS u ON u.oid IN (r.rngcanonical, r.rngsubdiff)
UNION ALL
SELECT 'unchecked',
       pg_catalog.format('the operator %s runs %s, which the planner calls without checking '
                         'EXECUTE', o.oid::pg_catalog.regoperator, u.name),
       pg_catalog.format('DROP OPERATOR %s, or trust the extension that provides %s',
                         o.oid::pg_catalog.regoperator, u.name)
FROM pg_catalog.pg_operator AS o JOIN untrusted AS u ON u.oid IN (o.oprrest, o.oprjoin)
WHERE o.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
UNION ALL
SELECT 'stored',
       pg_catalog.format('%s calls pg_catalog.%I(%s), which acts outside the read-only transaction',
                         pg_catalog.pg_describe_object(x.classid, x.objid, 0), e.proname,
                         pg_catalog.pg_get_function_identity_arguments(e.oid)),
       pg_catalog.format('REVOKE EXECUTE ON FUNCTION pg_catalog.%I(%s) FROM PUBLIC '
                         '(scripts/least-privilege-role.sql -v revoke_public_execute=1)',
                         e.proname, pg_catalog.pg_get_function_identity_arguments(e.oid))
FROM me, pg_catalog.pg_proc AS e, (
  SELECT 'pg_catalog.pg_rewrite'::pg_catalog.regclass AS classid, r.oid AS objid,
         r.ev_action::pg_catalog.text AS body
  FROM pg_catalog.pg_rewrite AS r
  WHERE r.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
  UNION ALL
  SELECT 'pg_catalog.pg_policy'::pg_catalog.regclass, p.oid,
         pg_catalog.concat(p.polqual::pg_catalog.text, p.polwithcheck::pg_catalog.text)
  FROM pg_catalog.pg_policy AS p
  UNION ALL
  SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass, c.oid, c.conbin::pg_catalog.text
  FROM pg_catalog.pg_constraint AS c
  WHERE c.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
    AND c.contypid OPERATOR(pg_catalog.<>) 0::pg_catalog.oid
) AS x
WHERE e.proname OPERATOR(pg_catalog.=) ANY ({escaping})
  AND e.pronamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace
  AND pg_catalog.has_function_privilege(me.oid, e.oid, 'EXECUTE')
  AND pg_catalog.strpos(x.body, pg_catalog.concat(' :funcid ', e.oid, ' '))
      OPERATOR(pg_catalog.>) 0"""


def _problems_sql(trusted: TrustedCode) -> str:
    return _PROBLEMS.format(  # nosec B608  # Fixed text; the arrays are quoted constants.
        extensions=_text_array(trusted.extensions),
        functions=_text_array(trusted.functions),
        schemas=_text_array(trusted.schemas),
        roles=_text_array(DANGEROUS_ROLES),
        escaping=_text_array(frozenset(ESCAPING_FUNCTIONS)),
        first_user_oid=FIRST_USER_OID,
    )


def audit_sql(trusted: TrustedCode) -> str:
    """Return the query that lists every problem (Rule 3), with the trusted extensions missing.

    Args:
        trusted: What the operator trusts.

    Returns:
        A query whose rows are (kind, subject, fix), problems first.
    """
    missing = _MISSING_EXTENSIONS.format(extensions=_text_array(trusted.extensions))
    return _problems_sql(trusted) + missing  # nosec B608  # Fixed text and quoted constants.


# The trusted extensions that are not installed (reported by --check-config, never refused).
_MISSING_EXTENSIONS: Final = """
UNION ALL
SELECT 'extension', pg_catalog.format('the trusted extension %I is not installed', x),
       pg_catalog.format('CREATE EXTENSION %I, or remove it from MCP_SQL_TRUSTED_EXTENSIONS', x)
FROM pg_catalog.unnest({extensions}) AS x
WHERE x NOT IN (SELECT extname FROM pg_catalog.pg_extension)"""


# The guard: the same conditions as `_PROBLEMS`, as existence tests that name nothing, with
# the cheap filters first, so that a role without problems pays a few index scans per call.
_GUARD: Final = """SELECT pg_catalog.pg_current_snapshot()::pg_catalog.text,
CASE WHEN pg_catalog.pg_current_snapshot()::pg_catalog.text OPERATOR(pg_catalog.=) $1 THEN 1
ELSE 1 OPERATOR(pg_catalog./) (NOT EXISTS (
  SELECT FROM pg_catalog.pg_roles AS r
  WHERE r.rolname OPERATOR(pg_catalog.=) pg_catalog.current_user() AND r.rolsuper
  UNION ALL
  SELECT FROM pg_catalog.pg_roles AS g
  WHERE g.rolname OPERATOR(pg_catalog.=) ANY ({roles})
    AND pg_catalog.pg_has_role(pg_catalog.current_user(), g.oid, 'MEMBER')
  UNION ALL
  SELECT FROM pg_catalog.pg_namespace AS n
  WHERE (n.nspname OPERATOR(pg_catalog.=) ANY ({schemas})
         OR n.oid IN (SELECT e.extnamespace FROM pg_catalog.pg_extension AS e
                      WHERE e.extname OPERATOR(pg_catalog.=) ANY ({extensions})))
    AND n.nspname OPERATOR(pg_catalog.<>) 'pg_catalog'
    AND pg_catalog.has_schema_privilege(n.oid, 'CREATE')
  UNION ALL
  SELECT FROM pg_catalog.pg_proc AS p
  WHERE p.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
    AND (pg_catalog.has_function_privilege(p.oid, 'EXECUTE')
         OR p.oid IN (SELECT t.typinput FROM pg_catalog.pg_type AS t
                      WHERE t.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
                      UNION ALL SELECT t.typoutput FROM pg_catalog.pg_type AS t
                      WHERE t.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
                      UNION ALL SELECT t.typreceive FROM pg_catalog.pg_type AS t
                      WHERE t.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
                      UNION ALL SELECT t.typsend FROM pg_catalog.pg_type AS t
                      WHERE t.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
                      UNION ALL SELECT t.typmodin FROM pg_catalog.pg_type AS t
                      WHERE t.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
                      UNION ALL SELECT t.typmodout FROM pg_catalog.pg_type AS t
                      WHERE t.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
                      UNION ALL SELECT r.rngcanonical FROM pg_catalog.pg_range AS r
                      UNION ALL SELECT r.rngsubdiff FROM pg_catalog.pg_range AS r
                      UNION ALL SELECT o.oprrest FROM pg_catalog.pg_operator AS o
                      WHERE o.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
                      UNION ALL SELECT o.oprjoin FROM pg_catalog.pg_operator AS o
                      WHERE o.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid))
    AND NOT EXISTS (
      SELECT FROM pg_catalog.pg_depend AS d JOIN pg_catalog.pg_extension AS e
        ON e.oid OPERATOR(pg_catalog.=) d.refobjid
      WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
        AND d.objid OPERATOR(pg_catalog.=) p.oid
        AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
        AND d.deptype OPERATOR(pg_catalog.=) 'e'
        AND e.extname OPERATOR(pg_catalog.=) ANY ({extensions}))
    AND NOT (pg_catalog.concat(p.pronamespace::pg_catalog.regnamespace, '.', p.proname)
             OPERATOR(pg_catalog.=) ANY ({functions}))
  UNION ALL
  SELECT FROM pg_catalog.pg_proc AS e, (
    SELECT r.ev_action::pg_catalog.text AS body FROM pg_catalog.pg_rewrite AS r
    WHERE r.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
    UNION ALL
    SELECT pg_catalog.concat(p.polqual::pg_catalog.text, p.polwithcheck::pg_catalog.text)
    FROM pg_catalog.pg_policy AS p
    UNION ALL
    SELECT c.conbin::pg_catalog.text FROM pg_catalog.pg_constraint AS c
    WHERE c.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
      AND c.contypid OPERATOR(pg_catalog.<>) 0::pg_catalog.oid
  ) AS x
  WHERE e.proname OPERATOR(pg_catalog.=) ANY ({escaping})
    AND e.pronamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace
    AND pg_catalog.has_function_privilege(e.oid, 'EXECUTE')
    AND pg_catalog.strpos(x.body, pg_catalog.concat(' :funcid ', e.oid, ' '))
        OPERATOR(pg_catalog.>) 0
))::pg_catalog.int4 END"""


def guard_sql(trusted: TrustedCode) -> str:
    """Return the statement that fails with `GUARD_SQLSTATE` while any problem exists.

    The statement takes one parameter, the snapshot (`pg_current_snapshot()` as text) under
    which it last passed on the connection, and returns the current one: when they are
    equal, no transaction has committed (or begun writing) anywhere since, so no catalog can
    have changed, and the checks are skipped. Otherwise they run, in the same statement.

    Args:
        trusted: What the operator trusts.

    Returns:
        One SELECT of one row (snapshot, 1), cheap enough for every call: `_PROBLEMS`'s
        conditions as existence tests.
    """
    return _GUARD.format(  # nosec B608  # Fixed text; the arrays are quoted constants.
        extensions=_text_array(trusted.extensions),
        functions=_text_array(trusted.functions),
        schemas=_text_array(trusted.schemas),
        roles=_text_array(DANGEROUS_ROLES),
        escaping=_text_array(frozenset(ESCAPING_FUNCTIONS)),
        first_user_oid=FIRST_USER_OID,
    )


# The guard's short form: the snapshot, and 1, when the snapshot is still the one given; else
# it fails with GUARD_SQLSTATE, and the caller runs the full guard instead. Its divisor is not
# a constant, so the planner cannot fold the division when it prepares the statement.
UNCHANGED_GUARD: Final = (
    "SELECT pg_catalog.pg_current_snapshot()::pg_catalog.text, 1 OPERATOR(pg_catalog./) "
    "(pg_catalog.pg_current_snapshot()::pg_catalog.text OPERATOR(pg_catalog.=) $1)"
    "::pg_catalog.int4"
)


def refusal(problems: list[RoleProblem]) -> ToolFailure:
    """Return the in-band refusal that names the problems and their fixes.

    Args:
        problems: What the audit found; at least one.

    Returns:
        An `MCP_ACCESS_DENIED` problem: no query runs until the operator fixes the role.
    """
    shown = "; ".join(problem.line() for problem in problems[:_SHOWN_PROBLEMS])
    more = len(problems) - _SHOWN_PROBLEMS
    tail = f" (and {more} more: run mcp-server-suite --check-config)" if more > 0 else ""
    intro = (
        "No query runs: the database role could run code nobody trusted, so the server "
        "refuses to use it. "
    )
    detail = intro + shown + tail
    if len(detail) > MAX_DETAIL_CHARS:
        detail = detail[: MAX_DETAIL_CHARS - 48] + "... (run mcp-server-suite --check-config)"
    return ToolFailure(
        detail,
        code=MCPErrorCode.ACCESS_DENIED,
        metadata={"role_problems": len(problems), "first_problem": problems[0].kind},
    )


def audit_database(dsn: str, trusted: TrustedCode, *, connect_timeout: float) -> list[str]:
    """Connect once and audit the role, for `--check-config`: one line per problem.

    Args:
        dsn: The connection URI (a secret: never printed; libpq's messages omit passwords).
        trusted: What the operator trusts.
        connect_timeout: Seconds to wait for the server.

    Returns:
        One line per problem (an unreachable server or a refused login is one); none when the
        role holds the boundary.
    """
    import psycopg  # noqa: PLC0415  # --check-config alone connects synchronously.

    try:
        with psycopg.connect(
            dsn,
            autocommit=True,
            connect_timeout=max(2, min(CHECK_CONNECT_TIMEOUT_S, round(connect_timeout))),
            application_name="mcp-server-suite --check-config",
        ) as conn:
            rows = conn.execute(audit_sql(trusted)).fetchall()
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return [f"cannot connect to the database: {first[:_SHOWN_ERROR_CHARS]}"]
    return [RoleProblem(*map(str, row)).line() for row in rows]
