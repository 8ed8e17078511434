-- Candidates for the reviewed allowlist of side-effect-free built-ins in
-- src/mcp_server_suite/tools/sql_functions.py (BUILTIN_FUNCTIONS).
--
-- Run it against the PostgreSQL major version you deploy (as any role):
--
--   psql -X -At -F '|' -d app -f scripts/sql-function-candidates.sql
--
-- It lists the documented functions, aggregates and window functions of pg_catalog that SQL
-- can call, with the volatility of their overloads (i immutable, s stable, v volatile). Left
-- out are routines no query needs to name: type input/output, index and aggregate support,
-- planner support, operator implementations ("implementation of ... operator") and
-- deprecated aliases. The output is a starting point, never the list itself: volatility does
-- not describe side effects (txid_current is stable and takes a transaction id;
-- table_to_xml is stable and runs SQL given as a string), so every name was reviewed, and
-- the module's comments say which families were removed and why.
WITH support AS (
  SELECT typinput::oid AS f FROM pg_catalog.pg_type
  UNION SELECT typoutput FROM pg_catalog.pg_type
  UNION SELECT typreceive FROM pg_catalog.pg_type
  UNION SELECT typsend FROM pg_catalog.pg_type
  UNION SELECT typmodin FROM pg_catalog.pg_type
  UNION SELECT typmodout FROM pg_catalog.pg_type
  UNION SELECT typanalyze FROM pg_catalog.pg_type
  UNION SELECT typsubscript FROM pg_catalog.pg_type
  UNION SELECT amproc FROM pg_catalog.pg_amproc
  UNION SELECT oprrest FROM pg_catalog.pg_operator
  UNION SELECT oprjoin FROM pg_catalog.pg_operator
  UNION SELECT aggtransfn FROM pg_catalog.pg_aggregate
  UNION SELECT aggfinalfn FROM pg_catalog.pg_aggregate
  UNION SELECT aggcombinefn FROM pg_catalog.pg_aggregate
  UNION SELECT aggserialfn FROM pg_catalog.pg_aggregate
  UNION SELECT aggdeserialfn FROM pg_catalog.pg_aggregate
  UNION SELECT aggmtransfn FROM pg_catalog.pg_aggregate
  UNION SELECT aggminvtransfn FROM pg_catalog.pg_aggregate
  UNION SELECT aggmfinalfn FROM pg_catalog.pg_aggregate
  UNION SELECT prosupport FROM pg_catalog.pg_proc
), callable AS (
  SELECT p.proname, p.provolatile, pg_catalog.obj_description(p.oid, 'pg_proc') AS description
  FROM pg_catalog.pg_proc AS p
  JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
  WHERE n.nspname = 'pg_catalog'
    AND p.prokind IN ('f', 'a', 'w')
    AND p.oid NOT IN (SELECT f FROM support WHERE f IS NOT NULL)
    AND NOT ('internal'::pg_catalog.regtype = ANY (p.proargtypes))
    AND p.prorettype NOT IN (
      'internal'::pg_catalog.regtype, 'trigger'::pg_catalog.regtype,
      'event_trigger'::pg_catalog.regtype, 'language_handler'::pg_catalog.regtype,
      'fdw_handler'::pg_catalog.regtype, 'index_am_handler'::pg_catalog.regtype,
      'table_am_handler'::pg_catalog.regtype, 'tsm_handler'::pg_catalog.regtype)
)
SELECT proname,
  pg_catalog.string_agg(DISTINCT provolatile::text, '' ORDER BY provolatile::text) AS volatility
FROM callable
GROUP BY proname
HAVING pg_catalog.bool_and(description LIKE 'implementation of%' OR description LIKE 'deprecated%'
  OR description IS NULL) IS NOT TRUE
ORDER BY proname;
