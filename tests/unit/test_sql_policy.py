"""The policy's and the statement layer's own corners: text that is not UTF-8, trees the
grammar cannot build today, the comparison of trees, and the catalog's bound."""

from typing import Any

import pytest

from mcp_server_suite.config import ConfigError, Settings
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.tools.sql import build_sql_tools, statement
from mcp_server_suite.tools.sql.policy import (
    FunctionPolicy,
    _Walker,
    check_untrusted_tree,
    parse_tree_json,
    parse_tree_text,
    parse_untrusted_sql,
    same_tree,
)
from mcp_server_suite.tools.sql.statement import (
    MAX_CATALOG_RELATIONS,
    PolicyDefect,
    RelationCatalog,
    render_statement,
)


def refused(text: str) -> ToolFailure:
    with pytest.raises(ToolFailure) as caught:
        check_untrusted_tree(parse_untrusted_sql(text), FunctionPolicy(), schemas=("public",))
    return caught.value


def test_text_that_is_not_utf8_is_a_validation_error() -> None:
    for call in (
        lambda: parse_untrusted_sql("SELECT '\ud800'"),
        lambda: parse_tree_text("SELECT '\ud800'"),
        lambda: parse_tree_json(b"SELECT '\xff'"),
    ):
        with pytest.raises(ToolFailure) as caught:
            call()
        assert caught.value.problem.code is MCPErrorCode.VALIDATION_ERROR
        assert "UTF-8" in caught.value.problem.detail


def test_a_walk_that_recurses_too_deeply_is_a_validation_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def deep(self: Any, tag: str, fields: dict[str, Any]) -> None:
        raise RecursionError

    monkeypatch.setattr(_Walker, "check", deep)
    assert "nests too deeply" in refused("SELECT 1").problem.detail


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("EXPLAIN (VERBOSE maybe) SELECT 1", "takes TRUE or FALSE"),
        ("EXPLAIN (COSTS 1.5) SELECT 1", "takes TRUE or FALSE"),
        ("EXPLAIN (COSTS 2) SELECT 1", "takes TRUE or FALSE"),
        ("SELECT app.public.lower(1)", "schema only, not a database"),
        ("SELECT 1 = ANY (SELECT 1) AND 1 OPERATOR(public.=) ANY (SELECT 1)", "OPERATOR(public"),
    ],
)
def test_corners_of_the_grammar_are_refused(text: str, fragment: str) -> None:
    assert fragment in refused(text).problem.detail


@pytest.mark.parametrize(
    "text",
    [
        "EXPLAIN (VERBOSE on, COSTS 0) SELECT 1",
        "SELECT 'a' COLLATE pg_catalog.\"C\"",
        "SELECT 1 = ANY (SELECT 1)",
        "SELECT ARRAY[]::int[]",
    ],
)
def test_corners_of_the_grammar_pass(text: str) -> None:
    tree = check_untrusted_tree(parse_untrusted_sql(text), FunctionPolicy(), schemas=("public",))
    render_statement(tree, RelationCatalog(("public",), []), max_rows=5, max_result_bytes=4096)


def test_trees_the_grammar_cannot_build_today_are_refused_by_the_walk() -> None:
    # A member that is neither a tagged node nor a known inline one, and an operator kind
    # outside the list: what a later grammar could bring, refused until reviewed. The refusal
    # quotes the caller's text at the node's offset (or, for a node without one, at the
    # innermost node around it that has one), never the node's name.
    walker = _Walker(b"SELECT weird", FunctionPolicy(), frozenset({"public"}))
    with pytest.raises(ToolFailure) as caught:
        walker.check("SelectStmt", {"targetList": [{"mystery": {"location": 7}}]})
    assert (
        caught.value.problem.detail
        == "The construct at the start of 'SELECT weird' is not allowed in a read-only query."
    )
    with pytest.raises(ToolFailure) as caught:
        walker.check("ResTarget", {"location": 7, "val": {"mystery": {"x": 1}}})
    assert caught.value.problem.detail.startswith("The construct at 'weird'")
    with pytest.raises(ToolFailure) as caught:
        walker.check("A_Expr", {"kind": "AEXPR_FUTURE", "name": [], "location": 7})
    assert caught.value.problem.detail.startswith("The construct at 'weird'")
    with pytest.raises(ToolFailure) as caught:
        walker.check("FutureNode", {"location": 99})
    assert caught.value.problem.detail.startswith("The construct at the start of")


