"""What code a resolved query may run, from the catalog of the connected server.

`resolution.py` says which functions, operators, types and relations a query resolved to,
by object id. This module holds the object ids allowed on the connected server and decides.

Rules:

1. Functions. Allowed are the functions of `pg_catalog` whose names are on the reviewed
   list of the server's major (`functions.callable_functions`), the functions behind its
   operators (`operator_functions.py`), the support functions of `functions.SUPPORT_FUNCTIONS`,
   and every overload of the operator's `MCP_SQL_ALLOWED_FUNCTIONS` (an unqualified entry in
   `pg_catalog` or a trusted extension's schema, a qualified one in its schema). A name
   denied by `functions.denial_reason` is never allowed, whatever the configuration says.
2. Operators are allowed when the function behind them is: an operator is only a spelling
   of its function.
3. Types. A type made by initdb is allowed, except that the input function of `xml` never
   runs on the caller's text: it parses documents in libxml2, which the statement timeout
   cannot stop. That holds for every type whose input reaches xml's: xml's array, and a
   type made of xml (an array of a domain over xml, a composite type or a table's row type
   with an xml attribute). Another type is allowed when every support function it
   has (input, output, receive, send, typmod, subscripting; a range's canonical and
   subtype_diff) is built in, part of a trusted extension or allowed by Rule 1, the types
   it is made of (its element, base, subtype or, for a composite type, its attributes'
   types, whose input functions its own calls) are allowed, and, for a domain, every
   CHECK constraint calls only allowed code (its stored tree is read as the query's is).
   The schema a type lives in does not matter: a type runs code through those alone.
4. Relations the caller's own query levels read must be in `pg_catalog`,
   `information_schema` or `MCP_SQL_SCHEMAS`; the relations a view reads are the view
   owner's choice (`resolution.py`, Rule 3).
5. Facts about objects that are not built in (a type's support functions, a relation's
   schema) are read from the catalog when a query first names them, and kept with the
   rest until the catalog is read again (`tool.py`).
6. A refusal is `RefusedObject`, naming the kind and object id; `probe.py` names it in the
   caller's terms.
"""

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from mcp_server_suite.tools.sql.functions import (
    ALL_BUILTIN_FUNCTIONS,
    SUPPORT_FUNCTIONS,
    UNINTERRUPTIBLE_OVERLOADS,
    callable_functions,
    denial_reason,
)
from mcp_server_suite.tools.sql.node_text import NodeTextError, read_node_text
from mcp_server_suite.tools.sql.operator_functions import OPERATOR_FUNCTIONS
from mcp_server_suite.tools.sql.resolution import (
    FIRST_USER_OID,
    ResolutionError,
    ResolvedCode,
    collect_resolved_code,
)

__all__ = [
    "ALL_BUILTIN_NAMES",
    "CODE_CATALOG_SQL",
    "MAX_LOOKUP_ROUNDS",
    "NO_INPUT_TYPES",
    "OBJECT_FACTS_SQL",
    "CodeCatalog",
    "ObjectFacts",
    "RefusedObject",
    "TypeFacts",
    "builtin_function_names",
    "ensure_allowed_code",
    "missing_facts",
    "read_constraints",
]

# The types whose input function never runs on the caller's text (Rule 3): xml and xml[]
# (their object ids are fixed by pg_type.dat), nor that of a type made of either.
NO_INPUT_TYPES: Final = frozenset({142, 143})
# Facts about objects that are not built in are looked up at most this many times for one
# query: a domain over a domain over a range type is three rounds; a query whose types need
# more rounds is refused.
MAX_LOOKUP_ROUNDS: Final = 8
# The schemas whose relations any query may read (their relations come with initdb or with
# extensions installed into them by a superuser).
_BUILTIN_RELATION_SCHEMAS: Final = frozenset({"pg_catalog", "information_schema"})

