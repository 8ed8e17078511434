-- The least-privilege PostgreSQL role that `read_only_sql` connects as.
--
-- Run it as a superuser (or the owner of the exposed schema with CREATEROLE) with psql:
--
--   psql -v ON_ERROR_STOP=1 -d app \
--        -v reader=mcp_reader -v db=app -v schema=reporting -v owner=app_owner \
--        -f scripts/least-privilege-role.sql
--
-- Variables:
--   reader   the login role to create or re-harden (default mcp_reader)
--   db       the database the role may connect to (default: the current database)
--   schema   the one schema whose tables and views the role may read (default reporting)
--   owner    the role that creates objects in that schema, so that its future tables are
--            readable too (default: the current user)
--   connection_limit
--            the role's CONNECTION LIMIT, at least MCP_SQL_POOL_MAX_SIZE (default 8)
--   trusted_extensions
--            with revoke_public_execute: the extensions whose functions PUBLIC keeps, as
--            MCP_SQL_TRUSTED_EXTENSIONS names them (comma-separated, default none)
--   revoke_public_execute
--            set it (to any value) to also revoke EXECUTE from PUBLIC on every function,
--            aggregate and window function that initdb did not create and no trusted
--            extension holds (and on those the owner creates later; procedures are left
--            alone: no SELECT can call one), on the dblink family, and on the built-ins
--            whose effects survive a rolled-back read-only transaction (a transaction id, a
--            WAL message, a signal to another session, a session-level advisory lock, a
--            large object) or that run SQL given as a string (query_to_xml, ts_stat, ...).
--            read_only_sql refuses to serve while its role may execute code that is neither
--            built in nor part of a trusted extension, or a built-in of that kind that a
--            view or policy calls. This changes what every role in the database may call
--            (grant it back to the roles that need it), so it is opt-in. A view of the
--            schema that calls a function the reader then may not execute (a user
--            aggregate, say) is listed at the end, with the two steps that allow it.
--
-- The script is idempotent: running it again re-applies every attribute and setting. It
-- never sets a password; give the role one with `\password mcp_reader`, or connect with peer
-- or certificate authentication. It runs unchanged on PostgreSQL 15 to 18.

\set ON_ERROR_STOP on

\if :{?reader}
\else
  \set reader mcp_reader
\endif
\if :{?schema}
\else
  \set schema reporting
\endif
\if :{?db}
\else
  SELECT current_database() AS db \gset
\endif
\if :{?owner}
\else
  SELECT current_user AS owner \gset
\endif
\if :{?connection_limit}
\else
  \set connection_limit 8
\endif

-- Dedicated login role: no inheritance, no special attributes. CONNECTION LIMIT stays at or
-- above MCP_SQL_POOL_MAX_SIZE (4 by default) so the pool can always fill (the role audit
-- reports a smaller one). It is checked to be a number before it is written into the
-- statement.
SELECT :'connection_limit' ~ '^[0-9]{1,6}$' AS connection_limit_ok \gset
\if :connection_limit_ok
\else
  \echo 'connection_limit must be a whole number of connections'
  \quit 3
\endif
SELECT NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = :'reader') AS create_reader
\gset
\if :create_reader
  CREATE ROLE :"reader" LOGIN;
\endif
ALTER ROLE :"reader" LOGIN NOINHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
  NOBYPASSRLS CONNECTION LIMIT :connection_limit;

-- Server-side defaults that hold even if a client-side layer is bypassed. A session can
-- override its own defaults, so these are a second line; the privileges below are the
-- boundary.
ALTER ROLE :"reader" SET default_transaction_read_only = on;
ALTER ROLE :"reader" SET statement_timeout = '10s';
ALTER ROLE :"reader" SET lock_timeout = '1s';
ALTER ROLE :"reader" SET idle_in_transaction_session_timeout = '15s';
-- Backslashes in plain string literals keep their standard meaning, so a literal cannot
-- swallow the code after it (the server also pins and checks this on every connection).
ALTER ROLE :"reader" SET standard_conforming_strings = on;
-- Names resolve among built-ins only (pg_temp last, so it is never searched first): the
-- server qualifies the exposed schema's relations itself, and nothing planted in it can
-- shadow a built-in function, operator or type.
ALTER ROLE :"reader" SET search_path = pg_catalog, pg_temp;
-- A sort or hash that spills to disk stops at 1 GB instead of filling the volume.
ALTER ROLE :"reader" SET temp_file_limit = '1GB';

-- Read access to one database and one schema only; ideally a schema of curated views. Nobody
-- but its owner may create in that schema: an object planted there is code the reader would
-- run (PostgreSQL 15 and later already create public that way; older databases do not).
REVOKE CREATE ON SCHEMA :"schema" FROM PUBLIC;
GRANT CONNECT ON DATABASE :"db" TO :"reader";
GRANT USAGE ON SCHEMA :"schema" TO :"reader";
GRANT SELECT ON ALL TABLES IN SCHEMA :"schema" TO :"reader";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA :"schema"
  GRANT SELECT ON TABLES TO :"reader";

-- The role is a member of no other role: that rules out the predefined roles that read all
-- data, read server files, run programs or signal other sessions, and any role whose
-- privileges `SET ROLE` or `set_config('role', ...)` would take on (NOINHERIT does not stop
-- them); it also undoes an earlier mistake. Each grant is revoked as its grantor made it:
-- from PostgreSQL 16 on, a membership granted by several roles is one grant per grantor.
SELECT pg_catalog.format('REVOKE %I FROM %I GRANTED BY %I', granted.rolname, member.rolname,
                         grantor.rolname)
