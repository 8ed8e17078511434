"""Each refusal of read_only_sql's resolved-tree check, reached through a real server.

The objects behind each refusal are made by the superuser (as an operator's schema holds
them) and read through the tool as the fixture's reader: an operator whose function nobody
allowed, a domain over `xml`, domains whose CHECK calls a function nobody allowed or names
another user type, chains of domains, a CHECK and a view nested past what the tree reader
reads, a view reading XMLTABLE, a view inside a view, and a column name that
`format_node_dump()` must break inside. Each test asserts the whole problem the caller gets.
"""

from collections.abc import Iterator
from typing import Final

import psycopg
import pytest

from mcp_server_suite.schemas.echo import quote
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.tools.sql.code_catalog import MAX_LOOKUP_ROUNDS
from mcp_server_suite.tools.sql.node_text import MAX_DEPTH
from tests.support.postgres import READER_ROLE, PostgresServer, reader_settings
from tests.unit.test_sql_tool import query, query_failure

pytestmark = pytest.mark.postgres

# Each NOT is two levels of node text (a BoolExpr and its argument list): this many pass
# MAX_DEPTH. PostgreSQL analyses them under the superuser's larger stack (below).
NOTS: Final = MAX_DEPTH // 2 + 50
# The superuser's stack for the statements that make the nested objects (the server's
# default, 2 MB, stops their analysis; 6 MB stays below the usual 8 MB process limit).
DEEP_STACK: Final = "6MB"
# A column name that node text writes as 62 escaped parentheses: 124 bytes without a space.
LONG_NAME: Final = "(" * 62
# A domain whose name a refusal must quote (a semicolon is not in a plain catalog name).
ODD_DOMAIN: Final = "checked;domain"

