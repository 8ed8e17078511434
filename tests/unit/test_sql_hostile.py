"""Planted code never runs: the round-2 corpus against a hostile database, as two roles.

The hostile database (`tests/vectors/sql_round2_fixture.sql`) plants overloads, an aggregate,
operators, casts, a domain, attribute-notation functions, views and a forced row-level
security policy in `public`, each writing evidence through dblink, COPY or a SECURITY
DEFINER function when it runs. Every case of `sql_round2.json` runs through the whole tool,
and members of each class the sample does not hold are generated and planted here (other
overload names and argument types, other operators, casts on other user types, views and
policies on other tables), as two roles:

- `mcp_ro`, made by `scripts/least-privilege-role.sql` with `revoke_public_execute`;
- `mcp_rw`, a non-superuser that owns the tables and may create in `public`.

After every case the database is unchanged: rows of every table (the evidence log
included), sequences, large objects, the next transaction id, what a logical slot decodes
(WAL logical messages, changes), the evidence directory, and the role's other sessions are
alive. Refusing is always acceptable; `mcp_rw` is refused in-band by the role audit.
On the clean database (the same tables, nothing planted) every `legit` case runs as `mcp_ro`.
"""

import asyncio
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import psycopg
import pytest

from mcp_server_suite.config import SecretStr, Settings
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.schemas.sql import ReadOnlySQLParams
from mcp_server_suite.tools.sql.functions import BUILTIN_FUNCTIONS
from mcp_server_suite.tools.sql.policy import FunctionPolicy
from mcp_server_suite.tools.sql.tool import SQLTool, check_untrusted_sql
from tests.support.postgres import (
    CLEAN_DATABASE,
    HOSTILE_OWNER,
    HOSTILE_READER,
    PostgresServer,
    hostile_state,
)

VECTORS: Final = Path(__file__).resolve().parents[1] / "vectors"
CORPUS_SHA256: Final = "cee41c375390d5c0d693c6e2a95e1ab0898bd5399824c631ccb0053f707f5535"
FIXTURE_SHA256: Final = "7e1293d9693a0675d8c352a6057e0eb65dd17af03fda265a4ab8c98bb61d35ec"
CASES: Final[list[dict[str, Any]]] = json.loads((VECTORS / "sql_round2.json").read_text("utf-8"))
# Legitimate cases that call a function refused since issue 19 because the statement timeout
# cannot stop it (functions.UNINTERRUPTIBLE): they are refused in-band, naming the function
# and the alternative the timeout does stop.
REFUSED_SINCE_ROUND3: Final = {"M33": "position", "M57": "ts_rank"}
LEGIT: Final = [
    case for case in CASES if case["class"] == "legit" and case["id"] not in REFUSED_SINCE_ROUND3
]

pytestmark = pytest.mark.postgres


def test_corpus_is_the_recorded_copy() -> None:
    assert hashlib.sha256((VECTORS / "sql_round2.json").read_bytes()).hexdigest() == (CORPUS_SHA256)
    fixture = (VECTORS / "sql_round2_fixture.sql").read_bytes()
    assert hashlib.sha256(fixture).hexdigest() == FIXTURE_SHA256
    assert len(CASES) == 101
    assert len(LEGIT) + len(REFUSED_SINCE_ROUND3) == 16


def _settings(server: PostgresServer, user: str, database: str = "app", **extra: Any) -> Settings:
    return Settings(
        sql_dsn=SecretStr(server.dsn(user, database=database)),
        sql_query_timeout=2.0,
        sql_connect_timeout=5.0,
        sql_pool_max_size=2,
        **extra,
    )


def _text(case: dict[str, Any], server: PostgresServer, evidence: Path) -> str:
    return (
        str(case["query"])
        .replace("{EVIDENCE_DIR}", str(evidence))
        .replace("{SOCKET_DIR}", str(server.socket_dir))
    )