# The allowed functions and operators of the server (Rules 1 and 2), in one round trip. p1:
# the built-in names of every major; p2: the unqualified allowed names; p3: the schemas an
# unqualified name resolves in; p4: the qualified allowed names (`schema.name`); p5: the
# trusted extensions. Each row is (kind, object id, text, number of arguments): `v` the
# server's version number,
# `b` a built-in function and its name (kept when its major's list holds it), `f` a function
# the configuration allows and its name, `o` an operator and its function's object id, `e` a
# member function of a trusted extension.
CODE_CATALOG_SQL: Final = """
SELECT 'v', pg_catalog.current_setting('server_version_num')::pg_catalog.int8, '', 0
UNION ALL
SELECT 'b', p.oid::pg_catalog.int8, p.proname::pg_catalog.text, p.pronargs::pg_catalog.int4
FROM pg_catalog.pg_proc AS p
WHERE p.pronamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace
  AND p.proname::pg_catalog.text IN (SELECT pg_catalog.unnest(%(p1)s::pg_catalog.text[]))
UNION ALL
SELECT 'f', p.oid::pg_catalog.int8, p.proname::pg_catalog.text, p.pronargs::pg_catalog.int4
FROM pg_catalog.pg_proc AS p
JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
WHERE (p.proname OPERATOR(pg_catalog.=) ANY (%(p2)s::pg_catalog.text[])
       AND n.nspname OPERATOR(pg_catalog.=) ANY (%(p3)s::pg_catalog.text[]))
   OR pg_catalog.concat(n.nspname, '.', p.proname)
      OPERATOR(pg_catalog.=) ANY (%(p4)s::pg_catalog.text[])
UNION ALL
SELECT 'o', o.oid::pg_catalog.int8, o.oprcode::pg_catalog.int8::pg_catalog.text, 0
FROM pg_catalog.pg_operator AS o
UNION ALL
SELECT 'e', d.objid::pg_catalog.int8, '', 0
FROM pg_catalog.pg_depend AS d JOIN pg_catalog.pg_extension AS e
  ON e.oid OPERATOR(pg_catalog.=) d.refobjid
WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
  AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
  AND d.deptype OPERATOR(pg_catalog.=) 'e'
  AND e.extname OPERATOR(pg_catalog.=) ANY (%(p5)s::pg_catalog.text[])"""

# Facts about the types (p1) and relations (p2) a query names that are not built in (Rule 5).
# A type row: ('t', oid, support functions, types it is made of, domain CHECK trees, name),
# the types it is made of being its element, base, range subtype, the range of a
# multirange and a composite type's attribute types; a relation row: ('r', oid, NULL, NULL,
# NULL, its schema).
OBJECT_FACTS_SQL: Final = """
SELECT 't', t.oid::pg_catalog.int8,
       ARRAY[t.typinput, t.typoutput, t.typreceive, t.typsend, t.typmodin, t.typmodout,
             t.typsubscript, COALESCE(r.rngcanonical, 0), COALESCE(r.rngsubdiff, 0)
       ]::pg_catalog.int8[],
       ARRAY[t.typelem, t.typbasetype, COALESCE(r.rngsubtype, 0), COALESCE(m.rngtypid, 0)
       ]::pg_catalog.int8[] OPERATOR(pg_catalog.||)
       ARRAY(SELECT a.atttypid::pg_catalog.int8 FROM pg_catalog.pg_attribute AS a
             WHERE a.attrelid OPERATOR(pg_catalog.=) t.typrelid
               AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped),
       ARRAY(SELECT c.conbin::pg_catalog.text FROM pg_catalog.pg_constraint AS c
             WHERE c.contypid OPERATOR(pg_catalog.=) t.oid AND c.conbin IS NOT NULL),
       t.oid::pg_catalog.regtype::pg_catalog.text
FROM pg_catalog.pg_type AS t
LEFT JOIN pg_catalog.pg_range AS r ON r.rngtypid OPERATOR(pg_catalog.=) t.oid
LEFT JOIN pg_catalog.pg_range AS m ON m.rngmultitypid OPERATOR(pg_catalog.=) t.oid
WHERE t.oid OPERATOR(pg_catalog.=) ANY (%(p1)s::pg_catalog.oid[])
UNION ALL
SELECT 'r', c.oid::pg_catalog.int8, NULL, NULL, NULL, n.nspname::pg_catalog.text
FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n
  ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
WHERE c.oid OPERATOR(pg_catalog.=) ANY (%(p2)s::pg_catalog.oid[])"""


# Every built-in name any supported major allows (`CODE_CATALOG_SQL`'s p1).
ALL_BUILTIN_NAMES: Final = ALL_BUILTIN_FUNCTIONS | OPERATOR_FUNCTIONS | SUPPORT_FUNCTIONS


@functools.lru_cache(maxsize=8)
def builtin_function_names(major: int) -> frozenset[str]:
    """Return the names of the built-ins allowed on one major (Rule 1), denied names aside.

    Args:
        major: The server's major version.
    """
    names = callable_functions(major) | OPERATOR_FUNCTIONS | SUPPORT_FUNCTIONS
    return frozenset(name for name in names if denial_reason(name) is None)


