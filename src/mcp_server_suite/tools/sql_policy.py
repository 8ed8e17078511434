"""The SQL policy of `read_only_sql`: parse untrusted text, check it, cap it, regenerate it.

Rules:

1. The caller's text is never sent to PostgreSQL. It is parsed with sqlglot (PostgreSQL
   dialect) and checked here; `tools/sql.py` then rewrites its outer LIMIT, regenerates the
   SQL that runs from the checked tree (`RENDER_OPTIONS`, comments dropped) and puts that SQL
   through this module a second time, so what runs is exactly what was checked.
2. Exactly one statement. Its root is a SELECT or a set operation (UNION, INTERSECT, EXCEPT);
   every other node of the tree is either a syntax node in `ALLOWED_SYNTAX` or a function call
   the `FunctionPolicy` allows. Anything else, including every node type a later sqlglot adds,
   is refused: the tree is checked against allowlists, never against a denylist alone.
3. Where sqlglot and PostgreSQL could read different statements from the same text, the text
   is refused: whitespace PostgreSQL does not know as whitespace (U+00A0 and the other Unicode
   spaces), and plain string literals whose extent would change with
   `standard_conforming_strings = off`.
4. Every refusal is a `ToolFailure`: `MCP_QUERY_VIOLATION` for what the policy forbids,
   `MCP_VALIDATION_ERROR` for text it cannot parse (including the parser's recursion limit).
5. This module never touches the database. It imports sqlglot, so `tools/sql.py` imports it
   on the first call only.
"""

import logging
import re
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ErrorLevel, SqlglotError
from sqlglot.generators.postgres import PostgresGenerator
from sqlglot.parsers.postgres import PostgresParser
from sqlglot.tokenizer_core import Token, TokenType

from mcp_server_suite.schemas.echo import quote
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.tools.sql_functions import (
    BUILTIN_FUNCTIONS,
    FUNCTION_CLASSES,
    SYNTAX_FUNCTIONS,
    denial_reason,
)

__all__ = [
    "ALLOWED_ROOTS",
    "ALLOWED_SYNTAX",
    "MAX_ROWS",
    "RENDER_OPTIONS",
    "FunctionPolicy",
    "PolicyDialect",
    "effective_limit",
    "ensure_read_only",
    "limit_clause",
    "parse_untrusted_sql",
    "stated_row_count",
]

# The contract's row cap: `max_rows` is 1 to 50 and results carry at most 50 rows.
MAX_ROWS: Final = 50

# Echoed names and keywords are cut here: enough for any real identifier (PostgreSQL's own
# limit is 63 bytes), short enough to keep a problem's detail to one line.
_SHOWN_NAME_CHARS: Final = 64

# sqlglot warns on stderr about every statement it can only model as an opaque command. Those
# are refusals of caller input, not faults of this server, so only its errors are logged.
logging.getLogger("sqlglot").setLevel(logging.ERROR)

# The roots a query may have. Checked by exact type: a subclass is a different construct.
ALLOWED_ROOTS: Final = frozenset({exp.Select, exp.Union, exp.Intersect, exp.Except})