FROM pg_catalog.pg_auth_members AS m
JOIN pg_catalog.pg_roles AS granted ON granted.oid = m.roleid
JOIN pg_catalog.pg_roles AS member ON member.oid = m.member
JOIN pg_catalog.pg_roles AS grantor ON grantor.oid = m.grantor
WHERE member.rolname = :'reader'
\gexec

\if :{?revoke_public_execute}
  -- Code initdb did not create, outside the extensions named in trusted_extensions (a
  -- comma-separated list, as in MCP_SQL_TRUSTED_EXTENSIONS): the reader may execute none
  -- of it, in any schema, now or (for what the owner creates) later.
  \if :{?trusted_extensions}
  \else
    \set trusted_extensions ''
  \endif
  -- Procedures are left alone: a SELECT cannot call one (only CALL can), and REVOKE EXECUTE
  -- ON FUNCTION refuses them ("is not a function").
  SELECT pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC',
                           p.oid::pg_catalog.regprocedure)
  FROM pg_catalog.pg_proc AS p
  WHERE p.oid >= 16384
    AND p.prokind <> 'p'
    AND NOT EXISTS (
      SELECT FROM pg_catalog.pg_depend AS d
      JOIN pg_catalog.pg_extension AS e ON e.oid = d.refobjid
      WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid
        AND d.deptype = 'e'
        AND e.extname = ANY (pg_catalog.string_to_array(:'trusted_extensions', ',')))
  \gexec
  ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
  -- Built-ins executable by PUBLIC out of the box whose effects survive a rolled-back
  -- read-only transaction: a transaction id, a WAL write, a signal to another session of the
  -- same role, a session-level advisory lock, and the dblink family when the extension
  -- exists; that create objects no privilege governs: large objects; or that run SQL given
  -- as a string, which a view could hand any of the others. read_only_sql refuses all of
  -- them by name, and its role audit refuses to serve while a view, policy or domain CHECK
  -- calls one that the role may execute (role_audit.STORED_REFUSED is this list).
  -- Every overload, selected by name: a signature written here would stop the script on a
  -- server whose version has another (PostgreSQL 17 gave pg_logical_emit_message a fourth
  -- parameter), and the revocations after it would never run.
  SELECT pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC',
                           p.oid::pg_catalog.regprocedure)
  FROM pg_catalog.pg_proc AS p
  WHERE p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace
    AND p.prokind <> 'p'
    AND p.proname IN ('txid_current', 'pg_current_xact_id', 'pg_terminate_backend',
                      'pg_cancel_backend', 'pg_advisory_lock', 'pg_advisory_lock_shared',
                      'pg_try_advisory_lock', 'pg_try_advisory_lock_shared',
                      'pg_logical_emit_message', 'lo_creat', 'lo_create', 'lo_from_bytea',
                      'cursor_to_xml', 'cursor_to_xmlschema', 'database_to_xml',
                      'database_to_xml_and_xmlschema', 'database_to_xmlschema',
                      'query_to_xml', 'query_to_xml_and_xmlschema', 'query_to_xmlschema',
                      'schema_to_xml', 'schema_to_xml_and_xmlschema', 'schema_to_xmlschema',
                      'table_to_xml', 'table_to_xml_and_xmlschema', 'table_to_xmlschema',
                      'ts_rewrite', 'ts_stat')
  ORDER BY p.proname, p.oid
  \gexec
  SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'dblink') AS has_dblink
  \gset
  \if :has_dblink
    SELECT pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', p.oid::regprocedure)
    FROM pg_catalog.pg_proc AS p
    JOIN pg_catalog.pg_depend AS d ON d.classid = 'pg_catalog.pg_proc'::regclass
      AND d.objid = p.oid AND d.deptype = 'e'
    JOIN pg_catalog.pg_extension AS e ON e.oid = d.refobjid AND e.extname = 'dblink'
    WHERE p.prokind <> 'p'
    \gexec
  \endif
\endif

-- A view of the schema that calls code the reader may not execute (a user aggregate, say,
-- once revoke_public_execute has revoked it) fails with SQLSTATE 42501. Each is listed with
-- the two steps that allow it: the grant, and MCP_SQL_ALLOWED_FUNCTIONS, without which
-- read_only_sql refuses to serve a role that may execute code nobody trusted.
CREATE TEMPORARY VIEW mcp_blocked_views AS
SELECT pg_catalog.format('%s %s calls %s, which %I may not execute: to allow it, run '
                         'GRANT EXECUTE ON FUNCTION %s TO %I; and add %s to '
                         'MCP_SQL_ALLOWED_FUNCTIONS',
                         'view', c.oid::pg_catalog.regclass, f.oid::pg_catalog.regprocedure,
                         :'reader', f.oid::pg_catalog.regprocedure, :'reader',
                         pg_catalog.format('%I.%I', fn.nspname, f.proname)) AS blocked_view
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_rewrite AS r ON r.ev_class = c.oid
JOIN pg_catalog.pg_depend AS d ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
  AND d.objid = r.oid AND d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
JOIN pg_catalog.pg_proc AS f ON f.oid = d.refobjid
JOIN pg_catalog.pg_namespace AS fn ON fn.oid = f.pronamespace
WHERE c.relnamespace = :'schema'::pg_catalog.regnamespace
  AND c.relkind = 'v'
  AND pg_catalog.has_table_privilege(:'reader', c.oid, 'SELECT')
  AND NOT pg_catalog.has_function_privilege(:'reader', f.oid, 'EXECUTE')
GROUP BY c.oid, f.oid, f.proname, fn.nspname
ORDER BY 1;
SELECT EXISTS (SELECT FROM mcp_blocked_views) AS has_blocked_views \gset
\if :has_blocked_views
  \echo 'These views fail (SQLSTATE 42501) until the code they call is allowed:'
  TABLE mcp_blocked_views;
\endif
DROP VIEW mcp_blocked_views;