class Victims:
    """Other sessions of a role, which planted code tried to terminate."""

    def __init__(self, server: PostgresServer, user: str) -> None:
        self.connections = [
            server.connect(user, application_name=f"victim_{index}") for index in range(2)
        ]

    def alive(self) -> bool:
        try:
            return all(conn.execute("SELECT 1").fetchone() == (1,) for conn in self.connections)
        except psycopg.Error:
            return False

    def close(self) -> None:
        for conn in self.connections:
            conn.close()


@pytest.fixture
def victims(
    hostile_server: tuple[PostgresServer, Path], request: pytest.FixtureRequest
) -> Iterator[Victims]:
    server, _ = hostile_server
    held = Victims(server, request.param)
    try:
        yield held
    finally:
        held.close()


def _run_all(
    server: PostgresServer,
    evidence: Path,
    settings: Settings,
    queries: list[tuple[str, str]],
    victims: Victims,
) -> tuple[dict[str, str], list[str]]:
    # Runs each query through the tool; returns each outcome and every change seen.
    outcomes: dict[str, str] = {}
    changes: list[str] = []

    async def main() -> None:
        tool = SQLTool(settings)
        try:
            # The first reading drains what the slot decoded before (the fixture, planting).
            hostile_state(server, evidence)
            before = hostile_state(server, evidence)
            for name, text in queries:
                try:
                    params = ReadOnlySQLParams(query=text)
                except ValueError:
                    outcomes[name] = "refused by the argument schema"
                    continue
                try:
                    result = await tool.run(params)
                except ToolFailure as failure:
                    outcomes[name] = f"refused {failure.problem.code.value}"
                else:
                    outcomes[name] = f"ran {result.row_count}"
                after = hostile_state(server, evidence)
                if after != before:
                    changes.append(f"{name}: {before} -> {after}")
                if not victims.alive():
                    changes.append(f"{name}: a session of the role was terminated")
                before = after
        finally:
            await tool.aclose()

    asyncio.run(main())
    return outcomes, changes


@pytest.mark.parametrize("victims", [HOSTILE_READER], indirect=True)
def test_every_case_leaves_the_database_unchanged_as_the_reader(
    hostile_server: tuple[PostgresServer, Path], victims: Victims
) -> None:
    server, evidence = hostile_server
    queries = [(case["id"], _text(case, server, evidence)) for case in CASES]
    outcomes, changes = _run_all(
        server, evidence, _settings(server, HOSTILE_READER), queries, victims
    )
    assert changes == []
    # The reader passes the role audit, so the cases reach PostgreSQL, where nothing planted
    # is ever resolved: the name-resolved hijacks fail to resolve, the routes without names
    # fail on EXECUTE, and harmless cases run.
    ran = {name for name, outcome in outcomes.items() if outcome.startswith("ran")}
    assert {"A05", "E09", "H37", "J01", "M01", "M61", "N05", "N09", "N13"} <= ran
    refused = {name for name, outcome in outcomes.items() if outcome.startswith("refused")}
    hijacks = {
        case["id"]
        for case in CASES
        if case["class"] in {"overload-hijack", "operator-hijack", "schema-code"}
        and case["expect"] == "refuse"
    }
    assert hijacks <= refused


@pytest.mark.parametrize("victims", [HOSTILE_OWNER], indirect=True)
def test_every_case_leaves_the_database_unchanged_as_the_owner(
    hostile_server: tuple[PostgresServer, Path], victims: Victims
) -> None:
    server, evidence = hostile_server
    queries = [(case["id"], _text(case, server, evidence)) for case in CASES]
    outcomes, changes = _run_all(
        server, evidence, _settings(server, HOSTILE_OWNER), queries, victims
    )
    assert changes == []
    # The owner may create in public and execute everything planted there: the audit refuses
    # every query that passes the policy, in-band, before it runs.
    assert not [name for name, outcome in outcomes.items() if outcome.startswith("ran")]


