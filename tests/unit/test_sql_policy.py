"""The SQL policy rule by rule: allowlists, obfuscated names, lexing traps, regeneration.

Most tests need no server. Those marked `postgres` check the reviewed function allowlist
against PostgreSQL's catalogue, and that the SQL the policy regenerates computes exactly what
the caller's text computes.
"""

import re
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.tools import sql_functions
from mcp_server_suite.tools.sql import CheckedQuery, check_untrusted_sql
from mcp_server_suite.tools.sql_functions import (
    BUILTIN_FUNCTIONS,
    DENIED_FUNCTION_PREFIXES,
    DENIED_FUNCTIONS,
    FUNCTION_CLASSES,
    HARMLESS_VOLATILE,
    SYNTAX_FUNCTIONS,
    denial_reason,
)
from mcp_server_suite.tools.sql_policy import (
    ALLOWED_SYNTAX,
    FunctionPolicy,
    PolicyDialect,
    ensure_read_only,
    parse_untrusted_sql,
)
from tests.support.postgres import PostgresServer

POLICY = FunctionPolicy()


def checked(text: str, functions: FunctionPolicy = POLICY) -> CheckedQuery:
    return check_untrusted_sql(text, max_rows=50, functions=functions)


def refused(text: str, functions: FunctionPolicy = POLICY) -> ToolFailure:
    with pytest.raises(ToolFailure) as caught:
        checked(text, functions)
    return caught.value


# --- Roots and the tree ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("INSERT INTO t VALUES (1)", "INSERT is not allowed"),
        ("UPDATE t SET name = 'x'", "UPDATE is not allowed"),
        ("DELETE FROM t", "DELETE is not allowed"),
        ("MERGE INTO t USING v ON t.id = v.id WHEN MATCHED THEN DELETE", "MERGE is not allowed"),
        ("DROP TABLE t", "DROP is not allowed"),
        ("CREATE TEMP TABLE x1(a int)", "CREATE is not allowed"),
        ("ALTER TABLE t ADD COLUMN c int", "ALTER is not allowed"),
        ("TRUNCATE t", "TRUNCATE is not allowed"),
        ("GRANT SELECT ON t TO PUBLIC", "GRANT is not allowed"),
        ("REVOKE SELECT ON t FROM PUBLIC", "REVOKE is not allowed"),
        ("SET standard_conforming_strings = off", "SET is not allowed"),
        ("BEGIN", "Transaction control is not allowed"),
        ("COMMIT", "Transaction control is not allowed"),
        ("ROLLBACK", "Transaction control is not allowed"),
        ("COPY t TO STDOUT", "COPY is not allowed"),
        ("ANALYZE t", "ANALYZE is not allowed"),
        ("EXPLAIN (ANALYZE) DELETE FROM t", "EXPLAIN is not allowed"),
        ("DO $$ BEGIN END $$", "DO is not allowed"),
        ("CALL p()", "CALL is not allowed"),
        ("PREPARE p1 AS SELECT 1", "PREPARE is not allowed"),
        ("VACUUM t", "VACUUM is not allowed"),
        ("RESET ALL", "RESET is not allowed"),
        ("SHOW search_path", "SHOW is not allowed"),
        ("LISTEN ch", "This statement is not allowed"),
        ("NOTIFY ch", "This statement is not allowed"),
        ("CHECKPOINT", "This statement is not allowed"),
        ("DISCARD ALL", "This statement is not allowed"),
        ("VALUES (1)", "This statement is not allowed"),
        ("(SELECT 1)", "This statement is not allowed"),
    ],
)
def test_only_select_and_set_operations_are_roots(text: str, detail: str) -> None:
    failure = refused(text)
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert failure.problem.detail.startswith(detail), failure.problem.detail


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", "DELETE"),
        ("WITH d AS (INSERT INTO t VALUES (1) RETURNING *) SELECT * FROM d", "INSERT"),
        ("WITH d AS (UPDATE t SET id = 1 RETURNING *) SELECT 1 UNION SELECT 2", "UPDATE"),
        ("SELECT * INTO TEMP tmp1 FROM t", "SELECT INTO"),
        ("SELECT * FROM t WHERE id = 1 FOR UPDATE", "A row lock"),
        ("SELECT * FROM t FOR SHARE", "A row lock"),
        ("SELECT * FROM t FOR NO KEY UPDATE SKIP LOCKED", "A row lock"),
        ("SELECT * FROM t WHERE id = $1", "A bind parameter"),
        ("SELECT * FROM t WHERE id = %s", "A bind parameter"),
        ("SELECT * FROM t WHERE id = %(id)s", "A bind parameter"),
        ("SELECT * FROM t WHERE id = :id", "A bind parameter"),
        ("SELECT * FROM t WHERE id = ?", "A bind parameter"),
        ("SELECT 1 OPERATOR(public.#+#) 2", "An explicit OPERATOR() call"),
        ("SELECT 'a'::xml", "The xml type is not allowed"),
        ("SELECT CAST('<a/>' AS xml)", "The xml type is not allowed"),
    ],
)
def test_the_whole_tree_is_walked(text: str, detail: str) -> None:
    failure = refused(text)
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert detail in failure.problem.detail, failure.problem.detail


def test_unknown_syntax_nodes_fail_closed() -> None:
    root = parse_untrusted_sql("SELECT 1")
    root.set("hint", exp.Hint(expressions=[exp.Var(this="x")]))
    with pytest.raises(ToolFailure) as caught:
        ensure_read_only(root, POLICY)
    assert caught.value.problem.detail.startswith("The construct Hint is not allowed")