SETUP: Final = (
    # An operator over a user type, whose function nobody allowed: DISTINCT, ORDER BY and
    # GROUP BY call it through the type's default operator class.
    "CREATE TYPE public.pair AS (v int)",
    "CREATE FUNCTION public.pair_eq(public.pair, public.pair) RETURNS boolean "
    "LANGUAGE sql IMMUTABLE AS 'SELECT $1.v = $2.v'",
    "CREATE FUNCTION public.pair_lt(public.pair, public.pair) RETURNS boolean "
    "LANGUAGE sql IMMUTABLE AS 'SELECT $1.v < $2.v'",
    "CREATE FUNCTION public.pair_cmp(public.pair, public.pair) RETURNS int LANGUAGE sql "
    "IMMUTABLE AS 'SELECT CASE WHEN $1.v < $2.v THEN -1 WHEN $1.v > $2.v THEN 1 ELSE 0 END'",
    "CREATE OPERATOR public.= (LEFTARG = public.pair, RIGHTARG = public.pair, "
    "FUNCTION = public.pair_eq)",
    "CREATE OPERATOR public.< (LEFTARG = public.pair, RIGHTARG = public.pair, "
    "FUNCTION = public.pair_lt)",
    "CREATE OPERATOR CLASS public.pair_ops DEFAULT FOR TYPE public.pair USING btree AS "
    "OPERATOR 1 public.<, OPERATOR 3 public.=, "
    "FUNCTION 1 public.pair_cmp(public.pair, public.pair)",
    # Domains: over xml, with a CHECK calling a function nobody allowed, with a CHECK that
    # names another user type, and with a CHECK nested past MAX_DEPTH.
    "CREATE DOMAIN public.d_xml AS xml",
    "CREATE FUNCTION public.any_check(text) RETURNS boolean LANGUAGE sql AS 'SELECT true'",
    "CREATE DOMAIN public.d_checked AS text CHECK (public.any_check(VALUE))",
    f'CREATE DOMAIN public."{ODD_DOMAIN}" AS text CHECK (public.any_check(VALUE))',
    "CREATE TYPE public.feeling AS ENUM ('happy', 'sad')",
    "CREATE DOMAIN public.d_feeling AS text CHECK (VALUE::public.feeling IS NOT NULL)",
    # Composite types: one with an xml attribute, one with an attribute of the domain whose
    # CHECK calls a function nobody allowed, one with two attributes of one user type.
    "CREATE TYPE public.xml_pair AS (doc xml)",
    "CREATE TYPE public.checked_pair AS (v public.d_checked)",
    "CREATE TYPE public.two_feelings AS (a public.feeling, b public.feeling)",
    f"SET max_stack_depth = '{DEEP_STACK}'",
    "CREATE DOMAIN public.d_deep AS int CHECK (" + "NOT " * NOTS + "(VALUE > 0))",
    "CREATE VIEW public.v_deep AS SELECT " + "NOT " * NOTS + "true AS x",
    "RESET max_stack_depth",
    # A chain of domains, one lookup each, one longer than the lookups a query may take.
    "CREATE DOMAIN public.chain_1 AS int",
    *(
        f"CREATE DOMAIN public.chain_{n} AS public.chain_{n - 1}"
        for n in range(2, MAX_LOOKUP_ROUNDS + 2)
    ),
    # A view reading XMLTABLE (the policy refuses it in the caller's own text), and a view
    # inside a view.
    "CREATE TABLE public.docs (doc xml)",
    "CREATE VIEW public.v_xmltable AS SELECT x.a FROM public.docs, "
    "XMLTABLE('/r' PASSING docs.doc COLUMNS a int PATH 'a') AS x",
    "CREATE VIEW public.v_inner AS SELECT 1 AS a",
    "CREATE VIEW public.v_outer AS SELECT a FROM public.v_inner",
    f"GRANT SELECT ON public.docs, public.v_xmltable, public.v_inner, public.v_outer, "
    f"public.v_deep TO {READER_ROLE}",
)
TEARDOWN: Final = (
    "DROP VIEW IF EXISTS public.v_outer, public.v_inner, public.v_xmltable, public.v_deep",
    "DROP TABLE IF EXISTS public.docs",
    *(f"DROP DOMAIN IF EXISTS public.chain_{n}" for n in range(MAX_LOOKUP_ROUNDS + 1, 0, -1)),
    "DROP TYPE IF EXISTS public.xml_pair, public.checked_pair, public.two_feelings",
    "DROP DOMAIN IF EXISTS public.d_deep, public.d_feeling, public.d_checked, public.d_xml",
    f'DROP DOMAIN IF EXISTS public."{ODD_DOMAIN}"',
    "DROP TYPE IF EXISTS public.feeling",
    "DROP FUNCTION IF EXISTS public.any_check(text)",
    "DROP OPERATOR CLASS IF EXISTS public.pair_ops USING btree",
    "DROP OPERATOR IF EXISTS public.< (public.pair, public.pair)",
    "DROP OPERATOR IF EXISTS public.= (public.pair, public.pair)",
    "DROP FUNCTION IF EXISTS public.pair_cmp(public.pair, public.pair), "
    "public.pair_lt(public.pair, public.pair), public.pair_eq(public.pair, public.pair)",
    "DROP TYPE IF EXISTS public.pair",
)


@pytest.fixture(scope="module")
def objects(postgres_server: PostgresServer) -> Iterator[PostgresServer]:
    try:
        with postgres_server.connect() as conn:
            for statement in SETUP:
                conn.execute(statement)
        yield postgres_server
    finally:
        with postgres_server.connect() as conn:
            for statement in TEARDOWN:
                conn.execute(statement)


def _has_libxml(server: PostgresServer) -> bool:
    with server.connect() as conn:
        try:
            conn.execute("SELECT '<a/>'::xml")
        except psycopg.errors.FeatureNotSupported:
            return False
    return True


def _violation(server: PostgresServer, text: str) -> ToolFailure:
    failure = query_failure(reader_settings(server), text)
    assert failure.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert failure.problem.invalid_params == ("query",)
    return failure


OPERATOR_REFUSED: Final = (
    "The operator public.=(public.pair,public.pair) (public.pair_eq(public.pair,public.pair)) "
    "is not allowed: the function behind it is not one that may run (list it in "
    "MCP_SQL_ALLOWED_FUNCTIONS to allow it)."
)
DOMAIN_REFUSED: Final = (
    "The domain public.d_checked is not allowed: a CHECK constraint of it calls a function "
    "that may not run."
)


