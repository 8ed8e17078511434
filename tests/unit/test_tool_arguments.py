"""The contract every tool's arguments share (`schemas/arguments.py`), held for every tool.

Each rule is checked over every argument of every tool the server lists, as `tools/list`
lists it, so a tool or an argument added later is held to the same rules:

- the listed schema is a valid JSON Schema 2020-12 document, strict-ready as it stands;
- the server accepts an argument exactly when the listed schema does, judged by a JSON Schema
  validator over generated numbers, booleans, strings and null (integers with and without a
  zero fraction, `-0.0`, values far beyond a double's exact range), on both validation paths
  (JSON text, and the decoded arguments the inline and checked paths take);
- null, and only null, stands for the default, and the tool receives a value of its type;
- every bound and default is stated in the argument's description.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

# jsonschema ships no type information, and its stubs are not a dependency of the project.
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from pydantic import Field

from mcp_server_suite.config import SecretStr, Settings
from mcp_server_suite.core.registry import ToolSpec, accept_arguments
from mcp_server_suite.schemas.arguments import ToolArguments
from mcp_server_suite.schemas.errors import PolicyViolation
from mcp_server_suite.schemas.fs import MAX_OFFSET
from mcp_server_suite.tools import build_registry
from mcp_server_suite.tools.catalog import load_catalog

# The largest integer a client can send: the JSON guard refuses longer integer literals.
MAX_SAFE_INTEGER = 2**53 - 1

# A valid value for each argument that has no default (every other one is sent as null).
REQUIRED_VALUES = {"query": "SELECT 1", "relative_path": "notes/hello.txt"}

# The keywords that bound a value; each must also be stated in words (rule 4).
BOUND_KEYWORDS = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "multipleOf",
)


@pytest.fixture(scope="module")
def specs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ToolSpec[Any, Any]]]:
    """Every tool the server can list, loaded: the SQL tools open no connection until a query."""
    settings = Settings(
        sql_dsn=SecretStr("postgresql://catalog@localhost/catalog"),
        safe_data_dir=tmp_path_factory.mktemp("sandbox"),
    )
    registry = build_registry(settings)
    try:
        yield {name: tool.spec() for name, tool in registry.items()}
    finally:
        asyncio.run(registry.aclose())


def listed() -> dict[str, Mapping[str, Any]]:
    """Each tool's input schema as `tools/list` lists it."""
    return {name: tool.input_schema for name, tool in load_catalog().items()}


def test_the_specs_are_the_listed_tools(specs: dict[str, ToolSpec[Any, Any]]) -> None:
    assert set(specs) == set(listed())
    for name, spec in specs.items():
        assert issubclass(spec.params_model, ToolArguments), name


def _walk(schema: Any) -> Iterator[Mapping[str, Any]]:
    if isinstance(schema, dict):
        yield schema
        for value in schema.values():
            yield from _walk(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _walk(value)


@pytest.mark.parametrize("name", sorted(listed()))
def test_the_listed_schema_is_strict_ready(name: str, specs: dict[str, ToolSpec[Any, Any]]) -> None:
    schema = listed()[name]
    Draft202012Validator.check_schema(schema)
    properties = schema["properties"]
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == sorted(properties)
    for node in _walk(schema):
        assert not {"anyOf", "oneOf", "allOf", "default", "$ref"} & set(node), node
    fields = specs[name].params_model.model_fields
    assert set(properties) == set(fields)
    for argument, prop in properties.items():
        nullable = not fields[argument].is_required()
        scalar = prop["type"][0] if nullable else prop["type"]
        assert scalar in {"string", "integer", "number", "boolean"}, (argument, prop)
        assert prop["type"] == ([scalar, "null"] if nullable else scalar), (argument, prop)


def _stated(number: float, text: str) -> bool:
    # With thousands separators, as one number: "1" is not found in "10" or "1,000".
    return re.search(rf"(?<![\d,.]){re.escape(f'{number:,}')}(?![\d,])", text) is not None


def _spoken(default: object) -> str:
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, int):
        return f"{default:,}"
    return f"'{default}'"