class RefusedObject(Exception):  # A refusal, raised as the style guide's checks do.
    """The query resolved to an object it may not use (Rule 6).

    Attributes:
        kind: `function`, `operator`, `type`, `input` (a type whose input may not run on the
            caller's text), `domain` or `relation`.
        oid: Its object id.
        use: How the query reached it, for the caller.
    """

    def __init__(self, kind: str, oid: int, use: str) -> None:
        super().__init__(f"{kind} {oid}")
        self.kind = kind
        self.oid = oid
        self.use = use


@dataclass(frozen=True, slots=True)
class TypeFacts:
    """What a type that is not built in runs and is made of (Rule 3).

    Attributes:
        functions: Its support functions (0 where it has none).
        parts: Its element, base, subtype and range types (0 where it has none), and a
            composite type's attribute types.
        constraints: Its CHECK constraints' stored trees.
        name: Its name, as `regtype` writes it.
    """

    functions: tuple[int, ...]
    parts: tuple[int, ...]
    constraints: tuple[str, ...]
    name: str


@dataclass(slots=True)
class ObjectFacts:
    """Facts about objects that are not built in, as the catalog lookups found them (Rule 5).

    Attributes:
        types: By type object id.
        relations: The schema of each relation, by object id.
        constraint_code: What each domain's constraints resolve to, once read.
    """

    types: dict[int, TypeFacts] = field(default_factory=dict)
    relations: dict[int, str] = field(default_factory=dict)
    constraint_code: dict[int, ResolvedCode] = field(default_factory=dict)

    def add_rows(self, rows: Iterable[tuple[object, ...]]) -> None:
        """Record the rows of `OBJECT_FACTS_SQL`.

        Raises:
            ValueError: A row is not of the query's shape.
        """
        for kind, oid, functions, parts, constraints, name in rows:
            if kind == "t" and isinstance(functions, list) and isinstance(parts, list):
                self.types[int(str(oid))] = TypeFacts(
                    tuple(int(str(item)) for item in functions),
                    tuple(int(str(item)) for item in parts),
                    tuple(str(item) for item in constraints or ()),  # type: ignore[attr-defined]  # A text[] loads as a list.
                    str(name),
                )
            elif kind == "r":
                self.relations[int(str(oid))] = str(name)
            else:
                raise ValueError("the catalog's facts are not of the expected shape")


@dataclass(frozen=True, slots=True)
class CodeCatalog:
    """The code a query may run on the connected server (Rules 1 to 4).

    Attributes:
        major: The server's major version.
        functions: The allowed functions.
        operators: The allowed operators.
        extension_functions: The member functions of the trusted extensions.
        schemas: The schemas whose relations the caller may read.
        function_names: The name of every allowed function, by object id.
    """

    major: int
    functions: frozenset[int]
    operators: frozenset[int]
    extension_functions: frozenset[int]
    schemas: frozenset[str]
    function_names: Mapping[int, str] = field(default_factory=dict)

    @classmethod
    def from_rows(cls, schemas: Iterable[str], rows: Iterable[tuple[object, ...]]) -> "CodeCatalog":
        """Build the catalog from the rows of `CODE_CATALOG_SQL`.

        Args:
            schemas: `MCP_SQL_SCHEMAS`.
            rows: The rows.

        Returns:
            The catalog: a function whose name is denied is left out (Rule 1), and so is an
            operator whose function is left out (Rule 2).
        """
        rows = list(rows)
        version = next((int(str(row[1])) for row in rows if row[0] == "v"), 0)
        major = version // 10_000
        builtins = builtin_function_names(major)
        functions: set[int] = set()
        operator_functions: list[tuple[int, int]] = []
        extension: set[int] = set()
        names: dict[int, str] = {}
        for kind, oid, name, arguments in rows:
            number = int(str(oid))
            refused = UNINTERRUPTIBLE_OVERLOADS.get(str(name), (-1, ""))[0] == arguments
            if (kind == "b" and str(name) in builtins and not refused) or (
                kind == "f" and denial_reason(str(name)) is None
            ):
                functions.add(number)
                names[number] = str(name)
            elif kind == "o":
                operator_functions.append((number, int(str(name))))
            elif kind == "e":
                extension.add(number)
        operators = {oid for oid, function in operator_functions if function in functions}
        return cls(
            major=major,
            functions=frozenset(functions),
            operators=frozenset(operators),
            extension_functions=frozenset(extension),
            schemas=frozenset(schemas) | _BUILTIN_RELATION_SCHEMAS,
            function_names=names,
        )


