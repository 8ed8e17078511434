"""Measure, for every function a `read_only_sql` query can reach, how late it heeds a cancel.

PostgreSQL stops a statement at its timeout only where the code running checks for
interrupts (`CHECK_FOR_INTERRUPTS`). This harness calls every reachable function
(`tests/support/sql_reach.py`: allowed names, every overload, the functions behind
operators and casts, the functions refused for the statement timeout, the input and output
functions of the built-in types, the aggregates' final functions) with adversarial
arguments under a short statement timeout, and measures how long the backend takes to give
the call back after the timeout fired: its overrun. A call that overruns `--kill-after`
seconds is a runaway: its backend is killed with SIGKILL (the harness runs as the superuser
of a throwaway cluster it starts itself, where a crash restart costs nothing), and the
cluster's recovery is waited for.

Arguments. Every argument type has values (`VALUES`): a small default, large values (16
MiB of text, a million array or jsonb elements, a million polygon points, numerics of the
most digits numeric holds) and adversarial medium ones (a needle that defeats
Boyer-Moore-Horspool, a LIKE pattern that makes every position a partial match, a set of
characters to scan, regular expressions, deep nesting, disjoint arrays). They are built
once, before any timing, into tables (`mcp_inputs`, storage EXTERNAL so that reading them
back is a copy, not a decompression), and each call reads its arguments back with scalar
subqueries: the timer measures the call, not the building of its input. Each call is tried
with the default arguments; with each non-default value in each position; with a large
value in one position and each adversarial value in another; and with every varying
argument large. Polymorphic signatures are tried with integer, numeric and text bindings.
Scalar results are measured with `pg_column_size`, sets with `count(*)`, so that what
returns is one number, never the value.

Output: one line per call that overran `--budget` seconds, then a summary of the functions
that did, by C symbol, and optionally (`--json`) every measurement. The exit status is 0.
Once a function has had a runaway, its other calls are skipped (`--every-runaway` keeps
them): each costs the kill delay and a restart of the cluster. Only the argument types the
selected functions take are built; a type PostgreSQL keeps in line (`tsquery`) is stored as
text and cast back in the call, and a `record` is built in the call.

Usage (as root or the cluster's owner, from the top of the repository):

    .cache/venv/bin/python scripts/measure-sql-interrupts.py --major 15 --list
    .cache/venv/bin/python scripts/measure-sql-interrupts.py --major 15 --kill-after 5 \
        --only '^(translate|array_position|jsonb_exists_any)$' --json out15.json
    MCP_TEST_PG_MAJOR=18 .cache/venv/bin/python scripts/measure-sql-interrupts.py --major 18

`--only` takes a regular expression over C symbols and function names. Durations on the
shared two-core machine (PostgreSQL 15, under `nice -n 10`, `--kill-after 5`): building
the inputs takes 20 to 30 s; 39 text and array functions made 2,180 calls in 334 s (22 of
them runaways of translate, before runaways were skipped); 47 jsonb, numeric, geometry and
text search functions made 1,083 calls in 119 s; a sample of 150 C symbols over every
route made 1,683 calls in 163 s. A full run over the roughly 2,200 C symbols of a major
takes about an hour; the review (`tests/vectors/sql_interrupts.toml`) says which were
measured.
"""

# The harness formats its own SQL from its own constants (never from input), and its value
# builders are long SQL expressions kept one to a line.
# ruff: noqa: S608, E501

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

REPO_ROOT: Final = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "src"))

import psycopg  # noqa: E402

from tests.support.postgres import start_postgres, stop_postgres  # noqa: E402
from tests.support.sql_reach import Reachable, reachable_functions  # noqa: E402

__all__ = ["main"]

# The statement timeout every call runs under: long enough to read a 16 MiB argument back
# (about 30 ms), short enough that a call still running at it is doing the function's work.
DEFAULT_TIMEOUT_MS: Final = 200
# A call that gives nothing back this long after its timeout is a runaway, and is killed.
DEFAULT_KILL_AFTER_S: Final = 10.0
# Overruns up to this are reported as in time: a cancel is noticed, the backend unwinds and
# answers, on a loaded two-core machine.
DEFAULT_BUDGET_S: Final = 1.0
# Aggregates run over a million rows under a longer timeout, so that their transitions
# (which the executor interrupts between rows) end before it and the final function, which
# runs once over everything, is what the timeout meets.
DEFAULT_AGGREGATE_TIMEOUT_MS: Final = 5_000
# How long a cluster restarting after a killed backend may take to accept connections.
RECOVERY_TIMEOUT_S: Final = 120.0

# Sizes (Rule "Arguments" above). Large: bytes of text and bytea, bits of a bit string.
LARGE_BYTES: Final = 16 * 1024 * 1024
# Large: elements of an array, a jsonb array or object, points of a polygon or path,
# ranges of a multirange.
LARGE_ITEMS: Final = 1024 * 1024
# Medium: bytes of a needle, pattern or set; elements of the other operand of a pair.
MEDIUM_BYTES: Final = 16 * 1024
MEDIUM_ITEMS: Final = 4 * 1024
# The digits numeric holds: 131,072 before the decimal point, 16,383 after it.
NUMERIC_WHOLE_DIGITS: Final = 131_071
NUMERIC_FRACTION_DIGITS: Final = 16_383


@dataclass(frozen=True, slots=True)
class Value:
    """One argument value of a type.

    Attributes:
        name: Its name in the report.
        role: `D` the default, `L` large, `A` adversarial (a needle, a pattern, a set...).
        sql: An expression that builds it (stored before timing for `L` and `A`).
    """

    name: str
    role: str
    sql: str