# Built-in names whose planted overloads for other argument types the sample does not hold,
# and the calls that would pick them: (name, argument type, call).
# (The fixture's own are left out: lower, upper, length and md5 of integer, abs of text.)
_FIXTURE_OVERLOADS: Final = {("length", "integer"), ("upper", "integer"), ("md5", "integer")}
_OVERLOADS: Final = [
    (name, argtype, f"SELECT {name}({literal})")
    for name in ("abs", "length", "upper", "btrim", "initcap", "md5", "reverse", "sum", "avg")
    for argtype, literal in (("integer", "7"), ("text", "'x'"), ("boolean", "true"))
    if (name, argtype) not in _FIXTURE_OVERLOADS and (name, argtype) != ("abs", "text")
]
# Operators for type pairs pg_catalog lacks, and the expressions that would run them.
_OPERATORS: Final = [
    ("*", "text", "text", "SELECT name * name FROM notes LIMIT 1"),
    ("<", "text", "integer", "SELECT id FROM notes WHERE name < 5 LIMIT 1"),
    ("~", "integer", "integer", "SELECT 1 ~ 2"),
    ("&&", "text", "text", "SELECT 'a' && 'b'"),
    ("!!", "text", "text", "SELECT 'a' !! 'b'"),
    ("=", "integer", "boolean", "SELECT 1 = true"),
]


def _plant(server: PostgresServer, statements: list[str]) -> None:
    with server.connect() as conn:
        conn.execute(f"SET ROLE {HOSTILE_OWNER}")
        for statement in statements:
            conn.execute(statement)
        conn.execute("RESET ROLE")


def _hooked(tag: str, arguments: str, returns: str, value: str) -> str:
    name = "planted_" + hashlib.md5(tag.encode()).hexdigest()[:10]  # noqa: S324  # A name, not a digest.
    return (
        f"CREATE FUNCTION public.{name}({arguments}) RETURNS {returns} LANGUAGE plpgsql AS "
        f"$$ BEGIN PERFORM public.hook({tag!r}); RETURN {value}; END $$"
    )


@pytest.mark.parametrize("victims", [HOSTILE_READER, HOSTILE_OWNER], indirect=True)
def test_generated_members_of_each_class_never_run(
    hostile_server: tuple[PostgresServer, Path], victims: Victims
) -> None:
    server, evidence = hostile_server
    planted: list[str] = []
    queries: list[tuple[str, str]] = []
    for name, argtype, call in _OVERLOADS:
        if name in BUILTIN_FUNCTIONS:
            planted.append(
                f"CREATE OR REPLACE FUNCTION public.{name}({argtype}) RETURNS text "
                f"LANGUAGE plpgsql AS $$ BEGIN PERFORM public.hook('overload {name}({argtype})'); "
                "RETURN 'x'; END $$"
            )
            queries.append((f"overload {name}({argtype})", call))
    for index, (symbol, left, right, query) in enumerate(_OPERATORS):
        function = f"planted_op_{index}"
        planted.append(
            f"CREATE OR REPLACE FUNCTION public.{function}({left}, {right}) RETURNS boolean "
            f"LANGUAGE plpgsql AS $$ BEGIN PERFORM public.hook('operator {symbol}'); "
            "RETURN true; END $$"
        )
        planted.append(
            f"CREATE OPERATOR public.{symbol} (LEFTARG = {left}, RIGHTARG = {right}, "
            f"FUNCTION = public.{function})"
        )
        queries.append((f"operator {symbol}({left}, {right})", query))
    # A cast on another user type, a view and a forced policy on other tables, a domain.
    planted += [
        "CREATE TYPE public.size AS ENUM ('s', 'm', 'l')",
        "CREATE TABLE public.shirts(id int PRIMARY KEY, size public.size)",
        "INSERT INTO public.shirts VALUES (1, 's'), (2, 'l')",
        _hooked("cast size->integer", "public.size", "integer", "1"),
        "CREATE CAST (public.size AS integer) WITH FUNCTION "
        f"public.planted_{hashlib.md5(b'cast size->integer').hexdigest()[:10]}(public.size) "  # noqa: S324  # A name.
        "AS IMPLICIT",
        "CREATE VIEW public.v_products_hooked AS SELECT p.id, public.hook('view products') AS h "
        "FROM public.products p",
        "ALTER TABLE public.order_items ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE public.order_items FORCE ROW LEVEL SECURITY",
        "CREATE POLICY p_items ON public.order_items USING (public.hook('policy order_items'))",
        "CREATE DOMAIN public.hooked_text AS text CHECK (public.hook('domain hooked_text'))",
        "CREATE VIEW public.v_kill AS SELECT pg_catalog.pg_terminate_backend(pid) AS k "
        "FROM pg_catalog.pg_stat_activity WHERE application_name LIKE 'victim%'",
        "CREATE VIEW public.v_xid AS SELECT pg_catalog.txid_current() AS x",
    ]
    queries += [
        ("cast size->integer", "SELECT id + size FROM shirts"),
        ("view products", "SELECT * FROM v_products_hooked"),
        ("policy order_items", "SELECT count(*) FROM order_items"),
        ("domain hooked_text", "SELECT 'x'::hooked_text"),
        ("view v_kill", "SELECT * FROM v_kill"),
        ("view v_xid", "SELECT * FROM v_xid"),
    ]
    _plant(server, planted)
    with server.connect() as conn:
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {HOSTILE_READER}")
    try:
        outcomes, changes = _run_all(
            server, evidence, _settings(server, victims_user(victims)), queries, victims
        )
    finally:
        _plant(
            server,
            [
                "DROP VIEW public.v_kill, public.v_xid, public.v_products_hooked",
                "DROP POLICY p_items ON public.order_items",
                "ALTER TABLE public.order_items NO FORCE ROW LEVEL SECURITY",
                "ALTER TABLE public.order_items DISABLE ROW LEVEL SECURITY",
                "DROP TABLE public.shirts",
                "DROP TYPE public.size CASCADE",
                "DROP DOMAIN public.hooked_text",
                *(
                    f"DROP OPERATOR public.{s} ({left}, {right})"
                    for s, left, right, _ in _OPERATORS
                ),
                *(f"DROP FUNCTION public.planted_op_{i}" for i in range(len(_OPERATORS))),
                *(
                    f"DROP FUNCTION public.{name}({argtype})"
                    for name, argtype, _ in _OVERLOADS
                    if name in BUILTIN_FUNCTIONS
                ),
            ],
        )
    assert changes == []
    assert len(outcomes) == len(queries)
    # Nothing planted ran; and what ran at all ran without it (the honest part of a view).
    assert not [
        name for name, outcome in outcomes.items() if outcome.startswith("ran") and "view" in name
    ]


