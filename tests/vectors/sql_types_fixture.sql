-- User types of the exposed schemas, named as a model writes them: an enum, a domain, a
-- composite type and a view, shaped like Pagila's (`mpaa_rating`, `year`, `film_list`), with
-- a second exposed schema that holds some of the same names, a schema that is not exposed, a
-- type that shadows built-in names, a planted cast and a domain whose CHECK calls a function
-- the reader may not execute. Written for tests/unit/test_sql_types.py; no row or definition
-- is copied from any sample database. Load it as a superuser into an empty database.

\set ON_ERROR_STOP on

CREATE SCHEMA pagila;
CREATE SCHEMA pagila2;
CREATE SCHEMA hidden;

CREATE TYPE pagila.mpaa_rating AS ENUM ('G', 'PG', 'PG-13', 'R', 'NC-17');
CREATE DOMAIN pagila.year AS integer CHECK (VALUE >= 1901 AND VALUE <= 2155);
CREATE TYPE pagila.pair AS (a integer, b text);
CREATE TABLE pagila.film (
  film_id integer PRIMARY KEY,
  title text NOT NULL,
  rating pagila.mpaa_rating,
  release_year pagila.year
);
INSERT INTO pagila.film VALUES
  (1, 'Alpha', 'G', 2006), (2, 'Bravo', 'PG-13', 2006), (3, 'Charlie', 'R', 2007);
CREATE VIEW pagila.film_list AS SELECT film_id, title, rating FROM pagila.film;

-- The second exposed schema: a type of the first's name (the first schema wins), one of its
-- own, and a table and a type named in both, each with its own content.
CREATE TYPE pagila2.mpaa_rating AS ENUM ('X');
CREATE TYPE pagila2.only_here AS ENUM ('b');
CREATE TABLE pagila.shared (v text);
INSERT INTO pagila.shared VALUES ('first');
CREATE TABLE pagila2.shared (v text);
INSERT INTO pagila2.shared VALUES ('second');
CREATE TYPE pagila.shared_t AS ENUM ('first');
CREATE TYPE pagila2.shared_t AS ENUM ('second');

-- Types named as built-in types are: pg_catalog's come first.
CREATE TYPE pagila.text AS ENUM ('shadow');
CREATE TYPE pagila.int4 AS ENUM ('shadow');

-- A schema the reader may read but that MCP_SQL_SCHEMAS does not name.
CREATE TYPE hidden.secret AS ENUM ('s');

-- Code nobody trusted, reached through types: a cast from integer and a domain's CHECK.
CREATE FUNCTION pagila.planted_cast(integer) RETURNS pagila.mpaa_rating LANGUAGE sql
  AS $$ SELECT 'G'::pagila.mpaa_rating $$;
CREATE CAST (integer AS pagila.mpaa_rating) WITH FUNCTION pagila.planted_cast(integer);
CREATE FUNCTION pagila.check_hook(integer) RETURNS boolean LANGUAGE sql AS $$ SELECT $1 > 0 $$;
CREATE DOMAIN pagila.hooked AS integer CHECK (pagila.check_hook(VALUE));
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA pagila FROM PUBLIC;

GRANT USAGE ON SCHEMA pagila, pagila2, hidden TO mcp_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA pagila, pagila2 TO mcp_reader;