# Every node that is not a function call must be one of these: the syntax of a SELECT, its
# clauses, operators, literals and type names. The list was built from the corpus, the
# Hypothesis grammar in test_sql_fuzz.py and a review of sqlglot's expression classes; a
# class left out is refused, so an unknown construct fails closed. `Operator`
# (OPERATOR(schema.op)), bind parameters, `Into`, `Lock`, hints and every statement class are
# absent on purpose.
ALLOWED_SYNTAX: Final = frozenset(
    {
        "Add",
        "Adjacent",
        "Alias",
        "All",
        "Any",
        "AtTimeZone",
        "Between",
        "BitString",
        "BitwiseAnd",
        "BitwiseLeftShift",
        "BitwiseNot",
        "BitwiseOr",
        "BitwiseRightShift",
        "BitwiseXor",
        "Boolean",
        "Bracket",
        "ByteString",
        "CTE",
        "Column",
        "ColumnDef",
        "Cube",
        "DPipe",
        "DataType",
        "DataTypeParam",
        "Distance",
        "Distinct",
        "Div",
        "Dot",
        "EQ",
        "Escape",
        "Except",
        "ExtendsLeft",
        "ExtendsRight",
        "Fetch",
        "Filter",
        "From",
        "GT",
        "GTE",
        "Group",
        "GroupingSets",
        "Having",
        "HexString",
        "ILike",
        "Identifier",
        "In",
        "IntDiv",
        "Intersect",
        "Interval",
        "IntervalSpan",
        "Is",
        "JSONPath",
        "JSONPathKey",
        "JSONPathRoot",
        "JSONPathSlice",
        "JSONPathSubscript",
        "JSONPathWildcard",
        "Join",
        "Kwarg",
        "LT",
        "LTE",
        "Lateral",
        "Like",
        "Limit",
        "LimitOptions",
        "Literal",
        "Mod",
        "Mul",
        "NEQ",
        "National",
        "Neg",
        "Not",
        "Null",
        "NullSafeEQ",
        "NullSafeNEQ",
        "ObjectIdentifier",
        "Offset",
        "Order",
        "Ordered",
        "Overlaps",
        "Paren",
        "PseudoType",
        "RawString",
        "Rollup",
        "Select",
        "SimilarTo",
        "Slice",
        "Star",
        "Sub",
        "Subquery",
        "Table",
        "TableAlias",
        "TableSample",
        "Tuple",
        "UnicodeString",
        "Union",
        "Values",
        "Var",
        "Variadic",
        "Where",
        "Window",
        "WindowSpec",
        "With",
        "WithinGroup",
    }
)

# What the caller is told about the constructs refused most often, by sqlglot class name.
_REFUSED_CONSTRUCTS: Final = {
    "Insert": "INSERT",
    "Update": "UPDATE",
    "Delete": "DELETE",
    "Merge": "MERGE",
    "Create": "CREATE",
    "Drop": "DROP",
    "Alter": "ALTER",
    "TruncateTable": "TRUNCATE",
    "Copy": "COPY",
    "Grant": "GRANT",
    "Revoke": "REVOKE",
    "Set": "SET",
    "SetItem": "SET",
    "Transaction": "Transaction control",
    "Commit": "Transaction control",
    "Rollback": "Transaction control",
    "Analyze": "ANALYZE",
    "Use": "USE",
    "Describe": "DESCRIBE",
    "Pragma": "PRAGMA",
    "Into": "SELECT INTO (it creates a table)",
    "Lock": "A row lock (FOR UPDATE, FOR SHARE)",
    "Parameter": "A bind parameter (write the values inline)",
    "Placeholder": "A bind parameter (write the values inline)",
    "SessionParameter": "A session variable",
    "Operator": "An explicit OPERATOR() call",
}

# PostgreSQL's lexer knows only these as whitespace (scan.l: space [ \t\n\r\f]); sqlglot's
# tokenizer takes anything `str.isspace()` accepts. Any other space between tokens is a place
# where the two could split the text differently, so it is refused. The class reads
# "whitespace, but not one of PostgreSQL's five": `re`'s \s matches exactly what
# `str.isspace()` accepts (test_sql_policy.py checks every code point), and the class costs
# nothing to build, where listing the characters would scan every code point at import.
_PG_WHITESPACE: Final = frozenset(" \t\n\r\f")
_FOREIGN_SPACE: Final = re.compile(r"[^\S \t\n\r\f]")

# Token types whose text PostgreSQL lexes as a plain '...' literal, the one kind of token
# whose extent depends on standard_conforming_strings.
_PLAIN_STRING_TOKENS: Final = frozenset({TokenType.STRING, TokenType.NATIONAL_STRING})

# Built-ins that sqlglot would otherwise parse into classes that render differently:
# like(a, b) renders as `b LIKE a` (its arguments swapped) and to_hex(x) as HEX(x), which
# PostgreSQL does not have. Left out of the parser's table, they stay plain calls and render
# exactly as written.
_VERBATIM_FUNCTIONS: Final = frozenset({"LIKE", "TO_HEX"})

