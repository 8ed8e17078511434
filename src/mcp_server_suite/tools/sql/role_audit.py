"""The third layer of `read_only_sql`: what the database role could run, audited.

Name resolution (`statement.py`, the pinned `search_path`) cannot see code that PostgreSQL
reaches without a name: an implicit cast on a user's type, a view or a row-level-security
policy whose stored definition calls a function, a domain's CHECK. For all of those,
PostgreSQL checks EXECUTE on the function for the role running the query (verified on
PostgreSQL 15 and 18 in `tests/unit/test_sql_role_audit.py`), so a role that may execute nothing
but trusted code cannot run planted code by any of those routes. This module checks that.

Rules:

1. Trusted code is what initdb created (object ids below 16384: `pg_catalog` and
   `information_schema`), the members of the extensions the operator names
   (`MCP_SQL_TRUSTED_EXTENSIONS`), and the schema-qualified functions of
   `MCP_SQL_ALLOWED_FUNCTIONS`.
2. A problem is any of: the role is a superuser (reported alone: no REVOKE can limit one);
   it has BYPASSRLS, REPLICATION, CREATEROLE or CREATEDB; it is a member of any role (SET
   ROLE and `set_config('role', ...)` take on that role's privileges, NOINHERIT
   notwithstanding), or owns the database (which makes it a member of pg_database_owner); it
   may create objects in a schema it reads or resolves names in; it may execute a function
   that is not trusted and that a SELECT can call (procedures and trigger functions it
   cannot); a type, range type or operator runs untrusted code that PostgreSQL calls without
   checking EXECUTE (type input, output and subscripting, a range's `subtype_diff` and
   `canonical`, which the planner calls while estimating; operator estimators); a view,
   policy or domain CHECK reaches a built-in of `STORED_REFUSED` that the role may execute,
   or an operator runs one. PostgreSQL records no dependency on a built-in, so stored
   expressions are read as the node trees they are stored as, every field that names a
   function or an operator (`:funcid`, `:opno`/`:opfuncid` of operators, IS DISTINCT FROM,
   NULLIF and `= ANY`, `:aggfnoid`, `:winfnoid`, grouping and sorting operators, a row
   comparison's `:opnos`). Advice (`ADVISORY_KINDS`) is reported but never refuses a call:
   a connection limit of the role or the database below `MCP_SQL_POOL_MAX_SIZE`, a view of
   `MCP_SQL_SCHEMAS` that calls a function the role may not execute (every read of it fails
   with 42501; the fix names the grant and `MCP_SQL_ALLOWED_FUNCTIONS`), a trusted extension
   that is not installed.
3. `audit_sql` lists every problem with the statement that fixes it; it runs when a pooled
   connection is set up and for `--check-config`. `guard_sql` is the same check as one
   statement that fails (division by zero, SQLSTATE 22012) when any problem exists: it runs
   in every call's read segment, in the same transaction and round trip as the query and
   just before it, so a failing check aborts the query. It skips its checks while nothing
   has committed in the cluster since it last passed; `UNCHANGED_GUARD` is that comparison
   alone, for a session that expects the cluster to be unchanged (`session.py`, Rule 4).
4. What remains is a race the check cannot close: a role that owns an object the query
   reaches, and that grants EXECUTE on new code in the microseconds between the guard and
   the query's planning. The least-privilege role's schemas must therefore hold only objects
   of trusted owners (docs/how-to/postgresql.md).
"""

from dataclasses import dataclass
from typing import Final

from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MAX_DETAIL_CHARS, MCPErrorCode
from mcp_server_suite.tools.sql.functions import ESCAPING_FUNCTIONS