def missing_facts(code: ResolvedCode, facts: ObjectFacts) -> tuple[frozenset[int], frozenset[int]]:
    """Return the types and relations a decision needs facts about that are not known yet.

    Args:
        code: What the query resolved to.
        facts: What is known.

    Returns:
        (types, relations) to look up with `OBJECT_FACTS_SQL`; both empty when the decision
        can be made.
    """
    types: set[int] = set()
    seen: set[int] = set()
    pending = [oid for oid in code.types if oid >= FIRST_USER_OID]
    while pending:
        oid = pending.pop()
        if oid in seen or oid < FIRST_USER_OID:
            continue
        seen.add(oid)
        known = facts.types.get(oid)
        if known is None:
            types.add(oid)
            continue
        pending.extend(known.parts)
        inner = facts.constraint_code.get(oid)
        if inner is not None:
            pending.extend(inner.types)
    relations = {
        oid for oid in code.relations if oid >= FIRST_USER_OID and oid not in facts.relations
    }
    return frozenset(types), frozenset(relations)


def ensure_allowed_code(code: ResolvedCode, catalog: CodeCatalog, facts: ObjectFacts) -> None:
    """Refuse a query that resolved to code it may not run (Rules 1 to 4).

    Call it once `missing_facts` finds nothing left to look up.

    Args:
        code: What the query resolved to.
        catalog: The allowed code of the server.
        facts: Facts about the objects that are not built in.

    Raises:
        RefusedObject: The first object the query may not use.
    """
    for oid, use in sorted(code.functions.items()):
        if oid not in catalog.functions:
            raise RefusedObject("function", oid, use)
    for oid, use in sorted(code.operators.items()):
        if oid not in catalog.operators:
            raise RefusedObject("operator", oid, use)
    for oid in sorted(code.types):
        _ensure_type(oid, catalog, facts, set())
    # Every type the query makes from text has passed `_ensure_type`, so the facts of each
    # type it is made of are known.
    for oid in sorted(code.input_types):
        if _made_of_xml(oid, facts, set()):
            raise RefusedObject("input", oid, "a constant or a cast")
    for oid in sorted(code.relations):
        if oid >= FIRST_USER_OID and facts.relations.get(oid) not in catalog.schemas:
            raise RefusedObject("relation", oid, "a relation")


def _ensure_type(oid: int, catalog: CodeCatalog, facts: ObjectFacts, seen: set[int]) -> None:
    # Rule 3, for one type and what it is made of.
    if oid < FIRST_USER_OID or oid in seen:
        return
    seen.add(oid)
    known = facts.types.get(oid)
    if known is None:
        raise RefusedObject("type", oid, "a type")
    for function in known.functions:
        if (
            function
            and function >= FIRST_USER_OID
            and function not in catalog.functions
            and function not in catalog.extension_functions
        ):
            raise RefusedObject("type", oid, "a type")
    for part in known.parts:
        _ensure_type(part, catalog, facts, seen)
    inner = facts.constraint_code.get(oid)
    if known.constraints and inner is None:
        raise RefusedObject("domain", oid, "a domain")
    if inner is not None:
        try:
            ensure_allowed_code(inner, catalog, facts)
        except RefusedObject:
            raise RefusedObject("domain", oid, "a domain") from None


def _made_of_xml(oid: int, facts: ObjectFacts, seen: set[int]) -> bool:
    # Rule 3: whether the input function of a type reaches xml's (no type initdb makes
    # but xml's array is made of xml).
    if oid in NO_INPUT_TYPES:
        return True
    if oid < FIRST_USER_OID or oid in seen:
        return False
    seen.add(oid)
    return any(_made_of_xml(part, facts, seen) for part in facts.types[oid].parts)


def read_constraints(facts: ObjectFacts) -> None:
    """Resolve the CHECK constraints of every domain whose facts are known (Rule 3).

    Raises:
        ResolutionError: A constraint's tree holds a construct that is not checked.
    """
    for oid, known in facts.types.items():
        if oid in facts.constraint_code or not known.constraints:
            continue
        code = ResolvedCode()
        for text in known.constraints:
            try:
                tree = read_node_text(text.encode("utf-8", errors="surrogateescape"))
            except NodeTextError:
                raise ResolutionError("a domain's CHECK constraint") from None
            found = collect_resolved_code(tree)
            code.functions.update(found.functions)
            code.operators.update(found.operators)
            code.types |= found.types
            code.input_types |= found.input_types
        facts.constraint_code[oid] = code