def victims_user(victims: Victims) -> str:
    return str(victims.connections[0].info.user)


def test_every_legit_case_runs_on_the_clean_database_as_the_reader(
    hostile_server: tuple[PostgresServer, Path],
) -> None:
    server, _ = hostile_server
    settings = _settings(
        server,
        HOSTILE_READER,
        CLEAN_DATABASE,
        sql_trusted_extensions=("tsm_system_rows",),
        sql_allowed_functions=frozenset({"system_rows"}),
    )
    failures: list[str] = []

    async def main() -> None:
        tool = SQLTool(settings)
        try:
            for case in LEGIT:
                try:
                    await tool.run(ReadOnlySQLParams(query=case["query"]))
                except ToolFailure as failure:
                    failures.append(f"{case['id']}: {failure.problem.detail}")
        finally:
            await tool.aclose()

    asyncio.run(main())
    assert failures == []


@pytest.mark.parametrize("case_id", sorted(REFUSED_SINCE_ROUND3))
def test_legit_cases_calling_unstoppable_functions_are_refused_with_the_alternative(
    case_id: str,
) -> None:
    case = next(case for case in CASES if case["id"] == case_id)
    with pytest.raises(ToolFailure) as caught:
        check_untrusted_sql(case["query"], functions=FunctionPolicy(), schemas=("public",))
    detail = caught.value.problem.detail
    assert caught.value.problem.code is MCPErrorCode.QUERY_VIOLATION
    assert f"{REFUSED_SINCE_ROUND3[case_id]}() is not allowed" in detail
    assert "the statement timeout cannot stop it" in detail