def _text_values() -> list[Value]:
    n, m = LARGE_BYTES, MEDIUM_BYTES
    return [
        Value("small", "D", "'abc'"),
        Value("large", "L", f"repeat('a', {n})"),
        Value("large-multibyte", "L", f"repeat('é', {n // 2})"),
        Value(
            "words",
            "L",
            f"(SELECT string_agg('w' || g, ' ') FROM generate_series(1, {LARGE_ITEMS // 8}) AS g)",
        ),
        Value("combining-marks", "L", f"repeat(U&'\\0301\\0316', {n // 32})"),
        Value("spaces", "L", f"repeat(' ', {n}) || 'a'"),
        Value("needle", "A", f"'b' || repeat('a', {m})"),
        Value("needle-end", "A", f"repeat('a', {m}) || 'b'"),
        Value("set", "A", f"repeat('b', {m}) || 'a'"),
        Value("like-pattern", "A", f"'%' || repeat('a', {m}) || 'b'"),
        Value("medium", "A", f"repeat('a', {m})"),
        Value("regex", "A", "'(a+)+b'"),
        Value("format-nines", "A", f"repeat('9', {m})"),
        Value("format-s", "A", f"repeat('%s', {m // 2})"),
    ]


def _bytea_values() -> list[Value]:
    n, m = LARGE_BYTES, MEDIUM_BYTES
    return [
        Value("small", "D", "'\\x616263'::bytea"),
        Value("large", "L", f"convert_to(repeat('a', {n}), 'UTF8')"),
        Value("needle", "A", f"convert_to('b' || repeat('a', {m}), 'UTF8')"),
        Value("set", "A", f"convert_to(repeat('b', {m}) || 'a', 'UTF8')"),
        Value("like-pattern", "A", f"convert_to('%' || repeat('a', {m}) || 'b', 'UTF8')"),
    ]


def _array_values(element: str) -> list[Value]:
    big, mid = LARGE_ITEMS, MEDIUM_ITEMS
    if element == "text":
        return [
            Value("small", "D", "'{a,b}'::text[]"),
            Value("large", "L", f"(SELECT array_agg('s' || g) FROM generate_series(1, {big}) g)"),
            Value(
                "disjoint", "A", f"(SELECT array_agg('t' || g) FROM generate_series(1, {mid}) g)"
            ),
            Value("same", "A", f"array_fill('s1'::text, ARRAY[{mid}])"),
        ]
    value = "(g % 32000)" if element == "int2" else "g"
    return [
        Value("small", "D", f"'{{1,2}}'::{element}[]"),
        # smallint holds 32,767 at most: its large array repeats values.
        Value(
            "large", "L", f"(SELECT array_agg({value}::{element}) FROM generate_series(1, {big}) g)"
        ),
        Value(
            "disjoint", "A", f"(SELECT array_agg((-g)::{element}) FROM generate_series(1, {mid}) g)"
        ),
        Value("same", "A", f"array_fill(1::{element}, ARRAY[{mid}])"),
        Value("nested", "A", f"array_fill(1::{element}, ARRAY[64, 64])"),
    ]


def _jsonb_values(kind: str) -> list[Value]:
    big, mid = LARGE_ITEMS, MEDIUM_ITEMS
    cast = f"::{kind}"
    return [
        Value("small", "D", f'\'{{"a": 1, "b": [1, 2]}}\'{cast}'),
        Value("array", "L", f"(SELECT jsonb_agg(g) FROM generate_series(1, {big}) g){cast}"),
        Value(
            "strings", "L", f"(SELECT jsonb_agg(g::text) FROM generate_series(1, {big}) g){cast}"
        ),
        Value(
            "object",
            "L",
            f"(SELECT jsonb_object_agg('k' || g, g) FROM generate_series(1, {big}) g){cast}",
        ),
        Value("disjoint", "A", f"(SELECT jsonb_agg(-g) FROM generate_series(1, {mid}) g){cast}"),
        Value(
            "disjoint-strings",
            "A",
            f"(SELECT jsonb_agg((-g)::text) FROM generate_series(1, {mid}) g){cast}",
        ),
        Value("nested", "A", f"(repeat('[', 2000) || repeat(']', 2000)){cast}"),
        Value(
            "arrays",
            "A",
            f"(SELECT jsonb_agg(jsonb_build_array(-g)) FROM generate_series(1, {mid}) g){cast}",
        ),
    ]


def _numeric_values() -> list[Value]:
    whole, fraction = NUMERIC_WHOLE_DIGITS, NUMERIC_FRACTION_DIGITS
    return [
        Value("small", "D", "1.5::numeric"),
        Value("huge", "L", f"repeat('9', {whole})::numeric"),
        Value("long-fraction", "L", f"('0.' || repeat('7', {fraction}))::numeric"),
        Value(
            "huge-and-fraction",
            "L",
            f"(repeat('3', {whole}) || '.' || repeat('7', {fraction}))::numeric",
        ),
        Value("tiny", "A", f"('0.' || repeat('0', {fraction - 1}) || '1')::numeric"),
        Value("near-one", "A", f"('1.' || repeat('0', {fraction - 1}) || '1')::numeric"),
        Value("large-integer", "A", "1000000::numeric"),
    ]


def _tsvector_values() -> list[Value]:
    # A tsvector holds at most 1 MiB of lexemes: 65,536 positioned words fit.
    big, mid = LARGE_ITEMS // 16, MEDIUM_ITEMS
    return [
        Value("small", "D", "'a:1 b:2'::tsvector"),
        Value(
            "words",
            "L",
            f"(SELECT string_agg('w' || g || ':' || g, ' ') FROM generate_series(1, {big}) g)::tsvector",
        ),
        Value(
            "positions",
            "L",
            "(SELECT string_agg('w' || g || ':' || (SELECT string_agg(p::text, ',') FROM generate_series(1, 256) p), ' ') FROM generate_series(1, 2000) g)::tsvector",
        ),
        Value(
            "medium",
            "A",
            f"(SELECT string_agg('w' || g || ':' || g, ' ') FROM generate_series(1, {mid}) g)::tsvector",
        ),
    ]


def _tsquery_values() -> list[Value]:
    mid = MEDIUM_ITEMS // 4
    return [
        Value("small", "D", "'a & b'::tsquery"),
        Value(
            "and",
            "A",
            f"(SELECT string_agg('w' || g, ' & ') FROM generate_series(1, {mid}) g)::tsquery",
        ),
        Value(
            "or",
            "A",
            f"(SELECT string_agg('w' || g, ' | ') FROM generate_series(1, {mid}) g)::tsquery",
        ),
        Value(
            "phrase",
            "A",
            f"(SELECT string_agg('w' || g, ' <-> ') FROM generate_series(1, {mid}) g)::tsquery",
        ),
        Value(
            "not",
            "A",
            f"(SELECT string_agg('!w' || g, ' & ') FROM generate_series(1, {mid}) g)::tsquery",
        ),
        Value(
            "near",
            "A",
            f"(SELECT string_agg('w1', ' <2> ') FROM generate_series(1, {mid}) g)::tsquery",
        ),
    ]