def test_allowed_syntax_names_plain_sqlglot_nodes() -> None:
    for name in ALLOWED_SYNTAX:
        cls = getattr(exp, name)
        assert isinstance(cls, type), name
        assert issubclass(cls, exp.Expr), name
        assert not issubclass(cls, exp.Func), name
        # No statement, DDL, DML or property class is allowed anywhere in a tree.
        assert cls.__module__.rsplit(".", 1)[1] in {"core", "query", "datatypes"}, name
    for refused_name in ("Insert", "Into", "Lock", "Command", "Set", "Operator", "Parameter"):
        assert refused_name not in ALLOWED_SYNTAX


# --- Functions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "SELECT pg_sleep(1)",
        "SELECT PG_SLEEP(1)",
        'SELECT "pg_sleep"(1)',
        'SELECT "PG_SLEEP"(1)',
        'SELECT U&"pg_sl\\0065ep"(3)',
        'SELECT U&"pg_s\\006ceep"(3)',
        "SELECT pg_catalog.pg_sleep(1)",
        'SELECT "pg_catalog"."pg_sleep"(1)',
        "SELECT public.pg_sleep(1)",
        "SELECT * FROM pg_sleep(1)",
        "SELECT * FROM pg_catalog.pg_sleep(1)",
        "SELECT * FROM ROWS FROM (pg_sleep(1), generate_series(1, 2))",
        "SELECT * FROM t, ROWS FROM (pg_read_file('/etc/passwd')) AS f(x)",
        "SELECT * FROM t, LATERAL pg_sleep(1)",
        "SELECT * FROM t CROSS JOIN LATERAL (SELECT pg_sleep(1)) AS s",
        "SELECT row_number() OVER (ORDER BY pg_sleep(0.01)) FROM t",
        "SELECT 1 WHERE EXISTS (SELECT pg_sleep(1))",
        "SELECT * FROM t GROUP BY id HAVING pg_sleep(0) IS NOT NULL",
        "SELECT * FROM t ORDER BY pg_sleep(1)",
        "SELECT * FROM t LIMIT (SELECT pg_sleep(1))::int",
        "SELECT * FROM t OFFSET (SELECT 1 FROM pg_sleep(1))",
        "WITH s AS (SELECT pg_sleep(1)) SELECT * FROM s",
        "SELECT 1 UNION SELECT pg_sleep(1)::int",
        "SELECT count(*) FILTER (WHERE pg_sleep(1) IS NULL) FROM t",
        "SELECT coalesce(NULL, pg_sleep(1))",
        "SELECT ARRAY[pg_sleep(1)]",
        "SELECT * FROM set_config('search_path', 'public', false)",
        "SELECT * FROM pg_terminate_backend(pg_backend_pid() + 1000000)",
        "SELECT dblink_connect('c1', 'dbname=app')",
        "SELECT * FROM dblink('dbname=app', 'SELECT 1') AS d(x int)",
        "SELECT lo_import('/etc/hostname')",
        "SELECT lo_from_bytea(0, 'x')",
        "SELECT loread(0, 1)",
        "SELECT txid_current()",
        "SELECT pg_current_xact_id()",
        "SELECT pg_advisory_lock(1)",
        "SELECT pg_try_advisory_xact_lock(1)",
        "SELECT pg_notify('c', 'x')",
        "SELECT nextval('s')",
        "SELECT setval('s', 100)",
        "SELECT currval('s')",
        "SELECT pg_logical_emit_message(false, 'p', 'x')",
        "SELECT pg_read_binary_file('/etc/passwd')",
        "SELECT * FROM pg_ls_dir('.')",
        "SELECT pg_stat_file('postgresql.conf')",
        "SELECT pg_stat_reset()",
        "SELECT pg_cancel_backend(1)",
        "SELECT query_to_xml('select 1', true, false, '')",
        "SELECT table_to_xml('private', true, false, '')",
        "SELECT schema_to_xml('public', true, false, '')",
        "SELECT database_to_xml(true, false, '')",
        "SELECT * FROM ts_stat('select to_tsvector(name) from t')",
        "SELECT ts_rewrite('a'::tsquery, 'select 1')",
        "SELECT lpad('', 1000000000, 'x')",
        "SELECT rpad('', 1000000000, 'x')",
        "SELECT repeat('x', 1000000000)",
        "SELECT format('%1000000000s', 'x')",
        "SELECT array_fill(0, ARRAY[100000000])",
        "SELECT setseed(0.5)",
        "SELECT xpath('/a', '<a/>')",
        "SELECT evil()",
        "SELECT evil_definer()",
        "SELECT public.lower('x')",
        'SELECT x FROM "public"."lower"(\'x\') AS x',
        "SELECT public.coalesce(1)",
        'SELECT "row"(1, 2)',
        "SELECT public.row(1, 2)",
        "SELECT app.public.lower('x')",
        "SELECT * FROM app.public.generate_series(1, 2)",
        "SELECT public.now()",
        "SELECT * FROM public.generate_series(1, 3)",
    ],
)
def test_functions_outside_the_allowlist_are_refused(text: str) -> None:
    failure = refused(text)
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert failure.problem.invalid_params == ("query",)