# Keywords that sqlglot parses as calls of a function of the same name but that PostgreSQL
# reads as syntax when unquoted and unqualified: ROW(1, 2) constructs a row, and
# `x = ALL(array)` compares with every element. Quoted ("row"(1)) or qualified (s.row(1)), the
# name is an ordinary function and is checked as one.
_KEYWORD_CALLS: Final = frozenset({"row", "all", "any", "some"})

_UNQUOTED_NAME: Final = re.compile(r"[a-z_][a-z0-9_$]*(?:\.[a-z_][a-z0-9_$]*)?")


# SQL keywords that read like calls and that sqlglot's function table builds syntax nodes for.
_KEYWORD_FUNCTIONS: Final = frozenset(
    {
        "ARRAY",
        "CAST",
        "COALESCE",
        "COLLATE",
        "CURRENT_CATALOG",
        "CURRENT_DATE",
        "CURRENT_ROLE",
        "CURRENT_SCHEMA",
        "CURRENT_TIME",
        "CURRENT_TIMESTAMP",
        "CURRENT_USER",
        "EXISTS",
        "EXTRACT",
        "GREATEST",
        "GROUPING",
        "LEAST",
        "LOCALTIME",
        "LOCALTIMESTAMP",
        "NULLIF",
        "SESSION_USER",
    }
)


class _PolicyParser(PostgresParser):
    # sqlglot's table maps hundreds of names (its own and other dialects', such as SHA2,
    # LOWER_HEX, STRUCT or MEDIAN) onto its classes. Kept are the PostgreSQL built-ins of the
    # allowlist and the keywords above; any other name stays a plain call, which the allowlist
    # then judges by its name.
    FUNCTIONS: ClassVar[dict[str, Any]] = {
        name: builder
        for name, builder in PostgresParser.FUNCTIONS.items()
        if (name.lower() in BUILTIN_FUNCTIONS or name in _KEYWORD_FUNCTIONS)
        and name not in _VERBATIM_FUNCTIONS
    }


def _current_time_sql(generator: PostgresGenerator, node: exp.CurrentTime) -> str:
    # PostgreSQL's CURRENT_TIME takes no parentheses unless it is given a precision; sqlglot
    # renders a bare CURRENT_TIME as CURRENT_TIME(), a syntax error.
    precision = generator.sql(node, "this")
    return f"CURRENT_TIME({precision})" if precision else "CURRENT_TIME"


class _PolicyGenerator(PostgresGenerator):
    TRANSFORMS: ClassVar[dict[type[exp.Expr], Any]] = {
        **PostgresGenerator.TRANSFORMS,
        exp.CurrentTime: _current_time_sql,
        # CURRENT_ROLE takes no parentheses at all; sqlglot renders CURRENT_ROLE().
        exp.CurrentRole: lambda generator, node: "CURRENT_ROLE",
    }

    # A value holding a backslash is written as an E'...' literal, which PostgreSQL reads the
    # same way whatever standard_conforming_strings says; the SQL that runs never holds a
    # plain literal with a backslash in it.
    def literal_sql(self, expression: exp.Literal) -> str:
        if expression.is_string and "\\" in expression.name:
            return self.bytestring_sql(exp.ByteString(this=expression.name))
        return super().literal_sql(expression)

    def rawstring_sql(self, expression: exp.RawString) -> str:
        if "\\" in expression.name:
            return self.bytestring_sql(exp.ByteString(this=expression.name))
        return super().rawstring_sql(expression)

    def national_sql(self, expression: exp.National, prefix: str = "N") -> str:
        # N'...' keeps its own (already checked) form; an E prefix cannot follow the N.
        return prefix + super().literal_sql(exp.Literal.string(expression.name))


class PolicyDialect(Postgres):
    """sqlglot's PostgreSQL dialect, with the rendering fixes the policy relies on."""

    Parser = _PolicyParser
    Generator = _PolicyGenerator


_DIALECT: Final = PolicyDialect()