def _polygon_values(kind: str) -> list[Value]:
    big, mid = LARGE_ITEMS, MEDIUM_ITEMS
    if kind == "polygon":
        return [
            Value("small", "D", "'((0,0),(1,1),(1,0))'::polygon"),
            Value("large", "L", f"polygon({big}, circle '((0,0),1)')"),
            Value("medium", "A", f"polygon({mid}, circle '((0,0),0.5)')"),
            Value(
                "same-points",
                "L",
                f"(SELECT ('(' || string_agg('(0,0)', ',') || ')')::polygon FROM generate_series(1, {big}))",
            ),
            Value(
                "same-points-medium",
                "A",
                f"(SELECT ('(' || string_agg('(0,0)', ',') || ',(1,1))')::polygon FROM generate_series(1, {mid}))",
            ),
        ]
    return [
        Value("small", "D", "'[(0,0),(1,1)]'::path"),
        Value("large", "L", f"path(polygon({big}, circle '((0,0),1)'))"),
        Value("large-open", "L", f"popen(path(polygon({big}, circle '((0,0),1)')))"),
        Value("medium", "A", f"path(polygon({mid}, circle '((0,0),0.5)'))"),
        Value("far", "A", f"path(polygon({mid}, circle '((5,5),0.5)'))"),
    ]


def _multirange_values(kind: str) -> list[Value]:
    big, mid = LARGE_ITEMS, MEDIUM_ITEMS
    sub, rng = ("int4", "int4range") if kind == "int4multirange" else ("numeric", "numrange")
    return [
        Value("small", "D", f"'{{[1,2)}}'::{kind}"),
        Value(
            "large",
            "L",
            f"(SELECT range_agg({rng}((2 * g)::{sub}, (2 * g + 1)::{sub})) FROM generate_series(1, {big}) g)",
        ),
        Value(
            "medium",
            "A",
            f"(SELECT range_agg({rng}((3 * g)::{sub}, (3 * g + 2)::{sub})) FROM generate_series(1, {mid}) g)",
        ),
    ]


def _bits_values() -> list[Value]:
    n, m = LARGE_BYTES, MEDIUM_BYTES
    return [
        Value("small", "D", "B'101'::varbit"),
        Value("large", "L", f"repeat('1', {n})::varbit"),
        Value("needle", "A", f"('0' || repeat('1', {m}))::varbit"),
    ]


def _snapshot_values(kind: str) -> list[Value]:
    return [
        Value("small", "D", f"'10:20:10,14,15'::{kind}"),
        Value(
            "large",
            "L",
            f"('1:{LARGE_ITEMS + 2}:' || (SELECT string_agg(g::text, ',') FROM generate_series(1, {LARGE_ITEMS}) g))::{kind}",
        ),
    ]


def _scalar(sql: str, *adversarial: str) -> list[Value]:
    return [Value("default", "D", sql)] + [
        Value(f"a{i}", "A", s) for i, s in enumerate(adversarial)
    ]