@pytest.mark.parametrize(
    "text",
    [
        "SELECT lower('X'), upper('x'), length('x'), now(), version()",
        "SELECT pg_catalog.lower('X')",
        'SELECT "lower"(\'X\'), "pg_catalog"."lower"(\'X\')',
        "SELECT * FROM generate_series(1, 3)",
        "SELECT * FROM pg_catalog.generate_series(1, 3)",
        "SELECT * FROM unnest(ARRAY[1, 2, 3]) WITH ORDINALITY",
        "SELECT ROW(1, 2), row(1, 'a')",
        "SELECT to_hex(255), like('abc', 'a%')",
        "SELECT count(*) FILTER (WHERE id > 1), string_agg(name, ',' ORDER BY id) FROM t",
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY id) FROM t",
        "SELECT jsonb_build_object('a', 1) -> 'a', '{1}'::int[] @> ARRAY[1]",
        "SELECT random(), clock_timestamp(), gen_random_uuid(), pg_relation_size('t')",
        "SELECT CURRENT_DATE, CURRENT_TIME, CURRENT_TIME(2), LOCALTIMESTAMP, CURRENT_USER",
    ],
)
def test_side_effect_free_functions_pass(text: str) -> None:
    checked(text)


def test_quoted_names_are_exact_and_unquoted_names_fold() -> None:
    assert "'PG_SLEEP'" in refused('SELECT "PG_SLEEP"(1)').problem.detail
    assert checked("SELECT LOWER('X')").sql == "SELECT LOWER('X') LIMIT 51"
    # sqlglot folds a quoted name it knows into its own class; what runs is the built-in it
    # renders, which is what was checked.
    assert checked("SELECT \"LOWER\"('X')").sql == "SELECT LOWER('X') LIMIT 51"


def test_denied_names_say_why() -> None:
    detail = refused("SELECT pg_advisory_lock(1)").problem.detail
    assert detail == (
        "Function pg_advisory_lock() is not allowed: advisory locks outlive the rolled-back "
        "transaction."
    )
    detail = refused("SELECT foo(1)").problem.detail
    assert detail.startswith("Function foo() is not allowed: only built-in functions")


def _tree_calling(node: exp.Func) -> exp.Query:
    root = parse_untrusted_sql("SELECT 1")
    root.set("expressions", [node])
    return root


def test_unknown_function_classes_are_named_as_postgresql_sees_them() -> None:
    # A class the policy has no entry for is judged by the name PostgreSQL would receive.
    call = exp.StDistance(this=exp.column("a"), expression=exp.column("b"))
    with pytest.raises(ToolFailure) as caught:
        ensure_read_only(_tree_calling(call), POLICY)
    assert "Function st_distance() is not allowed" in caught.value.problem.detail
    ensure_read_only(_tree_calling(call), FunctionPolicy(extra=frozenset({"st_distance"})))


def test_unnameable_function_classes_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_server_suite.tools import sql_policy

    call = exp.StDistance(this=exp.column("a"), expression=exp.column("b"))
    monkeypatch.setattr(sql_policy, "_rendered_name", lambda node: None)
    with pytest.raises(ToolFailure) as caught:
        ensure_read_only(_tree_calling(call), POLICY)
    assert "Function '<StDistance>'() is not allowed" in caught.value.problem.detail
    monkeypatch.undo()

    def fails(*args: Any, **kwargs: Any) -> str:
        raise TypeError("generator bug")

    monkeypatch.setattr(sql_policy._DIALECT, "generate", fails)
    assert sql_policy._rendered_name(call) is None


def test_configured_extra_functions() -> None:
    extra = FunctionPolicy(extra=frozenset({"my_fn", "postgis.st_area", "public.lower"}))
    checked("SELECT st_distance(a, b) FROM t", FunctionPolicy(extra=frozenset({"st_distance"})))
    checked("SELECT my_fn(1)", extra)
    checked("SELECT postgis.st_area(g) FROM t", extra)
    checked("SELECT public.lower('x')", extra)
    for text in ("SELECT public.my_fn(1)", "SELECT st_area(g) FROM t", "SELECT other.st_area(g)"):
        refused(text, extra)
    # The denylist wins over configuration.
    refused("SELECT pg_sleep(1)", FunctionPolicy(extra=frozenset({"pg_sleep"})))


# --- Lexing traps ------------------------------------------------------------------------------


@pytest.mark.parametrize("space", ["\u00a0", "\u2003", "\u3000", "\u2028", "\x0b", "\x1c", "\x85"])
def test_whitespace_postgresql_does_not_know_is_refused(space: str) -> None:
    failure = refused(f"SELECT{space}1")
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert f"U+{ord(space):04X}" in failure.problem.detail


def test_foreign_spaces_are_every_space_postgresql_does_not_know() -> None:
    from mcp_server_suite.tools.sql_policy import _FOREIGN_SPACE, _PG_WHITESPACE

    every = "".join(chr(code) for code in range(0x110000))
    expected = [char for char in every if char.isspace() and char not in _PG_WHITESPACE]
    assert expected  # U+00A0 and the other Unicode spaces.
    assert _FOREIGN_SPACE.findall(every) == expected


def test_unicode_spaces_inside_literals_and_identifiers_are_data() -> None:
    assert checked("SELECT 'a\u00a0b' AS \"c\u00a0d\"").sql == (
        "SELECT 'a\u00a0b' AS \"c\u00a0d\" LIMIT 51"
    )
    refused("SELECT 1 /* \u00a0 */")