@pytest.mark.parametrize(
    "case", [case for case in LEGIT if case.get("compare")], ids=lambda case: case["id"]
)
def test_legit_results_match_postgresql(
    hostile_server: tuple[PostgresServer, Path], case: dict[str, Any]
) -> None:
    # The tool gives what PostgreSQL gives for the same text, as the same role.
    server, _ = hostile_server
    settings = _settings(
        server,
        HOSTILE_READER,
        CLEAN_DATABASE,
        sql_trusted_extensions=("tsm_system_rows",),
        sql_allowed_functions=frozenset({"system_rows"}),
    )

    async def main() -> list[list[Any]]:
        tool = SQLTool(settings)
        try:
            return (await tool.run(ReadOnlySQLParams(query=case["query"]))).rows
        finally:
            await tool.aclose()

    rows = asyncio.run(main())
    with server.connect(HOSTILE_READER, database=CLEAN_DATABASE) as conn:
        conn.execute("SET search_path = pg_catalog, public")
        expected = conn.execute(case["query"]).fetchall()
    if "TABLESAMPLE" in case["query"]:
        assert len(rows) == len(expected) == 1
        return
    assert len(rows) == min(len(expected), 50)
    assert [len(row) for row in rows] == [len(row) for row in expected[: len(rows)]]


def test_a_refusal_of_the_audit_names_the_object_and_the_fix(
    hostile_server: tuple[PostgresServer, Path],
) -> None:
    server, _ = hostile_server

    async def main() -> ToolFailure:
        tool = SQLTool(_settings(server, HOSTILE_OWNER))
        try:
            with pytest.raises(ToolFailure) as caught:
                await tool.run(ReadOnlySQLParams(query="SELECT count(name) FROM notes"))
            return caught.value
        finally:
            await tool.aclose()

    failure = asyncio.run(main())
    assert failure.problem.code is MCPErrorCode.ACCESS_DENIED
    assert "may create objects in the schema public" in failure.problem.detail
    assert "REVOKE CREATE ON SCHEMA public FROM" in failure.problem.detail
    assert int(str(failure.problem.metadata["role_problems"])) > 3


def test_the_fixture_is_hostile_and_the_state_shows_it(
    hostile_server: tuple[PostgresServer, Path],
) -> None:
    # Without the tool, the planted code runs and leaves evidence that the state reading
    # sees: a check that could not fail would prove nothing.
    server, evidence = hostile_server
    hostile_state(server, evidence)
    before = hostile_state(server, evidence)
    with server.connect(HOSTILE_OWNER) as conn:
        conn.execute("SET search_path = public, pg_catalog")
        conn.execute("BEGIN READ ONLY")
        assert conn.execute("SELECT lower(42)").fetchone() == ("42",)
        conn.execute("ROLLBACK")
    after = hostile_state(server, evidence)
    assert after.tables != before.tables
    assert after.next_xid > before.next_xid
    assert any("evil_log" in change for change in after.decoded)


@pytest.mark.parametrize("victims", [HOSTILE_OWNER], indirect=True)
def test_resolution_alone_finds_nothing_planted_by_name(
    hostile_server: tuple[PostgresServer, Path],
    victims: Victims,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The role audit switched off, as the owner, who may execute everything planted: the
    # pinned search_path and the qualification of relations alone keep every overload,
    # operator and attribute-notation function planted in public from being resolved. (The
    # routes without a name, casts, views, policies and domains, are the audit's: they are
    # left out here, and test_sql_role_audit.py proves PostgreSQL checks EXECUTE on them.)
    from mcp_server_suite.tools.sql import session

    async def no_audit(self: Any, conn: Any) -> list[Any]:
        return []

    monkeypatch.setattr(session.ReadOnlyDatabase, "_audit", no_audit)
    monkeypatch.setattr(session, "guard_sql", lambda trusted: "SELECT $1::text, 1")
    server, evidence = hostile_server
    named = [
        case
        for case in CASES
        if case["class"] in {"overload-hijack", "operator-hijack"} or case["id"] in {"E01", "E05"}
    ]
    queries = [(case["id"], _text(case, server, evidence)) for case in named]
    outcomes, changes = _run_all(
        server, evidence, _settings(server, HOSTILE_OWNER), queries, victims
    )
    assert changes == []
    assert "A05" in outcomes
    assert outcomes["A01"].startswith("refused")