# The values of each argument type, by the name `regtype` gives it.
VALUES: Final[dict[str, list[Value]]] = {
    "text": _text_values(),
    "character": [Value(v.name, v.role, f"({v.sql})::bpchar") for v in _text_values()],
    "character varying": [Value(v.name, v.role, f"({v.sql})::varchar") for v in _text_values()],
    "name": _scalar("'pg_class'::name", "repeat('a', 63)::name"),
    "bytea": _bytea_values(),
    "integer[]": _array_values("int4"),
    "bigint[]": _array_values("int8"),
    "smallint[]": _array_values("int2"),
    "real[]": _array_values("float4"),
    "double precision[]": _array_values("float8"),
    "numeric[]": _array_values("numeric"),
    "text[]": _array_values("text"),
    "jsonb": _jsonb_values("jsonb"),
    "json": _jsonb_values("json"),
    "jsonpath": _scalar(
        "'$'::jsonpath",
        "'$[*] ? (@ > 0)'::jsonpath",
        "'$.**'::jsonpath",
        "'$[*] ? (@ like_regex \"(a+)+b\")'::jsonpath",
        "'$[*] ? (@ == $[*])'::jsonpath",
        "'$.datetime()'::jsonpath",
    ),
    "numeric": _numeric_values(),
    "tsvector": _tsvector_values(),
    "tsquery": _tsquery_values(),
    "polygon": _polygon_values("polygon"),
    "path": _polygon_values("path"),
    "int4multirange": _multirange_values("int4multirange"),
    "nummultirange": _multirange_values("nummultirange"),
    "numrange": _scalar(
        "numrange(1, 2)", f"numrange(repeat('9', {NUMERIC_WHOLE_DIGITS})::numeric, NULL)"
    ),
    "bit": [Value(v.name, v.role, f"({v.sql})::bit") for v in _bits_values()],
    "bit varying": _bits_values(),
    "txid_snapshot": _snapshot_values("txid_snapshot"),
    "pg_snapshot": _snapshot_values("pg_snapshot"),
    "integer": _scalar("3", "100000000", "-3"),
    "bigint": _scalar("3::int8", "100000000::int8", "-3::int8"),
    "smallint": _scalar("3::int2", "-3::int2"),
    "double precision": _scalar("1.5::float8", "1e300::float8", "1e-300::float8"),
    "real": _scalar("1.5::float4", "1e30::float4"),
    "boolean": _scalar("true"),
    "oid": _scalar("'pg_class'::regclass::oid"),
    "regclass": _scalar("'pg_class'::regclass"),
    "regtype": _scalar("'integer'::regtype"),
    "regproc": _scalar("'now'::regproc"),
    "regprocedure": _scalar("'now()'::regprocedure"),
    "regoper": _scalar("'||/'::regoper"),
    "regoperator": _scalar("'+(integer,integer)'::regoperator"),
    "regnamespace": _scalar("'pg_catalog'::regnamespace"),
    "regrole": _scalar("'postgres'::regrole"),
    "regcollation": _scalar("'C'::regcollation"),
    "regconfig": _scalar("'english'::regconfig", "'simple'::regconfig"),
    "regdictionary": _scalar("'english_stem'::regdictionary", "'simple'::regdictionary"),
    "oidvector": _scalar("'23 25'::oidvector"),
    "int2vector": _scalar("'1 2'::int2vector"),
    "timestamp with time zone": _scalar(
        "'2024-01-01 00:00:00+00'::timestamptz", "'infinity'::timestamptz"
    ),
    "timestamp without time zone": _scalar(
        "'2024-01-01 00:00:00'::timestamp", "'infinity'::timestamp"
    ),
    "date": _scalar("'2024-01-01'::date", "'infinity'::date"),
    "time without time zone": _scalar("'12:00'::time"),
    "time with time zone": _scalar("'12:00+00'::timetz"),
    "interval": _scalar(
        "'1 day'::interval", "'1 microsecond'::interval", "'-178000000 years'::interval"
    ),
    "point": _scalar("'(1,1)'::point"),
    "box": _scalar("'((0,0),(1,1))'::box"),
    "lseg": _scalar("'[(0,0),(1,1)]'::lseg"),
    "line": _scalar("'{1,-1,0}'::line"),
    "circle": _scalar("'<(0,0),1>'::circle"),
    "inet": _scalar("'192.168.0.1/24'::inet", "'::1/128'::inet"),
    "cidr": _scalar("'192.168.0.0/24'::cidr"),
    "macaddr": _scalar("'08:00:2b:01:02:03'::macaddr"),
    "macaddr8": _scalar("'08:00:2b:01:02:03:04:05'::macaddr8"),
    "money": _scalar("1.5::money"),
    "uuid": _scalar("'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid"),
    "pg_lsn": _scalar("'0/16'::pg_lsn"),
    "xid": _scalar("'10'::xid"),
    "xid8": _scalar("'10'::xid8"),
    "cid": _scalar("'1'::cid"),
    "tid": _scalar("'(0,1)'::tid"),
    '"char"': _scalar("'a'::\"char\""),
    "aclitem": _scalar("'postgres=arwdDxt/postgres'::aclitem"),
    "aclitem[]": [
        Value("small", "D", "'{postgres=arwdDxt/postgres}'::aclitem[]"),
        Value(
            "large", "L", f"array_fill('postgres=arwdDxt/postgres'::aclitem, ARRAY[{LARGE_ITEMS}])"
        ),
    ],
    "int4range": _scalar("int4range(1, 10)"),
    "int8range": _scalar("int8range(1, 10)"),
    "daterange": _scalar("daterange('2024-01-01', '2024-02-01')"),
    "tsrange": _scalar("tsrange('2024-01-01', '2024-02-01')"),
    "tstzrange": _scalar("tstzrange('2024-01-01', '2024-02-01')"),
    "int4range[]": [
        Value("small", "D", "ARRAY[int4range(1, 2)]"),
        Value(
            "large",
            "L",
            f"(SELECT array_agg(int4range(2 * g, 2 * g + 1) ORDER BY g DESC) FROM generate_series(1, {LARGE_ITEMS}) g)",
        ),
    ],
    "numrange[]": [
        Value("small", "D", "ARRAY[numrange(1, 2)]"),
        Value(
            "large",
            "L",
            f"(SELECT array_agg(numrange(2 * g, 2 * g + 1) ORDER BY g DESC) FROM generate_series(1, {LARGE_ITEMS}) g)",
        ),
    ],
    "record": [
        Value("small", "D", "ROW(1, 'a'::text)"),
        Value(
            "large",
            "L",
            f"ROW(repeat('a', {LARGE_BYTES}), (SELECT array_agg(g) FROM generate_series(1, {LARGE_ITEMS}) g))",
        ),
    ],
    '"char"[]': [Value("small", "D", "'{a,b}'::\"char\"[]")],
}
VALUES["int8multirange"] = [
    Value(v.name, v.role, v.sql.replace("int4", "int8")) for v in VALUES["int4multirange"]
]

# Pseudo-types no table can hold: their values are built in the call, and measured with it.
INLINE_TYPES: Final = frozenset({"record"})
# The argument types whose values `build_inputs` stored as text (storage `plain`).
STORED_AS_TEXT: Final[set[str]] = set()

# Polymorphic bindings: each pseudo-type of a signature becomes the type of one binding.
BINDINGS: Final = {
    "int": {
        "anyelement": "integer",
        "anynonarray": "integer",
        "anycompatible": "integer",
        "anycompatiblenonarray": "integer",
        "anyarray": "integer[]",
        "anycompatiblearray": "integer[]",
        "anyrange": "int4range",
        "anycompatiblerange": "int4range",
        "anymultirange": "int4multirange",
        "anycompatiblemultirange": "int4multirange",
        '"any"': "integer",
    },
    "numeric": {
        "anyelement": "numeric",
        "anynonarray": "numeric",
        "anycompatible": "numeric",
        "anycompatiblenonarray": "numeric",
        "anyarray": "numeric[]",
        "anycompatiblearray": "numeric[]",
        "anyrange": "numrange",
        "anycompatiblerange": "numrange",
        "anymultirange": "nummultirange",
        "anycompatiblemultirange": "nummultirange",
        '"any"': "numeric",
    },
    "text": {
        "anyelement": "text",
        "anynonarray": "text",
        "anycompatible": "text",
        "anycompatiblenonarray": "text",
        "anyarray": "text[]",
        "anycompatiblearray": "text[]",
        '"any"': "text",
    },
    "array": {"anyelement": "integer[]", '"any"': "integer[]"},
    "jsonb": {"anyelement": "jsonb", "anynonarray": "jsonb", '"any"': "jsonb"},
}