@pytest.mark.parametrize(
    "text",
    [
        "SELECT 'a\\' , ' || pg_sleep(3)::text --'",
        "SELECT 'a\\'",
        "SELECT 'ab\\\\\\' , 'x'",
        "SELECT N'a\\'",
        "SELECT 'it''s\\'''",
        "SELECT 'a_c' LIKE 'a\\_c' ESCAPE '\\'",
    ],
)
def test_literals_that_end_elsewhere_without_standard_strings_are_refused(text: str) -> None:
    failure = refused(text)
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert "standard_conforming_strings" in failure.problem.detail


@pytest.mark.parametrize(
    ("text", "executed"),
    [
        ("SELECT '\\d+'", "SELECT e'\\\\d+' LIMIT 51"),
        ("SELECT 'a\\\\'", "SELECT e'a\\\\\\\\' LIMIT 51"),
        ("SELECT E'a\\\\b'", "SELECT e'a\\\\b' LIMIT 51"),
        ("SELECT $$a\\$$", "SELECT e'a\\\\' LIMIT 51"),
        ("SELECT $$plain$$", "SELECT 'plain' LIMIT 51"),
        ("SELECT N'a\\b'", "SELECT N'a\\b' LIMIT 51"),
        (
            "SELECT U&'\\0027; DROP TABLE victim; --'",
            "SELECT U&'\\0027; DROP TABLE victim; --' LIMIT 51",
        ),
    ],
)
def test_backslashes_run_only_inside_e_literals(text: str, executed: str) -> None:
    # The executed SQL holds no plain literal with a backslash, so its meaning does not
    # depend on standard_conforming_strings.
    assert checked(text).sql == executed


def test_untokenizable_and_unparsable_text_is_a_validation_error() -> None:
    for text in ("SELECT 'unterminated", "SELECT 1 #+# 2", "SELECT FROM WHERE"):
        assert refused(text).problem.code is MCPErrorCode.VALIDATION_ERROR


def test_parser_recursion_is_a_validation_error() -> None:
    for text in ("SELECT " + "(" * 3000 + "1" + ")" * 3000, "SELECT " + "- " * 4000 + "1"):
        failure = refused(text)
        assert failure.problem.code is MCPErrorCode.VALIDATION_ERROR
        assert "nests too deeply" in failure.problem.detail


def test_tokenizer_recursion_and_parser_crashes_fail_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mcp_server_suite.tools import sql_policy

    def deep(*args: Any, **kwargs: Any) -> Any:
        raise RecursionError

    monkeypatch.setattr(sql_policy._DIALECT, "tokenize", deep)
    assert "nests too deeply" in refused("SELECT 1").problem.detail
    monkeypatch.undo()

    class Broken(sql_policy._PolicyParser):
        def parse(self, *args: Any, **kwargs: Any) -> Any:
            raise KeyError("builder bug")

    monkeypatch.setattr(sql_policy._DIALECT, "parser", lambda **opts: Broken())
    assert refused("SELECT 1").problem.detail == "The query could not be parsed."

    class Empty(sql_policy._PolicyParser):
        def parse(self, *args: Any, **kwargs: Any) -> Any:
            raise sqlglot.errors.ParseError("")

    monkeypatch.setattr(sql_policy._DIALECT, "parser", lambda **opts: Empty())
    assert refused("SELECT 1").problem.detail == "The query could not be parsed: 'syntax error'"


def test_nested_comments_and_dollar_quotes_lex_like_postgresql() -> None:
    assert checked("SELECT /* /* */ ; DROP TABLE victim; */ 1").sql == "SELECT 1 LIMIT 51"
    assert checked("SELECT $$ ; DROP TABLE victim; $$").sql == (
        "SELECT ' ; DROP TABLE victim; ' LIMIT 51"
    )
    assert checked("SELECT 1 -- ; DROP TABLE victim").sql == "SELECT 1 LIMIT 51"
    assert checked('SELECT 1 AS "a;b""c"').sql == 'SELECT 1 AS "a;b""c" LIMIT 51'


# --- The reviewed function lists -------------------------------------------------------------


def test_function_lists_are_consistent() -> None:
    assert not [name for name in BUILTIN_FUNCTIONS if denial_reason(name)]
    assert HARMLESS_VOLATILE <= BUILTIN_FUNCTIONS
    assert set(FUNCTION_CLASSES.values()) <= BUILTIN_FUNCTIONS
    assert not set(FUNCTION_CLASSES) & SYNTAX_FUNCTIONS
    for name in (*FUNCTION_CLASSES, *SYNTAX_FUNCTIONS):
        assert issubclass(getattr(exp, name), exp.Func), name
    for name in (*DENIED_FUNCTIONS, *DENIED_FUNCTION_PREFIXES):
        assert name == name.lower()
    assert denial_reason("pg_sleep_for") == DENIED_FUNCTION_PREFIXES["pg_sleep"]
    assert denial_reason("abs") is None
    assert sql_functions.__all__


# Generic argument lists tried when a name is parsed on its own; sqlglot's builders want
# particular arities.
_ARGUMENT_SHAPES = ("", "1", "'a'", "1, 2", "'a', 'b'", "1, 2, 3", "'a', 'b', 'c'")
_SQL_KEYWORDS_CALLED_LIKE_FUNCTIONS = {
    "cast",
    "extract",
    "position",
    "substring",
    "trim",
    "overlay",
    "coalesce",
    "nullif",
    "greatest",
    "least",
    "exists",
    "array",
    "row",
    "in",
    "any",
    "all",
    "filter",
    "over",
    "interval",
    "grouping",
    "current_time",
    "case",
    "when",
    "then",
    "values",
    "collate",
    "localtime",
    "localtimestamp",
    "group",
    "and",
    "or",
    "not",
    "select",
}