@pytest.mark.parametrize("name", sorted(listed()))
def test_every_bound_and_default_is_stated_in_words(
    name: str, specs: dict[str, ToolSpec[Any, Any]]
) -> None:
    fields = specs[name].params_model.model_fields
    for argument, prop in listed()[name]["properties"].items():
        description = prop["description"]
        for keyword in BOUND_KEYWORDS:
            if keyword in prop:
                assert _stated(prop[keyword], description), (argument, keyword, description)
        field = fields[argument]
        if field.is_required():
            assert "null" not in description, (argument, description)
        elif field.default is None:
            assert "null" in description, (argument, description)
        else:
            assert f"null means {_spoken(field.default)}" in description, (argument, description)


def test_the_stated_bound_is_the_number_itself() -> None:
    # The check above must not be satisfied by a number that merely contains the bound.
    assert _stated(1, "1 to 50")
    assert _stated(1_048_576, "up to 1,048,576 bytes")
    assert not _stated(1, "10 or 1,000 or 0.1")
    assert not _stated(1_000, "1000")


# --- accepted exactly when the listed schema accepts ---------------------------------------

# The numbers a client can send: integers in the safe range, doubles of every size (integral
# or not, signed zeros, far beyond 2**53), and the issue's own samples.
numbers = st.one_of(
    st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER),
    st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER).map(float),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([5.0, 16.0, 10.0, 0.0, -0.0, 5.5, 1e300, -1e300, 2.0**53, float(MAX_OFFSET)]),
)
values = st.one_of(numbers, st.booleans(), st.none(), st.text(max_size=4))
arguments_of_every_tool = st.sampled_from(
    [
        (name, argument)
        for name, schema in sorted(listed().items())
        for argument in schema["properties"]
    ]
)


def _defaults(name: str) -> dict[str, Any]:
    """Every listed argument, null where it may be, a valid value where it must be given."""
    return {
        argument: None if isinstance(prop["type"], list) else REQUIRED_VALUES[argument]
        for argument, prop in listed()[name]["properties"].items()
    }


def _arguments(name: str, argument: str, value: object) -> dict[str, Any]:
    """Every listed argument: the one under test, the others as `_defaults` gives them."""
    return {**_defaults(name), argument: value}


def _near_bounds(prop: Mapping[str, Any]) -> st.SearchStrategy[object]:
    if "minimum" not in prop:
        return st.nothing()
    low, high = prop["minimum"] - 2, prop["maximum"] + 2
    near = st.integers(min_value=low, max_value=high)
    return st.one_of(near, near.map(float), near.map(lambda number: number + 0.5))


@given(case=arguments_of_every_tool, data=st.data())
@example(case=("read_only_sql", "max_rows"), data=None)
def test_an_argument_is_accepted_exactly_when_the_listed_schema_accepts_it(
    specs: dict[str, ToolSpec[Any, Any]], case: tuple[str, str], data: st.DataObject | None
) -> None:
    name, argument = case
    prop = listed()[name]["properties"][argument]
    value: object = 5.0
    if data is not None:
        value = data.draw(st.one_of(values, _near_bounds(prop)), label="value")
    if isinstance(value, str) and "string" in prop["type"]:
        return  # Text is also checked for meaning (a codec's name, a path), not only shape.
    arguments = _arguments(name, argument, value)
    spec = specs[name]
    listed_accepts = Draft202012Validator(listed()[name]).is_valid(arguments)
    if not listed_accepts:
        with pytest.raises(PolicyViolation) as info:
            spec.parse_arguments(arguments)
        assert info.value.problem.invalid_params == (argument,)
        assert accept_arguments(spec.params_model, arguments) is None
        return
    validated = spec.parse_arguments(arguments)
    received = getattr(validated, argument)
    if value is None:
        assert received == spec.params_model.model_fields[argument].default
    else:
        assert received == value
        assert type(received) is {"integer": int, "boolean": bool}[prop["type"][0]]
    assert accept_arguments(spec.params_model, arguments) == validated