# Adversarial text for the input functions of the types a caller can write constants of or
# cast text to (the input route): the text is stored as text, and cast at call time.
INPUT_TEXTS: Final[dict[str, list[tuple[str, str]]]] = {
    "jsonb": [
        ("deep", "repeat('[', 5000) || repeat(']', 5000)"),
        (
            "keys",
            f"'{{' || (SELECT string_agg('\"k' || g || '\": 1', ',' ORDER BY g DESC) FROM generate_series(1, {LARGE_ITEMS}) g) || '}}'",
        ),
        (
            "same-keys",
            f"'{{' || (SELECT string_agg('\"k\": 1', ',') FROM generate_series(1, {LARGE_ITEMS}) g) || '}}'",
        ),
        ("long-string", f"'\"' || repeat('\\u00e9', {LARGE_BYTES // 8}) || '\"'"),
        ("numbers", f"'[' || repeat('123456789012345678901234567890,', {LARGE_ITEMS}) || '1]'"),
    ],
    "json": [("deep", "repeat('[', 5000) || repeat(']', 5000)")],
    "integer[]": [
        ("long", f"'{{' || repeat('1,', {LARGE_ITEMS}) || '1}}'"),
        ("deep", "repeat('{', 6) || '1' || repeat('}', 6)"),
        ("wide-dims", f"'[1:{LARGE_ITEMS}]={{' || repeat('1,', {LARGE_ITEMS - 1}) || '1}}'"),
    ],
    "text[]": [("quoted", f"'{{' || repeat('\"a\\\\\"b\",', {LARGE_ITEMS}) || 'c}}'")],
    "tsvector": [
        (
            "words",
            f"(SELECT string_agg('w' || g, ' ' ORDER BY g DESC) FROM generate_series(1, {LARGE_ITEMS // 8}) g)",
        ),
        ("same-word", f"repeat('w:1 ', {LARGE_ITEMS // 8})"),
        (
            "positions",
            "'w:' || (SELECT string_agg(g::text, ',' ORDER BY g DESC) FROM generate_series(1, 16383) g)",
        ),
    ],
    "tsquery": [
        (
            "and",
            f"(SELECT string_agg('w' || g, ' & ') FROM generate_series(1, {LARGE_ITEMS // 16}) g)",
        ),
        ("deep", "repeat('(', 3000) || 'a' || repeat(')', 3000)"),
        ("nots", f"repeat('!', {LARGE_ITEMS // 16}) || 'a'"),
        (
            "phrase",
            f"(SELECT string_agg('w' || g, ' <-> ') FROM generate_series(1, {LARGE_ITEMS // 16}) g)",
        ),
    ],
    "polygon": [("points", f"'(' || repeat('(1,2),', {LARGE_ITEMS}) || '(3,4))'")],
    "path": [("points", f"'[' || repeat('(1,2),', {LARGE_ITEMS}) || '(3,4)]'")],
    "numeric": [
        ("digits", f"repeat('9', {NUMERIC_WHOLE_DIGITS})"),
        ("exponent", "'1e131071'"),
        ("too-many-digits", f"repeat('9', {LARGE_BYTES})"),
        ("zeros", f"'0.' || repeat('0', {LARGE_BYTES})"),
    ],
    "double precision": [
        ("digits", f"repeat('9', {LARGE_BYTES})"),
        ("zeros", f"'0.' || repeat('0', {LARGE_BYTES}) || '1'"),
    ],
    "real": [("digits", f"repeat('9', {LARGE_BYTES})")],
    "integer": [
        ("spaces", f"repeat(' ', {LARGE_BYTES}) || '1'"),
        ("zeros", f"repeat('0', {LARGE_BYTES}) || '1'"),
    ],
    "bigint": [("zeros", f"repeat('0', {LARGE_BYTES}) || '1'")],
    "int4multirange": [
        (
            "ranges",
            f"'{{' || (SELECT string_agg('[' || 2 * g || ',' || 2 * g + 1 || ')', ',' ORDER BY g DESC) FROM generate_series(1, {LARGE_ITEMS}) g) || '}}'",
        ),
    ],
    "nummultirange": [
        (
            "ranges",
            f"'{{' || (SELECT string_agg('[' || 2 * g || ',' || 2 * g + 1 || ')', ',' ORDER BY g DESC) FROM generate_series(1, {LARGE_ITEMS}) g) || '}}'",
        ),
    ],
    "bit varying": [("bits", f"repeat('1', {LARGE_BYTES})")],
    "bytea": [
        ("escape", f"repeat('\\\\001', {LARGE_BYTES // 4})"),
        ("hex", f"'\\x' || repeat('ab', {LARGE_BYTES // 2})"),
    ],
    "interval": [("long", f"repeat('1 day ', {MEDIUM_BYTES})")],
    "timestamp with time zone": [("long", f"repeat('2024 ', {MEDIUM_BYTES})")],
    "date": [("long", f"repeat(' ', {LARGE_BYTES}) || '2024-01-01'")],
    "txid_snapshot": [
        (
            "xips",
            f"'1:{LARGE_ITEMS + 2}:' || (SELECT string_agg(g::text, ',') FROM generate_series(1, {LARGE_ITEMS}) g)",
        )
    ],
    "jsonpath": [
        ("deep", "repeat('(', 3000) || '1' || repeat(')', 3000)"),
        ("long", f"'$' || repeat('.a', {LARGE_ITEMS})"),
        ("filters", f"'$' || repeat(' ? (@ > 0)', {MEDIUM_ITEMS})"),
    ],
    "oidvector": [("long", f"repeat('23 ', {LARGE_ITEMS})")],
    "regclass": [("long-name", f"repeat('a.', {MEDIUM_BYTES}) || 'a'")],
    "regprocedure": [("long-args", f"'f(' || repeat('int4,', {MEDIUM_BYTES}) || 'int4)'")],
    "aclitem[]": [
        (
            "items",
            f"'{{' || repeat('postgres=arwdDxt/postgres,', {LARGE_ITEMS // 16}) || 'postgres=r/postgres}}'",
        )
    ],
    "xid8": [("zeros", f"repeat('0', {LARGE_BYTES}) || '1'")],
    "money": [("digits", f"repeat('9', {LARGE_BYTES})")],
    "inet": [("long", f"repeat('1', {LARGE_BYTES})")],
}