# How the SQL that runs is regenerated from a checked tree: with this dialect, in place (the
# tree is not needed afterwards), without comments, function names as written, and failing
# rather than approximating whatever PostgreSQL cannot express.
RENDER_OPTIONS: Final[dict[str, Any]] = {
    "dialect": _DIALECT,
    "copy": False,
    "comments": False,
    "normalize_functions": False,
    "unsupported_level": ErrorLevel.RAISE,
}


@dataclass(frozen=True, slots=True)
class FunctionPolicy:
    """Which function names a query may call.

    Attributes:
        builtins: Side-effect-free pg_catalog functions, callable unqualified or as
            `pg_catalog.name`.
        extra: Names the operator allows on top (`MCP_SQL_ALLOWED_FUNCTIONS`), lower-case; an
            unqualified entry allows unqualified calls, `schema.name` allows that spelling.
    """

    builtins: frozenset[str] = BUILTIN_FUNCTIONS
    extra: frozenset[str] = frozenset()

    def ensure_allowed(self, schema: str | None, name: str) -> None:
        """Refuse a call of `name`, qualified by `schema` when it is not None.

        Args:
            schema: The schema the call names, or None for an unqualified call.
            name: The function's name as PostgreSQL compares it (unquoted names folded).

        Raises:
            ToolFailure: The call is denied or not on any allowlist (`MCP_QUERY_VIOLATION`).
        """
        shown = _shown(name if schema is None else f"{schema}.{name}")
        reason = denial_reason(name)
        if reason is not None:
            raise _violation(f"Function {shown}() is not allowed: {reason}.")
        if schema is None:
            if name in self.builtins or name in self.extra:
                return
        elif (schema == "pg_catalog" and name in self.builtins) or f"{schema}.{name}" in self.extra:
            return
        raise _violation(
            f"Function {shown}() is not allowed: only built-in functions known to be free of "
            "side effects may be called, unqualified or qualified with pg_catalog."
        )


def _violation(detail: str) -> ToolFailure:
    return ToolFailure(detail, code=MCPErrorCode.QUERY_VIOLATION, invalid_params=("query",))


def _invalid(detail: str) -> ToolFailure:
    return ToolFailure(detail, code=MCPErrorCode.VALIDATION_ERROR, invalid_params=("query",))


def _shown(name: str) -> str:
    # Ordinary names are shown as they are; anything else (quoted names with spaces, escapes,
    # odd characters) is shown escaped and bounded.
    if len(name) <= _SHOWN_NAME_CHARS and _UNQUOTED_NAME.fullmatch(name):
        return name
    return quote(name, _SHOWN_NAME_CHARS)


def _tokenize(text: str) -> list[Token]:
    try:
        return _DIALECT.tokenize(text)
    except RecursionError:
        raise _invalid("The query nests too deeply to be checked.") from None
    except SqlglotError:
        raise _invalid("The query could not be tokenized as PostgreSQL SQL.") from None


def _ensure_same_lexing(text: str, tokens: list[Token]) -> None:
    match = _FOREIGN_SPACE.search(text)
    if match is not None:
        inside = [(token.start, token.end) for token in tokens]
        for found in _FOREIGN_SPACE.finditer(text):
            position = found.start()
            if not any(start <= position <= end for start, end in inside):
                raise _violation(
                    f"The query holds U+{ord(found.group()):04X} between tokens: PostgreSQL "
                    "does not read it as whitespace. Use ASCII spaces, tabs or newlines."
                )
    for token in tokens:
        if token.token_type in _PLAIN_STRING_TOKENS:
            raw = text[token.start : token.end + 1]
            if "\\" in raw and not _ends_alike_without_standard_strings(raw):
                raise _violation(
                    f"The string literal {quote(token.text, _SHOWN_NAME_CHARS)} ends in a "
                    "different place when standard_conforming_strings is off. Write "
                    "backslashes in an E'...' literal, doubled (E'\\\\')."
                )