def test_every_name_sqlglot_knows_renders_as_an_allowed_function() -> None:
    # The class allowlist holds whatever name sqlglot parsed into the class, so the invariant
    # is about what runs: every name the dialect's parser maps to a function class either is
    # refused or renders only built-ins from the allowlist.
    parser = PolicyDialect.parser_class
    names = {*parser.FUNCTIONS, *parser.FUNCTION_PARSERS}
    called = re.compile(r"([A-Za-z_][A-Za-z0-9_$]*)\s*\(")
    for name in sorted(names):
        for arguments in _ARGUMENT_SHAPES:
            try:
                result = checked(f"SELECT {name}({arguments})")
            except ToolFailure:
                continue
            rendered = {call.lower() for call in called.findall(result.sql)}
            unknown = rendered - BUILTIN_FUNCTIONS - _SQL_KEYWORDS_CALLED_LIKE_FUNCTIONS
            assert not unknown, (name, arguments, result.sql)


@pytest.mark.postgres
def test_allowlist_matches_the_catalogue(postgres_server: PostgresServer) -> None:
    with postgres_server.connect() as conn:
        rows = conn.execute(
            "SELECT p.proname, string_agg(DISTINCT p.provolatile::text, '') "
            "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'pg_catalog' GROUP BY p.proname"
        ).fetchall()
    volatility = {str(name): str(kinds) for name, kinds in rows}
    missing = BUILTIN_FUNCTIONS - set(volatility)
    assert not missing
    volatile = {name for name in BUILTIN_FUNCTIONS if "v" in volatility[name]}
    assert volatile == HARMLESS_VOLATILE


# --- Regeneration is faithful ------------------------------------------------------------------