@pytest.mark.parametrize(
    ("name", "argument", "value", "received"),
    [
        ("read_only_sql", "max_rows", 5.0, 5),
        ("sandbox_fs_read", "max_bytes", 16.0, 16),
        ("sandbox_fs_read", "offset", 0.0, 0),
        ("sandbox_fs_read", "offset", -0.0, 0),
        ("sandbox_fs_read", "offset", float(MAX_OFFSET), MAX_OFFSET),
        ("sandbox_fs_list", "max_entries", 10.0, 10),
        ("sandbox_fs_list", "max_entries", 1e3, 1000),
    ],
)
def test_a_number_with_a_zero_fraction_is_an_integer(
    specs: dict[str, ToolSpec[Any, Any]], name: str, argument: str, value: float, received: int
) -> None:
    validated = specs[name].parse_arguments(_arguments(name, argument, value))
    assert getattr(validated, argument) == received
    assert type(getattr(validated, argument)) is int


@pytest.mark.parametrize(
    ("value", "fault"),
    [
        (5.5, "Input should be a valid integer"),
        (True, "Input should be a valid integer"),
        ("5", "Input should be a valid integer"),
        (1e300, "Input should be less than or equal to 50"),
        (-1e300, "Input should be greater than or equal to 1"),
        (0.0, "Input should be greater than or equal to 1"),
    ],
)
def test_other_numbers_are_refused_by_type_or_bound(
    specs: dict[str, ToolSpec[Any, Any]], value: object, fault: str
) -> None:
    with pytest.raises(PolicyViolation) as info:
        specs["read_only_sql"].parse_arguments({"query": "SELECT 1", "max_rows": value})
    assert info.value.problem.detail == f"Invalid arguments: max_rows: {fault}."


def test_null_stands_for_the_default_and_omission_still_does(
    specs: dict[str, ToolSpec[Any, Any]],
) -> None:
    for name, spec in specs.items():
        every_null = _defaults(name)
        required = {key: value for key, value in every_null.items() if value is not None}
        assert spec.parse_arguments(every_null) == spec.parse_arguments(required), name


def test_null_for_a_required_argument_is_refused(specs: dict[str, ToolSpec[Any, Any]]) -> None:
    with pytest.raises(PolicyViolation) as info:
        specs["read_only_sql"].parse_arguments({"query": None, "max_rows": None})
    assert info.value.problem.invalid_params == ("query",)


# --- the rules applied to any model ----------------------------------------------------------


class Sample(ToolArguments):
    """A model with every shape the rules list."""

    text: str = Field(min_length=1, description="Required text.")
    count: int = Field(default=3, ge=1, description="null means 3.")
    choice: Literal["a", "b"] = Field(default="a", description="null means 'a'.")
    label: str | None = Field(default=None, description="Text, or null.")
    flag: bool | None = Field(description="Required, and may be null.")


def test_the_listed_schema_of_any_model() -> None:
    schema = Sample.model_json_schema()
    assert schema["required"] == ["choice", "count", "flag", "label", "text"]
    assert schema["additionalProperties"] is False
    properties = schema["properties"]
    assert properties["text"]["type"] == "string"
    assert properties["count"] == {
        "description": "null means 3.",
        "minimum": 1,
        "title": "Count",
        "type": ["integer", "null"],
    }
    # A nullable enum must list null among its values, or null would be refused.
    assert properties["choice"]["enum"] == ["a", "b", None]
    assert properties["label"]["type"] == ["string", "null"]
    assert properties["flag"]["type"] == ["boolean", "null"]
    validator = Draft202012Validator(schema)
    assert validator.is_valid(
        {"text": "x", "count": None, "choice": None, "label": None, "flag": None}
    )
    assert Sample.model_validate({"text": "x", "choice": None, "flag": None}).choice == "a"
    # Null for a field without a default is the value itself, and is what the model holds.
    assert Sample.model_validate({"text": "x", "flag": None}).flag is None


def test_only_scalars_and_optional_scalars_can_be_listed() -> None:
    class Listed(ToolArguments):
        items: list[int] = Field(default_factory=list)

    class Either(ToolArguments):
        value: int | str = 0

    with pytest.raises(TypeError, match=r"Listed\.items: tool arguments must be scalars"):
        Listed.model_json_schema()
    with pytest.raises(TypeError, match=r"Either\.value: only T \| None unions can be listed"):
        Either.model_json_schema()


def test_anything_but_an_object_is_left_for_the_model_to_refuse() -> None:
    with pytest.raises(ValueError, match="valid dictionary or instance of Sample"):
        Sample.model_validate([("text", "x")])