def _ends_alike_without_standard_strings(raw: str) -> bool:
    # `raw` is a whole literal, quotes included, as the standard lexer delimits it. Re-read it
    # with backslash escapes (the lexer of standard_conforming_strings = off): the literal is
    # unambiguous when that reading also ends exactly at the last character.
    opening = raw.index("'")
    position = opening + 1
    while position < len(raw):
        char = raw[position]
        if char == "\\":
            position += 2
        elif char == "'":
            if raw[position + 1 : position + 2] == "'":
                position += 2
            else:
                return position == len(raw) - 1
        else:
            position += 1
    return False


def parse_untrusted_sql(text: str) -> exp.Query:
    """Parse caller text into the tree of its single statement.

    Args:
        text: The untrusted query.

    Returns:
        The root of the one statement the text holds.

    Raises:
        ToolFailure: The text does not hold exactly one statement (`MCP_QUERY_VIOLATION`),
            holds text that sqlglot and PostgreSQL could read differently
            (`MCP_QUERY_VIOLATION`), or cannot be parsed (`MCP_VALIDATION_ERROR`).
    """
    tokens = _tokenize(text)
    _ensure_same_lexing(text, tokens)
    try:
        parsed = _DIALECT.parser().parse(tokens, text)
    except RecursionError:
        raise _invalid("The query nests too deeply to be checked.") from None
    except SqlglotError as exc:
        raise _invalid(f"The query could not be parsed: {_first_line(exc)}") from None
    except Exception:  # noqa: BLE001  # sqlglot's builders can fail on hostile input in any way; fail closed.
        raise _invalid("The query could not be parsed.") from None
    # Empty statements (";;") and a trailing comment after the last semicolon carry nothing.
    statements = [s for s in parsed if s is not None and not isinstance(s, exp.Semicolon)]
    if not statements:
        raise _invalid("The query holds no SQL statement.")
    if len(statements) != 1:
        raise _violation(
            f"Exactly one statement is allowed, and the query holds {len(statements)}."
        )
    root = statements[0]
    if not isinstance(root, exp.Query) or type(root) not in ALLOWED_ROOTS:
        known = type(root).__name__ in _REFUSED_CONSTRUCTS or isinstance(root, exp.Command)
        what = f"{_describe(root)} is not allowed" if known else "This statement is not allowed"
        raise _violation(
            f"{what}: the query must be a SELECT, or a UNION, INTERSECT or EXCEPT of SELECTs."
        )
    return root


def _first_line(exc: SqlglotError) -> str:
    message = str(exc).splitlines()[0] if str(exc) else "syntax error"
    return quote(message, 200)


def _describe(node: exp.Expr) -> str:
    name = type(node).__name__
    if name in _REFUSED_CONSTRUCTS:
        return _REFUSED_CONSTRUCTS[name]
    if isinstance(node, exp.Command):
        keyword = str(node.this).upper()
        return keyword if keyword.isalpha() else quote(keyword, _SHOWN_NAME_CHARS)
    return f"The construct {name}"


def ensure_read_only(root: exp.Expr, functions: FunctionPolicy) -> None:
    """Check every node of a parsed query against the syntax and function allowlists.

    Args:
        root: The root returned by `parse_untrusted_sql`.
        functions: The functions the query may call.

    Raises:
        ToolFailure: A node is not allowed (`MCP_QUERY_VIOLATION`).
    """
    for node in root.walk():
        if isinstance(node, exp.Func):
            _ensure_function_allowed(node, functions)
        elif type(node).__name__ not in ALLOWED_SYNTAX:
            raise _violation(f"{_describe(node)} is not allowed in a read-only query.")
        elif isinstance(node, exp.DataType) and node.this == exp.DType.XML:
            # A cast to xml parses the caller's document, as xmlparse() would.
            raise _violation(
                "The xml type is not allowed: XML parsing of caller documents is refused."
            )


def _ensure_function_allowed(node: exp.Func, functions: FunctionPolicy) -> None:
    schema = _qualifier(node)
    name = _function_name(node)
    if name is None:
        if schema is None:
            return
        # Qualified, a keyword is an ordinary function name: public.row(1) is a user function.
        name = (
            _identifier_name(node.this) if isinstance(node, exp.Anonymous) else type(node).__name__
        )
    functions.ensure_allowed(schema, name)


