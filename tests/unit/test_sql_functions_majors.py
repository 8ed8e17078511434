"""The reviewed function lists of each PostgreSQL major, without a server.

The suite's coverage run talks to PostgreSQL 15 only, so the lists of the later majors are
held here for every major the tool supports: what each major added is callable from that
major on, what PostgreSQL 18 removed is not callable there, and a name no list holds has no
first major.
"""

import pytest

from mcp_server_suite.tools.sql.functions import (
    ADDED_FUNCTIONS,
    BUILTIN_FUNCTIONS,
    OLDEST_MAJOR,
    REMOVED_FUNCTIONS,
    callable_functions,
    first_major_with,
)

SUPPORTED_MAJORS = (15, 16, 17, 18)


@pytest.mark.parametrize("major", SUPPORTED_MAJORS)
def test_each_major_calls_what_it_added_and_not_what_it_removed(major: int) -> None:
    names = callable_functions(major)
    expected = set(BUILTIN_FUNCTIONS)
    for since, added in ADDED_FUNCTIONS.items():
        if since <= major:
            assert added <= names
            expected |= added
        else:
            assert not added & names
    for since, removed in REMOVED_FUNCTIONS.items():
        if since <= major:
            assert not removed & names
            expected -= removed
    assert names == expected


def test_the_samples_of_each_major() -> None:
    # PostgreSQL 16's any_value, 17's to_bin, 18's casefold; 18 has no pg_timezone_abbrevs().
    assert "any_value" not in callable_functions(15)
    assert "any_value" in callable_functions(16)
    assert "to_bin" not in callable_functions(16)
    assert "to_bin" in callable_functions(17)
    assert "casefold" not in callable_functions(17)
    assert "casefold" in callable_functions(18)
    assert "pg_timezone_abbrevs" in callable_functions(17)
    assert "pg_timezone_abbrevs" not in callable_functions(18)
    # An older server than the oldest supported gets the oldest's list.
    assert callable_functions(14) == callable_functions(OLDEST_MAJOR)


@pytest.mark.parametrize(
    ("name", "major"),
    [("upper", 15), ("any_value", 16), ("to_bin", 17), ("casefold", 18), ("no_such_fn", None)],
)
def test_the_first_major_with_a_name(name: str, major: int | None) -> None:
    assert first_major_with(name) == major