def test_same_tree_ignores_offsets_only() -> None:
    assert same_tree({"a": [1, {"location": 3}]}, {"a": [1, {"location": 9}]})
    assert not same_tree({"a": 1}, {"a": "1"})
    assert not same_tree({"a": 1}, {"b": 1})
    assert not same_tree([1, 2], [1])


def test_the_catalog_holds_at_most_its_bound() -> None:
    names = [("public", f"t{index}") for index in range(MAX_CATALOG_RELATIONS + 5)]
    catalog = RelationCatalog(("public",), names)
    assert f"t{MAX_CATALOG_RELATIONS - 1}" in catalog
    assert f"t{MAX_CATALOG_RELATIONS}" not in catalog
    assert catalog.schema_of("t0") == "public"


def test_a_wrapper_that_holds_its_query_twice_is_a_defect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        statement,
        "_WRAPPER",
        "SELECT * FROM (\n{query}\n) AS q, ({query}) AS p LIMIT {rows} OFFSET {budget}",
    )
    statement._template.cache_clear()
    try:
        with pytest.raises(PolicyDefect):
            statement._template(9, 9)
    finally:
        statement._template.cache_clear()


def test_both_tools_need_a_dsn() -> None:
    with pytest.raises(ConfigError):
        build_sql_tools(Settings())


def test_function_lists_are_consistent() -> None:
    from mcp_server_suite.tools.sql import functions

    assert not [name for name in functions.BUILTIN_FUNCTIONS if functions.denial_reason(name)]
    assert functions.HARMLESS_VOLATILE <= functions.ALL_BUILTIN_FUNCTIONS
    assert not set(functions.ESCAPING_FUNCTIONS) & functions.BUILTIN_FUNCTIONS
    assert all(functions.denial_reason(name) for name in functions.ESCAPING_FUNCTIONS)
    for name in (*functions.DENIED_FUNCTIONS, *functions.DENIED_FUNCTION_PREFIXES):
        assert name == name.lower()
    assert functions.denial_reason("pg_sleep_for") == functions.DENIED_FUNCTION_PREFIXES["pg_sleep"]
    assert functions.denial_reason("abs") is None


def test_xpath_is_refused_as_work_the_timeout_cannot_stop() -> None:
    from mcp_server_suite.tools.sql.policy import FunctionPolicy
    from mcp_server_suite.tools.sql.tool import check_untrusted_sql

    for text in ("SELECT xpath('/a', '<a/>')", "SELECT xpath_exists('/a', '<a/>')"):
        with pytest.raises(ToolFailure) as caught:
            check_untrusted_sql(text, functions=FunctionPolicy(), schemas=("public",))
        assert "libxml2 never checks for cancellation" in caught.value.problem.detail


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("SELECT ltrim('xxa', 'x')", True),
        ("SELECT trim(both 'x' from 'xax')", True),
        ("SELECT rtrim('a  '), trim('  a  '), btrim(' a ')", False),
        ("SELECT string_to_array('a,b', ',')", True),
        ("SELECT position('b' IN 'abc')", True),
        ("SELECT regexp_split_to_array('a,b', ','), regexp_instr('abc', 'b')", False),
    ],
)
def test_unstoppable_overloads_are_refused_by_name_and_arguments(text: str, refused: bool) -> None:
    from mcp_server_suite.tools.sql.tool import check_untrusted_sql

    if not refused:
        check_untrusted_sql(text, functions=FunctionPolicy(), schemas=("public",))
        return
    with pytest.raises(ToolFailure) as caught:
        check_untrusted_sql(text, functions=FunctionPolicy(), schemas=("public",))
    assert "the statement timeout cannot stop it" in caught.value.problem.detail