def _function_name(node: exp.Func) -> str | None:
    # Returns the PostgreSQL name of the function a node calls, or None for SQL syntax.
    class_name = type(node).__name__
    if isinstance(node, exp.Anonymous):
        name = _identifier_name(node.this)
        if name in _KEYWORD_CALLS and not _is_quoted(node.this):
            return None
        return name
    if class_name in SYNTAX_FUNCTIONS:
        return None
    mapped = FUNCTION_CLASSES.get(class_name)
    if mapped is not None:
        return mapped
    # A class the policy does not know: name it as PostgreSQL would receive it, so the
    # denylist and the operator's extra functions still apply, and refuse it otherwise.
    return _rendered_name(node) or f"<{class_name}>"


def _is_quoted(this: object) -> bool:
    return isinstance(this, exp.Identifier) and bool(this.quoted)


def _identifier_name(this: object) -> str:
    # PostgreSQL folds unquoted names to lower case and compares quoted names exactly.
    if isinstance(this, exp.Identifier):
        return this.name if this.quoted else this.name.lower()
    return str(this).lower()


def _rendered_name(node: exp.Func) -> str | None:
    try:
        rendered = _DIALECT.generate(node, copy=True, normalize_functions=False)
    except Exception:  # noqa: BLE001  # sqlglot's generators fail on odd trees in any way; the call is then refused.
        return None
    match = re.match(r"([A-Za-z_][A-Za-z0-9_$]*)\s*\(", rendered)
    return match.group(1).lower() if match else None


def _qualifier(node: exp.Func) -> str | None:
    # A call is qualified as `schema.f(...)` (a Dot whose right side is the call) or, in FROM,
    # as a Table whose `this` is the call and whose `db` is the schema.
    parent = node.parent
    if isinstance(parent, exp.Dot) and parent.expression is node:
        qualifier = parent.this
        if not isinstance(qualifier, exp.Identifier):
            raise _violation("A function may be qualified with a schema only, not a database.")
        return _identifier_name(qualifier)
    if isinstance(parent, exp.Table) and parent.this is node:
        if parent.args.get("catalog") is not None:
            raise _violation("A function may be qualified with a schema only, not a database.")
        schema = parent.args.get("db")
        return None if schema is None else _identifier_name(schema)
    return None


def stated_row_count(clause: exp.Expr | None) -> int | None:
    """Return the row count a LIMIT or FETCH clause states as a plain integer literal.

    Args:
        clause: A query's `limit` argument.

    Returns:
        The count, or None when the clause is missing, ALL, NULL, an expression, a
        percentage or WITH TIES.
    """
    if isinstance(clause, exp.Limit):
        count = clause.expression
    elif isinstance(clause, exp.Fetch):
        options = clause.args.get("limit_options")
        if options is not None and (options.args.get("percent") or options.args.get("with_ties")):
            return None
        count = clause.args.get("count")
        if count is None:
            return 1
    else:
        return None
    if isinstance(count, exp.Literal) and not count.is_string and count.name.isdigit():
        return int(count.name)
    return None


def limit_clause(row_count: int) -> exp.Limit:
    """Return the LIMIT clause of `row_count` rows, built as a node rather than parsed.

    Args:
        row_count: The number of rows, at least 0.

    Returns:
        `LIMIT row_count`.
    """
    return exp.Limit(expression=exp.Literal.number(row_count))


def effective_limit(root: exp.Query, max_rows: int) -> int:
    """Return the row count the outer LIMIT of the executed query must carry.

    The server cap fetches one row more than the caller may receive, so that a result cut by
    the cap (not by the query) is known to be cut: `min(literal, max_rows + 1)` for a literal
    limit, `max_rows + 1` otherwise.

    Args:
        root: The checked root.
        max_rows: The most rows the caller receives.

    Returns:
        The row count.
    """
    cap = max_rows + 1
    literal = stated_row_count(root.args.get("limit"))
    return cap if literal is None else min(literal, cap)