@pytest.mark.parametrize(
    ("text", "detail", "kind"),
    [
        ("SELECT DISTINCT NULL::public.pair", OPERATOR_REFUSED, "operator"),
        (
            "SELECT p FROM (VALUES (NULL::public.pair)) AS x(p) ORDER BY p",
            OPERATOR_REFUSED,
            "operator",
        ),
        (
            "SELECT p FROM (VALUES (NULL::public.pair)) AS x(p) GROUP BY p",
            OPERATOR_REFUSED,
            "operator",
        ),
        ("SELECT 'a'::public.d_checked", DOMAIN_REFUSED, "domain"),
        # Types made of the domain: a composite type (its input calls the domain's, whose
        # CHECK calls the function) and an array. Nulls: a literal's input would run the
        # CHECK as PostgreSQL analyses the query, where the role's privileges decide.
        ("SELECT NULL::public.checked_pair", DOMAIN_REFUSED, "domain"),
        ("SELECT NULL::public.d_checked[]", DOMAIN_REFUSED, "domain"),
    ],
)
def test_code_nobody_allowed_behind_an_operator_or_a_domain_is_refused(
    objects: PostgresServer, text: str, detail: str, kind: str
) -> None:
    # DISTINCT, ORDER BY and GROUP BY call the operator through the type's operator class.
    failure = _violation(objects, text)
    assert failure.problem.detail == detail
    assert failure.problem.metadata == {"refused": kind}


@pytest.mark.parametrize(
    ("text", "made"),
    [
        # A domain over xml: the constant is xml's.
        ("SELECT NULL::public.d_xml", "xml"),
        ("SELECT '<a/>'::public.d_xml", "xml"),
        # Types whose input function calls xml's on part of the text: an array of the
        # domain, a composite type, a table's row type with an xml column.
        ("""SELECT '{"<a/>"}'::public.d_xml[]""", "public.d_xml[]"),
        ("SELECT NULL::public.d_xml[]", "public.d_xml[]"),
        ("""SELECT '("<a/>")'::public.xml_pair""", "public.xml_pair"),
        ("""SELECT '("<a/>")'::public.docs""", "public.docs"),
        ("""SELECT ('("<a/>")'::public.xml_pair).doc::text""", "public.xml_pair"),
    ],
)
def test_xml_made_from_text_through_another_type_is_refused(
    objects: PostgresServer, text: str, made: str
) -> None:
    if "<a/>" in text and not _has_libxml(objects):
        # PostgreSQL analyses a literal by running its input function, which on a server
        # built without libxml (PyPI's PostgreSQL 18) refuses any XML at once.
        failure = query_failure(reader_settings(objects), text)
        assert failure.problem.code is MCPErrorCode.VALIDATION_ERROR
        assert failure.problem.detail == (
            "PostgreSQL refused the query (SQLSTATE 0A000): 'unsupported XML feature'."
        )
        return
    failure = _violation(objects, text)
    assert failure.problem.detail == (
        f"Values of the type {made} may not be made from text in a query: its input function "
        "parses XML in libxml2, which the statement timeout cannot stop."
    )
    assert failure.problem.metadata == {"refused": "input"}


def test_a_domain_whose_check_names_another_user_type_runs(objects: PostgresServer) -> None:
    # The CHECK's own types are looked up too (the enum's support functions are built in).
    assert query(reader_settings(objects), "SELECT 'happy'::public.d_feeling").rows == [["happy"]]


def test_a_composite_type_of_allowed_attributes_runs(objects: PostgresServer) -> None:
    text = """SELECT ('(happy,sad)'::public.two_feelings).b::text"""
    assert query(reader_settings(objects), text).rows == [["sad"]]