@dataclass(slots=True)
class Measurement:
    """One call and how it ended.

    Attributes:
        key: The C symbol (the review's key).
        signature: The function's name and arguments.
        route: Which route the call exercises (`call`, `input`, `output`, `aggregate`).
        arguments: The values given, by name.
        elapsed_s: From sending the call to its answer (or to the kill).
        overrun_s: How long after the timeout the answer came.
        outcome: `done`, `cancelled`, `error <sqlstate>` or `killed`.
    """

    key: str
    signature: str
    route: str
    arguments: str
    elapsed_s: float
    overrun_s: float
    outcome: str


@dataclass(slots=True)
class Runner:
    """Runs calls on one superuser connection, killing a backend that overruns."""

    dsn: str
    timeout_ms: int
    kill_after_s: float
    conn: psycopg.Connection[Any] | None = None
    pid: int = 0
    kills: int = 0
    log: list[str] = field(default_factory=list)

    def connect(self) -> psycopg.Connection[Any]:
        """Return the open connection, opening it (after a recovery) when needed."""
        if self.conn is not None and not self.conn.closed:
            return self.conn
        deadline = time.monotonic() + RECOVERY_TIMEOUT_S
        while True:
            # A cluster restarting after a kill may accept a connection and close it again.
            try:
                self.conn = psycopg.connect(self.dsn, autocommit=True)
                row = self.conn.execute("SELECT pg_backend_pid()").fetchone()
                self.pid = int(row[0]) if row else 0
                self.conn.execute(f"SET statement_timeout = {self.timeout_ms}")
                # One process per call: a parallel worker would be a second backend to watch.
                self.conn.execute("SET max_parallel_workers_per_gather = 0")
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        return self.conn

    def run(self, sql: str, timeout_ms: int) -> tuple[float, str]:
        """Run one call under a statement timeout; return (elapsed seconds, outcome)."""
        conn = self.connect()
        if timeout_ms != self.timeout_ms:
            conn.execute(f"SET statement_timeout = {timeout_ms}")
            self.timeout_ms = timeout_ms
        pid = self.pid
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            os.kill(pid, signal.SIGKILL)

        watchdog = threading.Timer(timeout_ms / 1000 + self.kill_after_s, kill)
        started = time.monotonic()
        watchdog.start()
        try:
            conn.execute(sql)
            outcome = "done"
        except psycopg.errors.QueryCanceled:
            outcome = "cancelled"
        except psycopg.OperationalError as exc:
            outcome = "killed" if killed.is_set() else f"error {exc.sqlstate or 'connection'}"
            conn.close()
        except psycopg.Error as exc:
            outcome = f"error {exc.sqlstate}"
        finally:
            watchdog.cancel()
        elapsed = time.monotonic() - started
        if killed.is_set():
            outcome = "killed"
            self.kills += 1
            if self.conn is not None:
                self.conn.close()
        return elapsed, outcome


def _slug(type_name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", type_name).strip("_") + (
        "_arr" if type_name.endswith("[]") else ""
    )


def build_inputs(conn: psycopg.Connection[Any], types: Sequence[str]) -> None:
    """Store the `L` and `A` values of `types`, and the input route's texts, before timing.

    A type PostgreSQL never moves out of line (storage `plain`, such as `tsquery`) cannot
    hold a large value in a row: its values are stored as text and cast back in the call
    (`STORED_AS_TEXT`), whose input function is then part of what is measured.
    """
    conn.execute("SET statement_timeout = 0")
    conn.execute("CREATE SCHEMA IF NOT EXISTS mcp_inputs")
    for type_name in types:
        if type_name in INLINE_TYPES:
            continue
        table = f"mcp_inputs.v_{_slug(type_name)}"
        toastable = conn.execute(
            "SELECT typstorage <> 'p' FROM pg_type WHERE oid = %s::regtype", (type_name,)
        ).fetchone() == (True,)
        column = type_name if toastable else "text"
        if not toastable:
            STORED_AS_TEXT.add(type_name)
        if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone() != (None,):
            continue
        with conn.transaction():
            conn.execute(f"CREATE TABLE {table} (k text PRIMARY KEY, v {column})")
            conn.execute(f"ALTER TABLE {table} ALTER COLUMN v SET STORAGE EXTERNAL")
            for value in VALUES[type_name]:
                if value.role != "D":
                    # Names are plain words; the SQL is the harness's own, never a parameter.
                    conn.execute(
                        f"INSERT INTO {table} VALUES "
                        f"('{value.name}', ({value.sql})::{type_name}::{column})"
                    )
    conn.execute("CREATE TABLE IF NOT EXISTS mcp_inputs.texts (k text PRIMARY KEY, v text)")
    conn.execute("ALTER TABLE mcp_inputs.texts ALTER COLUMN v SET STORAGE EXTERNAL")
    for type_name, texts in INPUT_TEXTS.items():
        for name, sql in texts:
            conn.execute(
                f"INSERT INTO mcp_inputs.texts VALUES ('{type_name}/{name}', {sql}) "
                "ON CONFLICT DO NOTHING"
            )


def _argument_sql(type_name: str, value: Value) -> str:
    if value.role == "D" or type_name in INLINE_TYPES:
        return f"({value.sql})::{type_name}"
    table = f"mcp_inputs.v_{_slug(type_name)}"
    cast = f"::{type_name}" if type_name in STORED_AS_TEXT else ""
    return f"(SELECT v{cast} FROM {table} WHERE k = '{value.name}')"


def _bind(fn: Reachable) -> Iterator[tuple[str, list[str]]]:
    # The concrete argument types of each binding (one, for a signature without pseudo-types).
    polymorphic = [t for t in fn.argument_types if t.startswith("any") or t == '"any"']
    if not polymorphic:
        yield "", list(fn.argument_types)
        return
    seen = set()
    for name, binding in BINDINGS.items():
        if not all(t in binding for t in polymorphic):
            continue
        types = [binding.get(t, t) for t in fn.argument_types]
        if tuple(types) not in seen:
            seen.add(tuple(types))
            yield name, types