# Each sample runs twice as the superuser in a read-only transaction: as written, and as the
# policy regenerated it. The results must be equal. They cover every function class the policy
# maps, the operators, literals of every kind and the clauses of a SELECT.
FIDELITY_SAMPLES = [
    "abs(-2.5)",
    "acos(0.5)",
    "acosh(2)",
    "array_agg(x ORDER BY x) FROM (VALUES (2),(1)) v(x)",
    "array_append(ARRAY[1,2], 3)",
    "array_length(ARRAY[1,2,3], 1)",
    "array_position(ARRAY['a','b'], 'b')",
    "array_prepend(0, ARRAY[1,2])",
    "array_remove(ARRAY[1,2,1], 1)",
    "array_to_string(ARRAY[1,NULL,3], ',', '*')",
    "array_to_string(ARRAY[1,2], '-')",
    "ascii('A')",
    "asin(0.5)",
    "asinh(1)",
    "atan(1)",
    "atan2(1, 2)",
    "atanh(0.5)",
    "avg(x) FROM (VALUES (1),(2)) v(x)",
    "bit_and(x), bit_or(x), bit_xor(x) FROM (VALUES (3),(5)) v(x)",
    "bit_length('abc')",
    "bool_and(x), bool_or(x) FROM (VALUES (true),(false)) v(x)",
    "btrim('xxaxx', 'x')",
    "btrim('  a  ')",
    "cbrt(27)",
    "ceil(1.2), ceiling(-1.2)",
    "chr(65)",
    "char_length('héllo'), character_length('abc'), length('héllo'), length('héllo'::bytea)",
    "length(convert_to('héllo', 'UTF8'), 'UTF8')",
    "concat('a', NULL, 2), concat_ws('-', 'a', NULL, 'b')",
    "corr(x, y), covar_pop(x, y), covar_samp(x, y) FROM (VALUES (1,2),(2,5),(3,7)) v(x,y)",
    "cos(1), cosh(1), cot(1)",
    "count(*), count(x), count(DISTINCT x) FROM (VALUES (1),(1),(NULL)) v(x)",
    "x, cume_dist() OVER (ORDER BY x) FROM (VALUES (1),(2)) v(x)",
    (
        "current_database(), current_schema(), current_schemas(true), current_user, session_user, "
        "current_schema"
    ),
    "date('2020-01-02 10:00'::timestamp)",
    "date_bin('15 minutes', '2020-02-11 15:44:17'::timestamp, '2001-01-01'::timestamp)",
    (
        "date_part('year', '2020-02-03'::date), date_part('epoch', "
        "'2020-02-03 00:00:00+00'::timestamptz)"
    ),
    "extract(year from '2020-02-03'::date), extract(epoch from interval '1 day')",
    (
        "date_trunc('day', '2020-02-03 10:11:12'::timestamp), date_trunc('month', "
        "'2020-02-03'::timestamptz, 'UTC')"
    ),
    "decode('YWJj', 'base64'), encode('abc'::bytea, 'hex'), encode('abc', 'base64')",
    "degrees(1), radians(90)",
    (
        "x, dense_rank() OVER (ORDER BY x), rank() OVER (ORDER BY x), "
        "row_number() OVER (ORDER BY x), percent_rank() OVER (ORDER BY x), "
        "ntile(2) OVER (ORDER BY x) FROM (VALUES (1),(1),(2)) v(x)"
    ),
    "div(7, 2), div(-7.5, 2)",
    "exp(1), ln(10), log(100), log10(1000), log(2, 8)",
    "factorial(5)",
    (
        "x, first_value(x) OVER w, last_value(x) OVER w, nth_value(x, 2) OVER w, lag(x) OVER w, "
        "lead(x, 1, "
        "0) OVER w FROM (VALUES (1),(2),(3)) v(x) WINDOW w AS (ORDER BY x ROWS BETWEEN UNBOUNDED PR"
        "ECEDING AND UNBOUNDED FOLLOWING)"
    ),
    "floor(-1.5)",
    "generate_series(1, 3)",
    "generate_series('2020-01-01'::date, '2020-01-03'::date, '1 day')",
    "generate_series(1, 10, 3)",
    "get_bit('\\x0f'::bytea, 4)",
    "host('192.168.1.5/24'::inet)",
    "initcap('hello wORLD')",
    "interval '1 day 2 hours', interval '1' day",
    "json_agg(x ORDER BY x) FROM (VALUES (2),(1)) v(x)",
    (
        "json_extract_path('{\"a\":{\"b\":1}}', 'a', 'b'), "
        "json_extract_path_text('{\"a\":{\"b\":1}}', 'a', 'b')"
    ),
    "json_object('{a,1,b,2}'), json_object('{a,b}', '{1,2}')",
    "json_object_agg(k, v ORDER BY k) FROM (VALUES ('a',1),('b',2)) t(k,v)",
    "jsonb_object_agg(k, v) FROM (VALUES ('a',1),('b',2)) t(k,v)",
    'json_strip_nulls(\'{"a":null,"b":1}\')',
    (
        "justify_days(interval '35 days'), justify_hours(interval '27 hours'), "
        "justify_interval(interval '1 mon -1 hour')"
    ),
    "left('abcde', 2), right('abcde', 2), left('abc', -1)",
    "like('abc', 'a%'), like('a%', 'abc')",
    "lower('ABC'), upper('abc')",
    "ltrim('xxa', 'x'), rtrim('axx', 'x'), ltrim('  a')",
    "make_interval(days => 1, hours => 2), make_interval(1, 2)",
    "make_time(1, 2, 3.5), make_timestamp(2020, 1, 2, 3, 4, 5)",
    "max(x), min(x), sum(x) FROM (VALUES (1),(2)) v(x)",
    "md5('abc')",
    "mod(7, 3), mod(-7, 3)",
    "mode() WITHIN GROUP (ORDER BY x) FROM (VALUES (1),(1),(2)) v(x)",
    "normalize('abc'), normalize('abc', NFKC)",
    "overlay('abcdef' placing 'xx' from 2 for 3)",
    (
        "percentile_cont(0.5) WITHIN GROUP (ORDER BY x), "
        "percentile_disc(0.5) WITHIN GROUP (ORDER BY x) FROM (VALUES (1),(2),(4)) v(x)"
    ),
    "pi()",
    "position('c' in 'abcd'), strpos('abcd', 'c')",
    "pow(2, 10), power(2.0, 0.5)",
    (
        "regexp_count('abcabc', 'b'), regexp_instr('abcabc', 'c'), regexp_like('abc', 'B', 'i'), "
        "regexp_substr('abc123', '\\d+')"
    ),
    (
        "regexp_replace('abcabc', 'b', 'x'), regexp_replace('abcabc', 'b', 'x', 'g'), "
        "regexp_replace('abcabc', 'b', 'x', 1, 2), regexp_replace('Abc', 'a', 'x', 'gi')"
    ),
    (
        "regr_avgx(y, x), regr_avgy(y, x), regr_count(y, x), regr_intercept(y, x), regr_r2(y, x), "
        "regr_slope(y, x), regr_sxx(y, x), regr_sxy(y, x), regr_syy(y, "
        "x) FROM (VALUES (1,2),(2,5),(3,7)) v(x,y)"
    ),
    "replace('abcb', 'b', 'x'), reverse('abc'), translate('abc', 'ab', 'xy')",
    "round(2.567, 1), round(2.5), round(-2.5::float8), trunc(2.567, 2), trunc(-2.5)",
    "sha256('abc'::bytea), sha384('abc'::bytea), sha512('abc'::bytea)",
    "sign(-3), sin(1), sinh(1), tan(1), tanh(1), sqrt(2)",
    "split_part('a,b,c', ',', 2), split_part('a,b,c', ',', -1)",
    (
        "stddev(x), stddev_pop(x), stddev_samp(x), variance(x), var_pop(x), "
        "var_samp(x) FROM (VALUES (1),(2),(4)) v(x)"
    ),
    "string_agg(x, ',' ORDER BY x) FROM (VALUES ('b'),('a')) v(x)",
    "string_to_array('a,b,,c', ','), string_to_array('a,b,x', ',', 'x')",
    (
        "substr('abcdef', 2), substr('abcdef', 2, 3), substring('abcdef' from 2 for 3), "
        "substring('abcdef', 2), substring('abc123' from '\\d+')"
    ),
    "time '10:11:12', timestamp '2020-01-02 03:04:05'",
    (
        "to_char('2020-01-02 03:04:05'::timestamp, 'YYYY-MM-DD HH24:MI:SS'), "
        "to_char('2020-01-02'::date, 'Mon DD, YYYY Day'), to_char(1234.5, 'FM9,999.00'), "
        "to_char(interval '25 hours', 'HH24:MI'), to_char('2020-01-02 03:04:05'::timestamp, "
        "'IYYY-IW \"w\" TMMonth dy am FMDD')"
    ),
    "to_date('2024-01-02', 'YYYY-MM-DD'), to_date('02 Jan 2024', 'DD Mon YYYY')",
    "to_hex(255), to_hex(-1::bigint)",
    "to_number('12,454.8-', '99G999D9S')",
    "to_timestamp('2024-01-02 10:11', 'YYYY-MM-DD HH24:MI'), to_timestamp(0)",
    "unnest(ARRAY[1,2])",
    "width_bucket(5.35, 0.024, 10.06, 5)",
    "gen_random_uuid() IS NOT NULL, random() < 2, now() IS NOT NULL, version() IS NOT NULL",
    (
        "current_timestamp IS NOT NULL, current_date IS NOT NULL, localtimestamp IS NOT NULL, "
        "current_time IS NOT NULL, localtime IS NOT NULL"
    ),
    (
        "CASE WHEN 1 = 1 THEN 'a' END, coalesce(NULL, 2), nullif(1, 1), greatest(1, 3, 2), "
        "least(1, 3, 2)"
    ),
    (
        "'abc' LIKE 'a%', 'abc' ILIKE 'A%', 'abc' NOT LIKE 'b%', 'abc' SIMILAR TO 'a(b|c)%', "
        "'abc' ~ 'b', 'abc' ~* 'B', 'abc' !~ 'x', 'abc' !~* 'X'"
    ),
    "'a_c' LIKE 'a#_c' ESCAPE '#'",
    (
        "1 + 2 * 3 - 4 / 2, 7 % 3, 2 ^ 3, 7 / 2, 7.0 / 2, -(1), 5 & 3, 5 | 3, 5 # 3, ~5, 1 << 3, "
        "16 >> 2"
    ),
    (
        "'a' || 'b', ARRAY[1] || ARRAY[2], '{\"a\":1}'::jsonb || '{\"b\":2}'::jsonb, "
        "'ab'::bytea || 'c'::bytea"
    ),
    (
        "'{\"a\":{\"b\":[1,2]}}'::jsonb -> 'a', '{\"a\":1}'::jsonb ->> 'a', "
        "'{\"a\":{\"b\":1}}'::jsonb #> '{a,b}', '{\"a\":{\"b\":1}}'::jsonb #>> '{a,b}', "
        "'[1,2]'::jsonb -> 0"
    ),
    (
        '\'{"a":1}\'::jsonb @> \'{"a":1}\', \'{"a":1}\'::jsonb <@ \'{"a":1,"b":2}\', '
        "'{\"a\":1}'::jsonb ? 'a', '{\"a\":1}'::jsonb ?| ARRAY['a','c'], "
        "'{\"a\":1}'::jsonb ?& ARRAY['a']"
    ),
    (
        "ARRAY[1,2] @> ARRAY[1], ARRAY[1] <@ ARRAY[1,2], ARRAY[1,2] && ARRAY[2,3], "
        "(ARRAY[1,2,3])[2], (ARRAY[1,2,3])[2:3], ARRAY[[1,2],[3,4]]"
    ),
    (
        "'192.168.1.5'::inet << '192.168.1.0/24'::cidr, "
        "'192.168.1.0/24'::cidr >> '192.168.1.5'::inet, masklen('10.0.0.0/8'::cidr), "
        "family('::1'::inet), broadcast('192.168.1.5/24'::inet), network('192.168.1.5/24'::inet)"
    ),
    (
        "int4range(1, 10) @> 5, lower(int4range(1, 10)), upper(int4range(1, 10)), "
        "isempty(int4range(1, 1)), int4range(1, 5) && int4range(3, 7), int4range(1, "
        "5) * int4range(3, 7), int4range(1, 5) + int4range(3, 7), upper_inf(int4range(1, NULL))"
    ),
    (
        "1 BETWEEN 0 AND 2, 1 NOT BETWEEN 0 AND 2, 1 IN (1, 2), 1 NOT IN (2), NULL IS NULL, "
        "1 IS NOT NULL, 1 IS DISTINCT FROM 2, 1 IS NOT DISTINCT FROM 1, true IS TRUE, "
        "NULL IS UNKNOWN"
    ),
    (
        "1 = ANY(ARRAY[1, 2]), 1 = ALL(ARRAY[1, 1]), EXISTS (SELECT 1), 1 IN (SELECT 1), "
        "2 > SOME (SELECT 1)"
    ),
    (
        "CAST('1' AS int), '1'::int8, '1.5'::numeric(4, 2), '{1,2}'::int[], 'a'::varchar(3), "
        "'a'::char(3), now()::timestamp(0) IS NOT NULL, 1.5::float4, 1::double precision, "
        "'1'::\"char\", '10:00'::time(0), '1 day'::interval, 'a'::text, 'a'::name, "
        "true::text, '1'::smallint, '2020-01-01'::date, '1'::oid, 'x'::bytea, '1'::bit(3), "
        "'101'::varbit"
    ),
    (
        "'2020-01-01 10:00'::timestamp AT TIME ZONE 'UTC', "
        "'2020-01-01 10:00+00'::timestamptz AT TIME ZONE 'Asia/Tokyo'"
    ),
    "'abc' COLLATE \"C\", 'b' > 'a' COLLATE \"C\"",
    "ROW(1, 'a'), (1, 2) = (1, 2), ROW(1, 2) < ROW(1, 3)",
    "ARRAY(SELECT x FROM (VALUES (1), (2)) v(x) ORDER BY x), ARRAY[]::int[]",
    (
        "E'a\\nb', E'\\x41', E'it\\'s', $$a$$, $q$it's$q$, U&'d\\0061t\\+000061', "
        "U&'d!0061t!+000061' UESCAPE '!', B'101', X'1F'"
    ),
    (
        "'NaN'::float8, 'Infinity'::float8, '-Infinity'::float8, 'NaN'::numeric, "
        "'Infinity'::numeric, 1e300::float8 * 10"
    ),
    (
        "json_build_object('a', 1, 'b', ARRAY[1]), jsonb_build_array(1, 'a'), to_json('a'::text), "
        "to_jsonb(ROW(1, 'a')), jsonb_pretty('{\"a\":1}'), jsonb_set('{\"a\":1}', '{a}', "
        "'2'), jsonb_path_query_array('{\"a\":[1,2]}', '$.a[*] ? (@ > 1)')"
    ),
    (
        "array_dims(ARRAY[[1,2]]), array_lower(ARRAY[1], 1), array_upper(ARRAY[1,2], 1), "
        "array_ndims(ARRAY[1]), cardinality(ARRAY[1,2]), array_replace(ARRAY[1,2], 2, 3), "
        "array_positions(ARRAY[1,2,1], 1), array_cat(ARRAY[1], ARRAY[2]), "
        "trim_array(ARRAY[1,2,3], 1)"
    ),
    (
        "quote_ident('a b'), quote_literal('it''s'), quote_nullable(NULL), md5('x'), "
        "starts_with('abc', 'ab'), to_ascii('abc'), unistr('\\0041'), octet_length('é'), "
        "string_to_table('a,b', ',')"
    ),
    "x FROM unnest(ARRAY[3, 1]) WITH ORDINALITY AS u(x, n) ORDER BY n",
    "* FROM generate_series(1, 3) AS g(x) WHERE x > 1",
    "* FROM ROWS FROM (generate_series(1, 2), generate_series(1, 3)) AS r(a, b)",
    '* FROM jsonb_each(\'{"a":1,"b":2}\') ORDER BY key',
    '* FROM jsonb_to_record(\'{"a":1,"b":"x"}\') AS r(a int, b text)',
    "* FROM (VALUES (1, 'a'), (2, 'b')) AS v(x, y) ORDER BY x DESC",
    "x FROM (VALUES (1), (2), (3)) v(x) ORDER BY x DESC NULLS LAST OFFSET 1",
    "x, count(*) FROM (VALUES (1), (2), (2)) v(x) GROUP BY x HAVING count(*) > 1",
    (
        "x % 2, count(*) FROM (VALUES (1), (2), "
        "(3)) v(x) GROUP BY ROLLUP (x % 2) ORDER BY 1 NULLS FIRST"
    ),
    "count(*) FILTER (WHERE x > 1) FROM (VALUES (1), (2), (3)) v(x)",
    "DISTINCT ON (x % 2) x FROM (VALUES (1), (2), (3)) v(x) ORDER BY x % 2, x DESC",
    "1 UNION SELECT 2 ORDER BY 1",
    "* FROM (SELECT 1 AS a) s CROSS JOIN LATERAL (SELECT s.a + 1 AS b) l",
    "x FROM (VALUES (1), (2), (3)) v(x) FETCH FIRST 2 ROWS ONLY",
    (
        "ts_rank(to_tsvector('english', 'a fat cat'), to_tsquery('english', 'cat')), "
        "to_tsvector('simple', 'a b') @@ plainto_tsquery('simple', 'a')"
    ),
    (
        "age('2021-01-01'::timestamp, '2020-01-01'::timestamp), isfinite('infinity'::date), "
        "make_date(2020, 1, 2), pg_size_pretty(12345678::bigint), pg_typeof(1), format_type(23, "
        "NULL)"
    ),
    (
        "'private'::regclass, to_regclass('t'), has_table_privilege('t', 'SELECT'), "
        "pg_get_viewdef('v'::regclass) IS NOT NULL, obj_description('t'::regclass, 'pg_class')"
    ),
]