def test_a_chain_of_domains_is_checked_up_to_the_lookup_bound(objects: PostgresServer) -> None:
    settings = reader_settings(objects)
    # One lookup per domain: a chain of MAX_LOOKUP_ROUNDS is decided with what they found.
    text = f"SELECT 7::public.chain_{MAX_LOOKUP_ROUNDS}"
    assert query(settings, text).rows == [[7]]
    failure = _violation(objects, f"SELECT 7::public.chain_{MAX_LOOKUP_ROUNDS + 1}")
    assert failure.problem.detail == (
        "The query resolves to types nested too deeply to be checked, which is not allowed "
        "in a read-only query."
    )


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        # A CHECK nested past MAX_DEPTH: its stored tree cannot be read.
        (
            "SELECT 1::public.d_deep",
            "The query resolves to a domain's CHECK constraint, which is not allowed in a "
            "read-only query.",
        ),
        # A view nested past MAX_DEPTH: the query's own tree cannot be read.
        (
            "SELECT x FROM public.v_deep",
            "The query could not be checked as PostgreSQL resolves it: the tree nests too "
            "deeply to be checked.",
        ),
        (
            "SELECT a FROM public.v_xmltable",
            "The query resolves to XMLTABLE, which is not allowed in a read-only query.",
        ),
    ],
)
def test_what_the_tree_reader_does_not_check_is_refused(
    objects: PostgresServer, text: str, detail: str
) -> None:
    assert _violation(objects, text).problem.detail == detail


def test_a_view_inside_a_view_runs(objects: PostgresServer) -> None:
    assert query(reader_settings(objects), "SELECT a FROM public.v_outer").rows == [[1]]


def test_a_name_the_tree_printer_must_break_is_refused(objects: PostgresServer) -> None:
    # format_node_dump() cuts a run of more than 77 bytes without a space anywhere: a cut
    # inside a name cannot be told from a space (node_text.py, Rule 3).
    failure = _violation(objects, f'SELECT 1 AS "{LONG_NAME}"')
    assert failure.problem.detail == (
        "The query could not be checked as PostgreSQL resolves it: a line break of the "
        "tree's text may split a name."
    )
    # Half the name has no cut in it, and runs.
    result = query(reader_settings(objects), f'SELECT 1 AS "{LONG_NAME[:31]}"')
    assert result.columns == [LONG_NAME[:31]]
    assert result.rows == [[1]]


def test_a_refused_name_that_is_not_plain_is_quoted(objects: PostgresServer) -> None:
    failure = _violation(objects, f'SELECT NULL::public."{ODD_DOMAIN}"')
    written = f'public."{ODD_DOMAIN}"'
    assert failure.problem.detail == (
        f"The domain {quote(written, 120)} is not allowed: a CHECK constraint of it calls a "
        "function that may not run."
    )


def test_a_subquery_without_an_alias_runs_where_the_server_reads_it(
    postgres_server: PostgresServer,
) -> None:
    # PostgreSQL 16 made the alias optional; 15 refuses the syntax, and no later major's
    # name is the reason: PostgreSQL's own message is the answer.
    text = "SELECT * FROM (SELECT 1) LIMIT 1"
    settings = reader_settings(postgres_server)
    if postgres_server.major >= 16:
        assert query(settings, text).rows == [[1]]
        return
    failure = query_failure(settings, text)
    assert failure.problem.code is MCPErrorCode.VALIDATION_ERROR
    assert failure.problem.detail == (
        "PostgreSQL refused the query (SQLSTATE 42601): 'subquery in FROM must have an alias'."
    )
    assert failure.problem.metadata == {"sqlstate": "42601"}


def test_an_object_missing_by_another_kind_keeps_postgresqls_message(
    postgres_server: PostgresServer,
) -> None:
    # 42704 for a text search configuration: not a relation or type looked up by name.
    failure = query_failure(
        reader_settings(postgres_server), "SELECT pg_catalog.to_tsvector('nosuch_config', 'x')"
    )
    assert failure.problem.code is MCPErrorCode.VALIDATION_ERROR
    assert failure.problem.detail == (
        "PostgreSQL refused the query (SQLSTATE 42704): 'text search configuration "
        '"nosuch_config" does not exist\'.'
    )
    assert failure.problem.metadata == {"sqlstate": "42704"}