__all__ = [
    "ADVISORY_KINDS",
    "CHECK_CONNECT_TIMEOUT_S",
    "FIRST_USER_OID",
    "GUARD_SQLSTATE",
    "LARGE_OBJECT_CREATORS",
    "RUNS_SQL_TEXT",
    "STORED_REFUSED",
    "UNCHANGED_GUARD",
    "DatabaseAudit",
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

# Built-ins that run SQL given to them as a string (the statement is planned and run as the
# caller, unseen by any check); the policy refuses them by name, and a stored expression that
# calls one can reach any function the role may execute, whatever the expression names.
RUNS_SQL_TEXT: Final = frozenset(
    {
        "cursor_to_xml",
        "cursor_to_xmlschema",
        "database_to_xml",
        "database_to_xml_and_xmlschema",
        "database_to_xmlschema",
        "query_to_xml",
        "query_to_xml_and_xmlschema",
        "query_to_xmlschema",
        "schema_to_xml",
        "schema_to_xml_and_xmlschema",
        "schema_to_xmlschema",
        "table_to_xml",
        "table_to_xml_and_xmlschema",
        "table_to_xmlschema",
        "ts_rewrite",
        "ts_stat",
    }
)

# Built-ins that create large objects, which no privilege governs once created (PostgreSQL
# refuses them in a read-only transaction; the role script revokes them all the same).
LARGE_OBJECT_CREATORS: Final = frozenset({"lo_creat", "lo_create", "lo_from_bytea"})

# The built-ins (of pg_catalog, every overload) that no view, policy or domain CHECK may call
# while the role may execute them: exactly those `scripts/least-privilege-role.sql -v
# revoke_public_execute=1` revokes from PUBLIC (its tests hold the two lists equal).
STORED_REFUSED: Final = frozenset(ESCAPING_FUNCTIONS) | LARGE_OBJECT_CREATORS | RUNS_SQL_TEXT

# Kinds of finding that `--check-config` reports but the server never refuses calls for:
# nothing they describe lets the role act beyond the boundary (a trusted extension that is
# not installed, a connection limit below the pool's size, a view whose code the role may not
# execute). The server logs them once on stderr.
ADVISORY_KINDS: Final = frozenset({"extension", "connections", "view"})

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
    """What the operator trusts, where the role reads and resolves names, and the pool size.

    Attributes:
        schemas: `MCP_SQL_SCHEMAS`.
        extensions: `MCP_SQL_TRUSTED_EXTENSIONS`.
        functions: The schema-qualified entries of `MCP_SQL_ALLOWED_FUNCTIONS`.
        pool_max_size: `MCP_SQL_POOL_MAX_SIZE`, which the role's and the database's
            connection limits must allow; 0 skips that check.
    """

    schemas: tuple[str, ...]
    extensions: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()
    pool_max_size: int = 0


@dataclass(frozen=True, slots=True)
class RoleProblem:
    """One thing the role could do that the boundary does not allow, or that will fail.

    Attributes:
        kind: `superuser`, `attribute`, `membership`, `create`, `execute`, `unchecked`,
            `stored` or `operator` (the server refuses to serve while any exists); or one of
            `ADVISORY_KINDS`: `extension` (a trusted extension that is not installed),
            `connections` (a connection limit below the pool's size) or `view` (a view that
            calls code the role may not execute).
        subject: What is wrong, as a clause.
        fix: The statement (or step) that fixes it.
    """

    kind: str
    subject: str
    fix: str

    @property
    def refuses(self) -> bool:
        """Whether the server refuses every call while this problem exists."""
        return self.kind not in ADVISORY_KINDS

    def line(self) -> str:
        """The problem as one line for an operator."""
        return f"{self.subject}; fix: {self.fix}"


def _text_array(items: tuple[str, ...] | frozenset[str]) -> str:
    # The items are validated identifiers (config.py) or constants, quoted here all the same.
    quoted = ", ".join("'" + item.replace("'", "''") + "'" for item in sorted(items))
    return f"ARRAY[{quoted}]::pg_catalog.text[]" if quoted else "'{}'::pg_catalog.text[]"


# The fields of a stored expression tree (`pg_node_tree` text) that hold the object id of a
# function PostgreSQL calls: a call by name, an operator's function (plain, IS DISTINCT FROM,
# NULLIF, `= ANY`), an aggregate, a window function, `= ANY`'s hashed forms, a TABLESAMPLE
# method, a window frame's in_range support. Then those that hold an operator (a plain one,
# or a grouping or sorting one) and a row comparison's list of operators.
_FUNCTION_FIELDS: Final = (
    "funcid|opfuncid|aggfnoid|winfnoid|hashfuncid|negfuncid|tsmhandler|"
    "startInRangeFunc|endInRangeFunc"
)
_OPERATOR_FIELDS: Final = "opno|eqop|sortop"

# The stored expressions a query can run without naming them: view rules (every view, in any
# schema: a view of MCP_SQL_SCHEMAS can read another), row-level-security policies and domain
# CHECK constraints, as (classid, objid, body).
_STORED_BODIES: Final = """
  SELECT 'pg_catalog.pg_rewrite'::pg_catalog.regclass AS classid, r.oid AS objid,
         r.ev_action::pg_catalog.text AS body
  FROM pg_catalog.pg_rewrite AS r
  WHERE r.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
  UNION ALL
  SELECT 'pg_catalog.pg_policy'::pg_catalog.regclass, p.oid,
         pg_catalog.concat(p.polqual::pg_catalog.text, ' ', p.polwithcheck::pg_catalog.text)
  FROM pg_catalog.pg_policy AS p
  UNION ALL
  SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass, c.oid, c.conbin::pg_catalog.text
  FROM pg_catalog.pg_constraint AS c
  WHERE c.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
    AND c.contypid OPERATOR(pg_catalog.<>) 0::pg_catalog.oid"""

# The built-ins of `STORED_REFUSED` that the role (`{role}`) may execute, and the operators
# (of any schema) that run one of them.
_FLAGGED: Final = """
  SELECT e.oid, e.proname, e.proacl, e.proowner,
         pg_catalog.format('pg_catalog.%I(%s)', e.proname,
                           pg_catalog.pg_get_function_identity_arguments(e.oid)) AS name
  FROM pg_catalog.pg_proc AS e
  WHERE e.pronamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace
    AND e.proname OPERATOR(pg_catalog.=) ANY ({refused})
    AND pg_catalog.has_function_privilege({role}, e.oid, 'EXECUTE')"""
_FLAGGED_OPERATORS: Final = """
  SELECT o.oid, o.oprcode FROM pg_catalog.pg_operator AS o
  WHERE o.oprcode::pg_catalog.oid IN (SELECT oid FROM flagged)"""

# One regular expression that matches a stored tree reaching a flagged function by any of the
# fields above; a numeral never matches "-", so an empty set matches nothing. Object ids are
# followed by a space in a tree's text (or end a list), so 20 never matches 2096.
_REACHES: Final = """(SELECT pg_catalog.concat(
    ':(?:{functions}) (?:', COALESCE((SELECT pg_catalog.string_agg(oid::pg_catalog.text, '|')
                                      FROM flagged), '-'),
    ') |:(?:{operators}) (?:', COALESCE((SELECT pg_catalog.string_agg(oid::pg_catalog.text, '|')
                                        FROM flagged_operators), '-'),
    ') |:opnos \\(o[ 0-9]* (?:', COALESCE((SELECT pg_catalog.string_agg(oid::pg_catalog.text,
                                                                       '|')
                                         FROM flagged_operators), '-'),
    ')[ )]'))"""

# Whether a SELECT can call the function `{f}`: procedures only CALL can, and functions that
# return `trigger` or `event_trigger` PostgreSQL runs only as triggers.
_CALLABLE: Final = """({f}.prokind OPERATOR(pg_catalog.<>) 'p'
   AND {f}.prorettype NOT IN ('pg_catalog.trigger'::pg_catalog.regtype,
                              'pg_catalog.event_trigger'::pg_catalog.regtype))"""

# Who holds EXECUTE on a function `{f}` for the role: PUBLIC, or the role itself.
_GRANTEE: Final = """CASE WHEN EXISTS (
           SELECT FROM pg_catalog.aclexplode(COALESCE({f}.proacl,
                                             pg_catalog.acldefault('f', {f}.proowner))) AS a
           WHERE a.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid
             AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE')
         THEN 'PUBLIC' ELSE pg_catalog.quote_ident(me.rolname) END"""


# Every finding of Rule 2, one row each: (kind, subject, fix). The fields are filled by
# `audit_sql` with arrays of validated identifiers (config.py) and constants. A superuser is
# reported alone: PostgreSQL checks no privilege for it, so no REVOKE can limit it.
_PROBLEMS: Final = """
WITH me AS (
  SELECT r.oid, r.rolname, r.rolsuper, r.rolbypassrls, r.rolreplication, r.rolcreaterole,
         r.rolcreatedb, r.rolconnlimit
  FROM pg_catalog.pg_roles AS r
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
  SELECT p.oid, p.proacl, p.proowner, p.prokind, p.prorettype, n.nspname, p.proname,
         pg_catalog.format('%I.%I(%s)', n.nspname, p.proname,
                           pg_catalog.pg_get_function_identity_arguments(p.oid)) AS name
  FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS n
    ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
  WHERE p.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
    AND p.oid NOT IN (SELECT objid FROM members)
    AND NOT (pg_catalog.concat(n.nspname, '.', p.proname)
             OPERATOR(pg_catalog.=) ANY ({functions}))
), flagged AS ({flagged}
), flagged_operators AS ({flagged_operators}
), stored AS ({stored}
), reaching AS (
  SELECT x.classid, x.objid, x.body FROM stored AS x WHERE x.body ~ {reaches}
), reached AS (
  -- One row per object and function, naming the operator when one leads to it.
  SELECT DISTINCT ON (classid, objid, fid) classid, objid, fid, opid,
         CASE WHEN classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_rewrite'::pg_catalog.regclass
                THEN pg_catalog.format('the view %s', (
                  SELECT r.ev_class::pg_catalog.regclass FROM pg_catalog.pg_rewrite AS r
                  WHERE r.oid OPERATOR(pg_catalog.=) objid))
              ELSE pg_catalog.format('the %s', pg_catalog.pg_describe_object(classid, objid, 0))
         END AS what
  FROM (
  SELECT x.classid, x.objid, f.oid AS fid, NULL::pg_catalog.oid AS opid
  FROM reaching AS x
  CROSS JOIN LATERAL pg_catalog.regexp_matches(x.body, ':(?:{function_fields}) ([0-9]+) ', 'g')
    AS m(found)
  JOIN flagged AS f ON f.oid OPERATOR(pg_catalog.=) m.found[1]::pg_catalog.oid
  UNION
  SELECT x.classid, x.objid, o.oprcode::pg_catalog.oid, o.oid
  FROM reaching AS x
  CROSS JOIN LATERAL pg_catalog.regexp_matches(
    x.body, ':(?:{operator_fields}) ([0-9]+) |:opnos \\(o((?: [0-9]+)+)\\)', 'g') AS m(found)
  CROSS JOIN LATERAL pg_catalog.unnest(pg_catalog.string_to_array(
    pg_catalog.btrim(COALESCE(m.found[1], m.found[2])), ' ')) AS id
  JOIN flagged_operators AS o ON o.oid OPERATOR(pg_catalog.=) id::pg_catalog.oid
  ) AS found
  ORDER BY classid, objid, fid, opid NULLS LAST
), problems AS (
SELECT 0 AS rank, 'superuser' AS kind,
       pg_catalog.format('the role %I is a superuser, for which PostgreSQL checks no '
                         'privilege, so no REVOKE can limit it', me.rolname) AS subject,
       'connect as a least-privilege role instead: create one with '
       'scripts/least-privilege-role.sql and point MCP_SQL_DSN at it' AS fix
FROM me WHERE me.rolsuper
UNION ALL
SELECT 1, 'attribute', pg_catalog.format('the role %I has %s: %s', me.rolname, a.name, a.why),
       pg_catalog.format('ALTER ROLE %I NO%s', me.rolname, a.name)
FROM me CROSS JOIN LATERAL (VALUES
  ('BYPASSRLS', me.rolbypassrls, 'a plain SELECT reads the rows row-level security hides'),
  ('REPLICATION', me.rolreplication,
   'it may create replication slots, which outlive the rolled-back call'),
  ('CREATEROLE', me.rolcreaterole, 'it may create roles and change their memberships'),
  ('CREATEDB', me.rolcreatedb, 'it may create databases')) AS a(name, held, why)
WHERE a.held
UNION ALL
SELECT 2, 'membership',
       pg_catalog.format('the role %I is a member of %I: SET ROLE and set_config(''role'', '
                         '...) take on its privileges, NOINHERIT notwithstanding',
                         me.rolname, g.rolname),
       pg_catalog.format('REVOKE %I FROM %I GRANTED BY %I', g.rolname, me.rolname,
                         grantor.rolname)
FROM me
JOIN pg_catalog.pg_auth_members AS m ON m.member OPERATOR(pg_catalog.=) me.oid
JOIN pg_catalog.pg_roles AS g ON g.oid OPERATOR(pg_catalog.=) m.roleid
JOIN pg_catalog.pg_roles AS grantor ON grantor.oid OPERATOR(pg_catalog.=) m.grantor
UNION ALL
SELECT 2, 'membership',
       pg_catalog.format('the role %I owns the database %I, which makes it a member of '
                         'pg_database_owner', me.rolname, d.datname),
       pg_catalog.format('ALTER DATABASE %I OWNER TO another role', d.datname)
FROM me JOIN pg_catalog.pg_database AS d ON d.datdba OPERATOR(pg_catalog.=) me.oid
WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
UNION ALL
SELECT 3, 'create',
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
SELECT 4, 'execute',
       pg_catalog.format('the role %I may execute %s, which is neither built in nor part of a '
                         'trusted extension', me.rolname, u.name),
       CASE WHEN u.proowner OPERATOR(pg_catalog.=) me.oid
              THEN pg_catalog.format('ALTER FUNCTION %s OWNER TO another role', u.name)
            ELSE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM %s, or trust it: add '
                                   '%s to MCP_SQL_ALLOWED_FUNCTIONS', u.name,
                                   {grantee_u}, pg_catalog.format('%I.%I', u.nspname, u.proname))
       END
FROM me, untrusted AS u
WHERE {callable_u}
  AND pg_catalog.has_function_privilege(me.oid, u.oid, 'EXECUTE')
UNION ALL
SELECT 5, 'unchecked',
       pg_catalog.format('the type %s runs %s, which PostgreSQL calls without checking EXECUTE',
                         t.oid::pg_catalog.regtype, u.name),
       pg_catalog.format('DROP TYPE %s, or trust the extension that provides %s',
                         t.oid::pg_catalog.regtype, u.name)
FROM pg_catalog.pg_type AS t JOIN untrusted AS u
  ON u.oid IN (t.typinput, t.typoutput, t.typreceive, t.typsend, t.typmodin, t.typmodout,
               t.typsubscript)
WHERE t.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
UNION ALL
SELECT 5, 'unchecked',
       pg_catalog.format('the range type %s runs %s, which the planner calls without checking '
                         'EXECUTE', r.rngtypid::pg_catalog.regtype, u.name),
       pg_catalog.format('DROP TYPE %s, or trust the extension that provides %s',
                         r.rngtypid::pg_catalog.regtype, u.name)
FROM pg_catalog.pg_range AS r JOIN untrusted AS u ON u.oid IN (r.rngcanonical, r.rngsubdiff)
UNION ALL
SELECT 5, 'unchecked',
       pg_catalog.format('the operator %s runs %s, which the planner calls without checking '
                         'EXECUTE', o.oid::pg_catalog.regoperator, u.name),
       pg_catalog.format('DROP OPERATOR %s, or trust the extension that provides %s',
                         o.oid::pg_catalog.regoperator, u.name)
FROM pg_catalog.pg_operator AS o JOIN untrusted AS u ON u.oid IN (o.oprrest, o.oprjoin)
WHERE o.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
UNION ALL
SELECT 6, 'stored',
       pg_catalog.format('%s calls %s%s, which %s', x.what, e.name,
                         CASE WHEN x.opid IS NULL THEN ''
                              ELSE pg_catalog.format(' through the operator %s',
                                                     x.opid::pg_catalog.regoperator) END,
                         CASE WHEN e.proname OPERATOR(pg_catalog.=) ANY ({runs_sql_text})
                              THEN 'runs SQL given as a string, which nothing checks'
                              ELSE 'acts outside the read-only transaction' END),
       pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM %s '
                         '(scripts/least-privilege-role.sql -v revoke_public_execute=1 '
                         'revokes it from PUBLIC), or redefine %s without it', e.name,
                         {grantee_e}, x.what)
FROM me, reached AS x JOIN flagged AS e ON e.oid OPERATOR(pg_catalog.=) x.fid
UNION ALL
SELECT 6, 'operator',
       pg_catalog.format('the operator %s runs %s, which the role may execute',
                         o.oid::pg_catalog.regoperator, e.name),
       pg_catalog.format('DROP OPERATOR %s, or REVOKE EXECUTE ON FUNCTION %s FROM %s',
                         o.oid::pg_catalog.regoperator, e.name, {grantee_e})
FROM me, flagged_operators AS o JOIN flagged AS e
  ON e.oid OPERATOR(pg_catalog.=) o.oprcode::pg_catalog.oid
WHERE o.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
UNION ALL
SELECT 7, 'connections',
       pg_catalog.format('the role %I may open at most %s connections, fewer than '
                         'MCP_SQL_POOL_MAX_SIZE (%s): calls wait, then fail, once they are '
                         'all in use', me.rolname, me.rolconnlimit, {pool_max_size}),
       pg_catalog.format('ALTER ROLE %I CONNECTION LIMIT %s, or set MCP_SQL_POOL_MAX_SIZE=%s',
                         me.rolname, {pool_max_size}, me.rolconnlimit)
FROM me
WHERE me.rolconnlimit OPERATOR(pg_catalog.>=) 1
  AND me.rolconnlimit OPERATOR(pg_catalog.<) {pool_max_size}
UNION ALL
SELECT 7, 'connections',
       pg_catalog.format('the database %I allows at most %s connections, fewer than '
                         'MCP_SQL_POOL_MAX_SIZE (%s)', d.datname, d.datconnlimit,
                         {pool_max_size}),
       pg_catalog.format('ALTER DATABASE %I CONNECTION LIMIT %s, or set '
                         'MCP_SQL_POOL_MAX_SIZE=%s', d.datname, {pool_max_size},
                         d.datconnlimit)
FROM pg_catalog.pg_database AS d
WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
  AND d.datconnlimit OPERATOR(pg_catalog.>=) 1
  AND d.datconnlimit OPERATOR(pg_catalog.<) {pool_max_size}
UNION ALL
SELECT DISTINCT 8, 'view',
       pg_catalog.format('the view %s calls %s, which the role %I may not execute: every '
                         'query that reads the view fails with SQLSTATE 42501',
                         c.oid::pg_catalog.regclass, f.oid::pg_catalog.regprocedure,
                         me.rolname),
       pg_catalog.format('if its code is trusted, GRANT EXECUTE ON FUNCTION %s TO %I and add '
                         '%I.%I to MCP_SQL_ALLOWED_FUNCTIONS; if not, REVOKE SELECT ON %s '
                         'FROM %s', f.oid::pg_catalog.regprocedure, me.rolname, fn.nspname,
                         f.proname, c.oid::pg_catalog.regclass,
                         CASE WHEN EXISTS (
                                SELECT FROM pg_catalog.aclexplode(c.relacl) AS a
                                WHERE a.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                                  AND a.privilege_type OPERATOR(pg_catalog.=) 'SELECT')
                              THEN 'PUBLIC' ELSE pg_catalog.quote_ident(me.rolname) END)
FROM me, pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
JOIN pg_catalog.pg_rewrite AS r ON r.ev_class OPERATOR(pg_catalog.=) c.oid
JOIN pg_catalog.pg_depend AS d
  ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_rewrite'::pg_catalog.regclass
  AND d.objid OPERATOR(pg_catalog.=) r.oid
  AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
JOIN pg_catalog.pg_proc AS f ON f.oid OPERATOR(pg_catalog.=) d.refobjid
JOIN pg_catalog.pg_namespace AS fn ON fn.oid OPERATOR(pg_catalog.=) f.pronamespace
WHERE n.nspname OPERATOR(pg_catalog.=) ANY ({schemas})
  AND c.relkind OPERATOR(pg_catalog.=) 'v'
  AND pg_catalog.has_table_privilege(me.oid, c.oid, 'SELECT')
  AND NOT pg_catalog.has_function_privilege(me.oid, f.oid, 'EXECUTE')
UNION ALL
SELECT 9, 'extension', pg_catalog.format('the trusted extension %I is not installed', x),
       pg_catalog.format('CREATE EXTENSION %I, or remove it from MCP_SQL_TRUSTED_EXTENSIONS', x)
FROM pg_catalog.unnest({extensions}) AS x
WHERE x NOT IN (SELECT extname FROM pg_catalog.pg_extension)
)
SELECT kind, subject, fix FROM problems
WHERE kind OPERATOR(pg_catalog.=) 'superuser' OR NOT EXISTS (SELECT FROM me WHERE me.rolsuper)
ORDER BY rank, subject, fix"""


def _fields(trusted: TrustedCode) -> dict[str, object]:
    # What the audit and the guard are filled with: quoted constants and validated names.
    return {
        "extensions": _text_array(trusted.extensions),
        "functions": _text_array(trusted.functions),
        "schemas": _text_array(trusted.schemas),
        "refused": _text_array(STORED_REFUSED),
        "runs_sql_text": _text_array(RUNS_SQL_TEXT),
        "first_user_oid": FIRST_USER_OID,
        "pool_max_size": max(0, int(trusted.pool_max_size)),
        "function_fields": _FUNCTION_FIELDS,
        "operator_fields": _OPERATOR_FIELDS,
    }


def _with_fields(text: str, trusted: TrustedCode, role: str) -> str:
    fields = _fields(trusted)
    parts = {
        "flagged": _FLAGGED.format(refused=fields["refused"], role=role),
        "flagged_operators": _FLAGGED_OPERATORS,
        "stored": _STORED_BODIES.format(first_user_oid=FIRST_USER_OID),
        "reaches": _REACHES.format(functions=_FUNCTION_FIELDS, operators=_OPERATOR_FIELDS),
        "grantee_u": _GRANTEE.format(f="u"),
        "grantee_e": _GRANTEE.format(f="e"),
        "callable_u": _CALLABLE.format(f="u"),
        "callable_p": _CALLABLE.format(f="p"),
    }
    return text.format(**fields, **parts)


def audit_sql(trusted: TrustedCode) -> str:
    """Return the query that lists every finding (Rule 3): problems first, then advice.

    Args:
        trusted: What the operator trusts.

    Returns:
        A query whose rows are (kind, subject, fix): the problems that refuse calls, in a
        fixed order, then those of `ADVISORY_KINDS`. For a superuser, that one row alone.
    """
    return _with_fields(_PROBLEMS, trusted, "(SELECT oid FROM me)")  # nosec B608  # Constants.


# The guard: the same conditions as `_PROBLEMS` (its advice aside), as existence tests that
# name nothing, with the cheap filters first, so that a role without problems pays a few index
# scans per call. The role's own row is read once.
_GUARD: Final = """SELECT pg_catalog.pg_current_snapshot()::pg_catalog.text,
CASE WHEN pg_catalog.pg_current_snapshot()::pg_catalog.text OPERATOR(pg_catalog.=) $1 THEN 1
ELSE 1 OPERATOR(pg_catalog./) (NOT EXISTS (
  WITH me AS (
    SELECT r.oid, r.rolsuper, r.rolbypassrls, r.rolreplication, r.rolcreaterole, r.rolcreatedb
    FROM pg_catalog.pg_roles AS r
    WHERE r.rolname OPERATOR(pg_catalog.=) pg_catalog.current_user()
  ), flagged AS ({flagged}
  ), flagged_operators AS ({flagged_operators}
  )
  SELECT FROM me
  WHERE me.rolsuper OR me.rolbypassrls OR me.rolreplication OR me.rolcreaterole
     OR me.rolcreatedb
  UNION ALL
  SELECT FROM pg_catalog.pg_auth_members AS m
  WHERE m.member OPERATOR(pg_catalog.=) (SELECT oid FROM me)
  UNION ALL
  SELECT FROM pg_catalog.pg_database AS d
  WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
    AND d.datdba OPERATOR(pg_catalog.=) (SELECT oid FROM me)
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
    AND (({callable_p} AND pg_catalog.has_function_privilege(p.oid, 'EXECUTE'))
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
                      UNION ALL SELECT t.typsubscript FROM pg_catalog.pg_type AS t
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
  SELECT FROM flagged_operators AS o
  WHERE o.oid OPERATOR(pg_catalog.>=) {first_user_oid}::pg_catalog.oid
  UNION ALL
  SELECT FROM ({stored}
  ) AS x
  WHERE EXISTS (SELECT FROM flagged) AND x.body ~ {reaches}
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
        One SELECT of one row (snapshot, 1), cheap enough for every call: the conditions of
        the problems that refuse calls, as existence tests (advice is not checked).
    """
    return _with_fields(_GUARD, trusted, "pg_catalog.current_user()")  # nosec B608  # Constants.


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


@dataclass(frozen=True, slots=True)
class DatabaseAudit:
    """What `--check-config` learnt from the database.

    Attributes:
        server: "PostgreSQL 15.18 as mcp_ro on the database app" once connected, else None.
        problems: The audit's findings (none when the role holds the boundary).
        error: Why no connection could be made (the first line of libpq's message, which
            never holds the password), else None.
    """

    server: str | None
    problems: tuple[RoleProblem, ...] = ()
    error: str | None = None


def _version(number: int) -> str:
    # libpq's server_version: major * 10000 + minor, from PostgreSQL 10 on.
    return f"{number // 10000}.{number % 10000}"


def audit_database(dsn: str, trusted: TrustedCode, *, connect_timeout: float) -> DatabaseAudit:
    """Connect once and audit the role, for `--check-config`.

    Args:
        dsn: The connection URI (a secret: never printed; libpq's messages omit passwords).
        trusted: What the operator trusts.
        connect_timeout: Seconds to wait for the server.

    Returns:
        The server reached and the audit's findings, or why no connection could be made.
    """
    import psycopg  # noqa: PLC0415  # --check-config alone connects synchronously.

    try:
        with psycopg.connect(
            dsn,
            autocommit=True,
            connect_timeout=max(2, min(CHECK_CONNECT_TIMEOUT_S, round(connect_timeout))),
            application_name="mcp-server-suite --check-config",
        ) as conn:
            row = conn.execute(
                "SELECT pg_catalog.current_user()::pg_catalog.text, "
                "pg_catalog.current_database()::pg_catalog.text"
            ).fetchone()
            user, database = (str(value) for value in row) if row else ("?", "?")
            server = (
                f"PostgreSQL {_version(conn.info.server_version)} as {user} "
                f"on the database {database}"
            )
            rows = conn.execute(audit_sql(trusted)).fetchall()
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return DatabaseAudit(None, error=first[:_SHOWN_ERROR_CHARS])
    return DatabaseAudit(server, tuple(RoleProblem(*map(str, row)) for row in rows))