# Samples sqlglot cannot parse; they are refused, never approximated.
UNPARSABLE_SAMPLES = {"json_object('{a,1,b,2}'), json_object('{a,b}', '{1,2}')"}


def _same(left: Any, right: Any) -> bool:
    if left != left:  # NaN, float or Decimal, equals nothing, not even itself.  # noqa: PLR0124
        return bool(right != right)  # noqa: PLR0124
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return len(left) == len(right) and all(map(_same, left, right))
    return bool(left == right)


@pytest.mark.postgres
def test_regenerated_sql_computes_what_the_text_computes(postgres_server: PostgresServer) -> None:
    mismatches = []
    with postgres_server.connect() as conn:

        def run(text: str) -> Any:
            try:
                with conn.transaction():
                    conn.execute("SET TRANSACTION READ ONLY")
                    return ("rows", conn.execute(text).fetchall())
            except Exception as exc:  # noqa: BLE001  # Errors are compared like results.
                return ("error", type(exc).__name__)

        for sample in FIDELITY_SAMPLES:
            text = f"SELECT {sample}"
            try:
                executed = checked(text).sql
            except ToolFailure:
                assert sample in UNPARSABLE_SAMPLES, sample
                continue
            original, regenerated = run(text), run(executed)
            if not _same(original, regenerated):
                mismatches.append((text, executed, original, regenerated))
    assert not mismatches