def _combinations(types: Sequence[str]) -> Iterator[list[Value]]:
    # Rule "Arguments": defaults; each non-default value alone; a large value with each
    # adversarial one elsewhere; every varying argument large.
    defaults = [VALUES[t][0] for t in types]
    yield list(defaults)
    for i, t in enumerate(types):
        for value in VALUES[t][1:]:
            yield [value if j == i else d for j, d in enumerate(defaults)]
    for i, j in itertools.permutations(range(len(types)), 2):
        larges = [v for v in VALUES[types[i]] if v.role == "L"][:2]
        adversarial = [v for v in VALUES[types[j]] if v.role == "A"]
        for large, other in itertools.product(larges, adversarial):
            combo = list(defaults)
            combo[i], combo[j] = large, other
            yield combo
    larges = [next((v for v in VALUES[t] if v.role == "L"), VALUES[t][0]) for t in types]
    if sum(v.role == "L" for v in larges) > 1:
        yield larges


def function_calls(fn: Reachable, variadic: str | None) -> Iterator[tuple[str, str]]:
    """Yield (arguments, SQL) for every combination of one function's arguments."""
    for binding, types in _bind(fn):
        if not all(t in VALUES for t in types):
            continue
        for combo in _combinations(types):
            args = [_argument_sql(t, v) for t, v in zip(types, combo, strict=True)]
            if variadic is not None and variadic != '"any"' and args:
                # The last argument is already the variadic parameter's array type.
                args[-1] = f"VARIADIC {args[-1]}"
            call = f"pg_catalog.{_quoted(fn.name)}({', '.join(args)})"
            label = ",".join(f"{t}={v.name}" for t, v in zip(types, combo, strict=True))
            label = f"[{binding}] {label}" if binding else label
            if fn.returns_set:
                yield label, f"SELECT count(*) FROM {call} AS r"
            else:
                yield label, f"SELECT pg_catalog.pg_column_size({call})"


def _quoted(name: str) -> str:
    return name if re.fullmatch(r"[a-z_][a-z0-9_]*", name) else '"' + name.replace('"', '""') + '"'


def aggregate_calls(fn: Reachable, kind: str, direct: int) -> Iterator[tuple[str, str]]:
    """Yield (arguments, SQL) for an aggregate over a million rows.

    The rows are the elements of the large array of each aggregated argument's type (a
    million distinct values; ranges in descending order), or its default repeated.

    Args:
        fn: The aggregate.
        kind: `pg_aggregate.aggkind`: `n` normal, `o` ordered-set, `h` hypothetical-set.
        direct: How many direct arguments it takes (ordered-set and hypothetical-set).
    """
    for binding, bound in _bind(fn):
        types = [bound[0], bound[0]] if kind == "h" else bound
        if kind == "h":
            direct = 1
        direct_types, aggregated = types[:direct], types[direct:]
        if not aggregated or not all(t in VALUES for t in types):
            continue
        sources = []
        for t in aggregated:
            array_type = f"{t}[]"
            if array_type in VALUES and any(v.name == "large" for v in VALUES[array_type]):
                sources.append(
                    f"(SELECT v FROM mcp_inputs.v_{_slug(array_type)} WHERE k = 'large')"
                )
            else:
                default = _argument_sql(t, VALUES[t][0])
                sources.append(f"array_fill({default}, ARRAY[{LARGE_ITEMS}])")
        columns = [f"x{i}" for i in range(len(aggregated))]
        direct_sql = [_argument_sql(t, VALUES[t][0]) for t in direct_types]
        if kind == "n":
            call = f"pg_catalog.{_quoted(fn.name)}({', '.join(columns)})"
        else:
            call = (
                f"pg_catalog.{_quoted(fn.name)}({', '.join(direct_sql)}) "
                f"WITHIN GROUP (ORDER BY {', '.join(columns)})"
            )
        sql = (
            f"SELECT pg_catalog.pg_column_size({call}) "
            f"FROM pg_catalog.unnest({', '.join(sources)}) AS u({', '.join(columns)})"
        )
        label = ",".join(aggregated)
        yield f"[{binding}] {label} x{LARGE_ITEMS}" if binding else f"{label} x{LARGE_ITEMS}", sql


def _report(m: Measurement, budget: float) -> None:
    if m.overrun_s > budget or m.outcome == "killed":
        print(
            f"OVERRUN {m.overrun_s:8.2f} s  {m.outcome:<14} {m.key:<32} {m.signature}  "
            f"[{m.route}] {m.arguments}",
            flush=True,
        )


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--major", type=int, default=None, help="the major to start")
    parser.add_argument("--dsn", help="a throwaway cluster's superuser DSN (else start one)")
    parser.add_argument("--only", help="a regular expression over C symbols and names")
    parser.add_argument("--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS)
    parser.add_argument("--kill-after", type=float, default=DEFAULT_KILL_AFTER_S)
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S)
    parser.add_argument("--aggregate-timeout-ms", type=int, default=DEFAULT_AGGREGATE_TIMEOUT_MS)
    parser.add_argument("--json", type=Path, help="write every measurement here")
    parser.add_argument("--routes", default="call,input,output,aggregate")
    parser.add_argument("--list", action="store_true", help="list the selected functions and stop")
    parser.add_argument(
        "--every-runaway",
        action="store_true",
        help="keep calling a function after its first runaway (each costs a restart)",
    )
    return parser.parse_args(argv)


def _needed_types(selected: Sequence[Reachable]) -> list[str]:
    # The argument types the selected functions are called with, and their array types (an
    # aggregate's rows come from them): only these are built, so that `--only` is quick.
    needed: set[str] = set()
    for fn in selected:
        for _, types in _bind(fn):
            needed.update(types)
            needed.update(f"{t}[]" for t in types)
    return sorted(t for t in needed if t in VALUES)


