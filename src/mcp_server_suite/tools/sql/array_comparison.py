"""Which comparisons with every element of an array the statement timeout can stop.

`x op ANY (array)` and `x op ALL (array)` (a `ScalarArrayOpExpr` in PostgreSQL's tree) call
the operator's function once per element in one loop that never checks for cancellation.
Each call is bounded by its arguments, and the loop by the array's length, so the whole is
linear, except when `x` is a value read from a table: a wide value is stored compressed or
out of line, and each call fetches and expands it again (a 131,071-digit `numeric` against
200,000 elements ran 3 s past a 0.2 s timeout, and the array can hold a hundred million).

Rules:

1. An array written in the query is bounded by the query's length: a constant, or an
   `ARRAY[...]` of one dimension (`IN (...)` is one), each possibly cast. Against such an
   array any `x` is allowed.
2. Any other array (a column, a function's result, a subquery) may be as long as PostgreSQL
   allows. Against it `x` must hold no value read from a table or a subquery: none of the
   labels of `_STORED_VALUE_LABELS` anywhere beneath it.
3. Or `x` is of a fixed-length built-in type (an integer, a date, a uuid, ...), which is
   never stored compressed or out of line, whatever it was computed from.
"""

from collections.abc import Mapping
from typing import Final

from mcp_server_suite.tools.sql.node_text import Node, Value

__all__ = ["UNBOUNDED_ARRAY_COMPARISON", "UNBOUNDED_ARRAY_COMPARISON_ADVICE", "is_unbounded"]

# What the caller is told the refused construct is, and what to write instead: a scan of the
# unnested elements checks for cancellation at every row.
UNBOUNDED_ARRAY_COMPARISON: Final = (
    "a value read from a table compared with every element of an array that the query does "
    "not write out (op ANY or op ALL), which the statement timeout cannot stop"
)
UNBOUNDED_ARRAY_COMPARISON_ADVICE: Final = (
    "Compare the unnested elements instead, e.g. EXISTS (SELECT FROM unnest(array) AS e "
    "WHERE x = e), or write the array's elements in the query."
)

# Nodes that wrap an array without changing how many elements it has (Rule 1).
_ARRAY_WRAPPERS: Final = frozenset({"RELABELTYPE", "COERCETODOMAIN", "ARRAYCOERCEEXPR"})
# Nodes whose value may be one read from a table, or taken from a subquery's row (Rule 2).
_STORED_VALUE_LABELS: Final = frozenset(
    {"VAR", "PARAM", "SUBLINK", "AGGREF", "WINDOWFUNC", "COERCETODOMAINVALUE"}
)
# The field of each node kind that gives the type of its value (Rule 3).
_RESULT_TYPE_FIELDS: Final[Mapping[str, str]] = {
    "VAR": "vartype",
    "CONST": "consttype",
    "FUNCEXPR": "funcresulttype",
    "OPEXPR": "opresulttype",
    "AGGREF": "aggtype",
    "WINDOWFUNC": "wintype",
    "RELABELTYPE": "resulttype",
    "CASEEXPR": "casetype",
    "COALESCEEXPR": "coalescetype",
    "MINMAXEXPR": "minmaxtype",
}
# The built-in types of a fixed length (pg_type.typlen > 0), by object id: bool, "char",
# name, int8, int2, int4, regproc, oid, tid, xid, cid, point, lseg, box, line, float4,
# float8, circle, money, macaddr8, macaddr, date, time, timestamp, timestamptz, interval,
# timetz, regclass, regtype, uuid, pg_lsn, xid8 (Rule 3).
_FIXED_LENGTH_TYPES: Final = frozenset(
    {
        "16", "18", "19", "20", "21", "23", "24", "26", "27", "28", "29", "600", "601",
        "603", "628", "700", "701", "718", "790", "774", "829", "1082", "1083", "1114",
        "1184", "1186", "1266", "2205", "2206", "2950", "3220", "5069",
    }
)  # fmt: skip
# How deep a scalar is searched for a stored value: deeper than this counts as one, which
# only refuses (the policy's own nesting bound keeps real queries far below it).
_MAX_SEARCH_DEPTH: Final = 256


def is_unbounded(comparison: Node) -> bool:
    """Whether a `SCALARARRAYOPEXPR` compares a stored value with an unbounded array.

    Args:
        comparison: The node, as `node_text.read_node_text` reads it.

    Returns:
        True when the statement timeout could not stop it (Rules 1 to 3).
    """
    arguments = comparison.fields.get("args")
    if not isinstance(arguments, list) or len(arguments) != 2:
        return True
    scalar, array = arguments
    if _written_in_the_query(array):
        return False
    return not _fixed_length(scalar) and _may_hold_stored_value(scalar, 0)


def _written_in_the_query(array: Value) -> bool:
    # Rule 1: a constant, or a one-dimensional ARRAY[...], possibly cast.
    while isinstance(array, Node) and array.label in _ARRAY_WRAPPERS:
        array = array.fields.get("arg")
    if not isinstance(array, Node):
        return False
    if array.label == "CONST":
        return True
    return array.label == "ARRAYEXPR" and array.fields.get("multidims") == "false"


def _fixed_length(scalar: Value) -> bool:
    # Rule 3: the type of the scalar's value, where its node names one.
    if not isinstance(scalar, Node):
        return False
    field = _RESULT_TYPE_FIELDS.get(scalar.label)
    return field is not None and scalar.fields.get(field) in _FIXED_LENGTH_TYPES


def _may_hold_stored_value(value: Value, depth: int) -> bool:
    # Rule 2: whether any node beneath `value` may carry a value read from a table.
    if depth > _MAX_SEARCH_DEPTH:
        return True
    if isinstance(value, list):
        return any(_may_hold_stored_value(item, depth + 1) for item in value)
    if not isinstance(value, Node):
        return False
    if value.label in _STORED_VALUE_LABELS:
        return True
    return any(_may_hold_stored_value(item, depth + 1) for item in value.fields.values())