@dataclass(slots=True)
class Session:
    """One run of the harness over the selected functions."""

    runner: Runner
    options: argparse.Namespace
    results: list[Measurement] = field(default_factory=list)
    runaways: set[str] = field(default_factory=set)

    def measure(
        self, fn: Reachable, route: str, label: str, sql: str, timeout_ms: int | None = None
    ) -> None:
        """Run one call and record how late it came back.

        Once a C symbol has had a runaway, its other calls are skipped unless
        `--every-runaway` asks for them: each costs the kill delay and a cluster restart.
        """
        if fn.key in self.runaways and not self.options.every_runaway:
            return
        timeout_ms = timeout_ms or self.options.timeout_ms
        elapsed, outcome = self.runner.run(sql, timeout_ms)
        overrun = max(0.0, elapsed - timeout_ms / 1000)
        m = Measurement(
            fn.key, fn.signature, route, label, round(elapsed, 3), round(overrun, 3), outcome
        )
        self.results.append(m)
        if outcome == "killed":
            self.runaways.add(fn.key)
        _report(m, self.options.budget)

    def run_function(
        self,
        fn: Reachable,
        variadic: str | None,
        aggregate: tuple[str, int] | None,
        seen_output: set[str],
    ) -> None:
        """Run every call of one function, by each route the options select."""
        routes = set(self.options.routes.split(","))
        named = {"call", "operator", "cast", "sql-body"} & set(fn.routes)
        if "call" in routes and fn.kind == "f" and named:
            for label, sql in function_calls(fn, variadic):
                self.measure(fn, "call", label, sql)
        if "aggregate" in routes and fn.kind == "a" and aggregate is not None:
            for label, sql in aggregate_calls(fn, *aggregate):
                self.measure(fn, "aggregate", label, sql, self.options.aggregate_timeout_ms)
        if "input" in routes and "input" in fn.routes:
            for type_name in _types_of_input(self.runner.connect(), fn):
                for name, _ in INPUT_TEXTS.get(type_name, []):
                    sql = (
                        "SELECT pg_catalog.pg_column_size((SELECT v FROM mcp_inputs.texts "
                        f"WHERE k = '{type_name}/{name}')::{type_name})"
                    )
                    self.measure(fn, "input", f"{type_name}/{name}", sql)
        if "output" in routes and "output" in fn.routes:
            for type_name in _types_of_output(self.runner.connect(), fn):
                if type_name in seen_output or type_name not in VALUES:
                    continue
                seen_output.add(type_name)
                for value in VALUES[type_name][1:]:
                    sql = f"SELECT pg_catalog.length(({_argument_sql(type_name, value)})::text)"
                    self.measure(fn, "output", f"{type_name}={value.name}", sql)

    def summarise(self, major: int, elapsed: float) -> None:
        """Print the functions that overran, and write `--json` when asked."""
        over: dict[str, list[Measurement]] = {}
        for m in self.results:
            if m.overrun_s > self.options.budget or m.outcome == "killed":
                over.setdefault(m.key, []).append(m)
        print(
            f"\n{len(self.results)} calls in {elapsed:.0f} s, {self.runner.kills} runaways killed"
        )
        print(f"{len(over)} C symbols overran {self.options.budget} s:")
        for key, found in sorted(over.items()):
            worst = max(found, key=lambda m: m.overrun_s)
            print(
                f"  {key:<34} {len(found):4} calls, worst {worst.overrun_s:7.2f} s "
                f"({worst.outcome}) {worst.signature} {worst.arguments}"
            )
        if self.options.json:
            document = {
                "major": major,
                "timeout_ms": self.options.timeout_ms,
                "kill_after_s": self.options.kill_after,
                "measurements": [asdict(m) for m in self.results],
            }
            self.options.json.write_text(json.dumps(document, indent=0))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the harness (see the module docstring).

    Args:
        argv: The command line's arguments (None: `sys.argv`).

    Returns:
        The exit status: 0 once every selected call was measured.
    """
    options = _parse(argv)
    # SIGTERM unwinds like Ctrl-C, so that the cluster this run started is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    only = re.compile(options.only) if options.only else None
    server = base = None
    dsn = options.dsn
    if dsn is None:
        server, base = start_postgres(log_statements=False, major=options.major)
        dsn = server.superuser_dsn
    try:
        runner = Runner(dsn, options.timeout_ms, options.kill_after)
        conn = runner.connect()
        # Reading the catalog is not measured: no timeout, even on a loaded machine.
        conn.execute("SET statement_timeout = 0")
        row = conn.execute("SELECT current_setting('server_version_num')::int").fetchone()
        major = int(row[0]) // 10_000 if row else 0
        reach = reachable_functions(conn, major)
        selected = [
            fn for fn in reach if only is None or only.search(fn.key) or only.search(fn.name)
        ]
        print(
            f"PostgreSQL {major}: {len(reach)} reachable functions, "
            f"{len({f.key for f in reach})} C symbols; {len(selected)} selected",
            flush=True,
        )
        if options.list:
            for fn in selected:
                print(f"{fn.key:<34} {fn.signature} [{','.join(fn.routes)}]")
            return 0
        variadic = dict(
            conn.execute(
                "SELECT oid::int8, provariadic::regtype::text FROM pg_proc WHERE provariadic <> 0"
            ).fetchall()
        )
        aggregates = {
            int(oid): (str(kind), int(direct))
            for oid, kind, direct in conn.execute(
                "SELECT aggfnoid::oid::int8, aggkind::text, aggnumdirectargs FROM pg_aggregate"
            ).fetchall()
        }
        started = time.monotonic()
        build_inputs(conn, _needed_types(selected))
        conn.execute(f"SET statement_timeout = {options.timeout_ms}")
        print(f"inputs built in {time.monotonic() - started:.0f} s", flush=True)
        started = time.monotonic()
        session = Session(runner, options)
        seen_output: set[str] = set()
        for fn in selected:
            session.run_function(fn, variadic.get(fn.oid), aggregates.get(fn.oid), seen_output)
        session.summarise(major, time.monotonic() - started)
    finally:
        if server is not None and base is not None:
            stop_postgres(server, base)
    return 0


def _types_of_input(conn: psycopg.Connection[Any], fn: Reachable) -> list[str]:
    rows = conn.execute(
        "SELECT oid::regtype::text FROM pg_type WHERE typinput = %s AND oid < 16384 AND typtype <> 'p'",
        (fn.oid,),
    ).fetchall()
    return [str(r[0]) for r in rows]


def _types_of_output(conn: psycopg.Connection[Any], fn: Reachable) -> list[str]:
    rows = conn.execute(
        "SELECT oid::regtype::text FROM pg_type WHERE typoutput = %s AND oid < 16384", (fn.oid,)
    ).fetchall()
    return [str(r[0]) for r in rows]


if __name__ == "__main__":
    sys.exit(main())
