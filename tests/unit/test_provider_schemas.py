"""The tool catalog, held to the model providers' own converters of tool schemas.

A model sees a tool through its provider's converter, never as listed. Each converter runs
here, at the release uv.lock pins, on every tool as `tools/list` lists it:

- openai-agents turns an MCP tool into a strict function tool (`MCPUtil.to_function_tool`
  with `convert_schemas_to_strict=True`, its `ensure_strict_json_schema`): the listed schema
  must already be strict, so the converter keeps it strict and changes nothing;
- google-genai's `types.Schema.from_json_schema` (what its MCP path would use, and what
  `FunctionDeclaration.parameters` holds) must keep every argument's description, title,
  nullability and bounds;
- the Anthropic SDK's MCP helper (`mcp_tool(..., strict=True)`) must send the listed schema as
  it is, and its strict `transform_schema`, which moves the keywords it does not support into
  the description, must keep the description that states them.

Two of these libraries have bugs that a listed schema cannot avoid without breaking another
provider; the tests below pin them, so a release that fixes one fails its test and the
documentation's note on it can go:

- google-genai's own MCP path (`GenerateContentConfig(tools=[session])`) crashes in
  `_mcp_utils._filter_to_supported_schema` on `additionalProperties: false`, which strict
  providers need (googleapis/python-genai#2393). What works today, also held here:
  `FunctionDeclaration(parameters_json_schema=tool.inputSchema)` and `session.call_tool`.
- the Anthropic SDK's `transform_schema` fails on a type array such as `["integer", "null"]`
  (anthropics/anthropic-sdk-python#1764), which google-genai needs instead of `anyOf`. Its MCP
  helper never calls it, and Anthropic's API takes type arrays in strict tool schemas.

The libraries are imported inside the tests, so the module can be collected where they are
not installed (the Nix build deselects the interop tests).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from mcp_server_suite.tools.catalog import load_catalog

pytestmark = pytest.mark.interop

TOOLS = sorted(load_catalog())

# The keywords of a property that google-genai's Schema keeps, under its own names.
GOOGLE_BOUNDS = {
    "minimum": "minimum",
    "maximum": "maximum",
    "minLength": "min_length",
    "maxLength": "max_length",
}


def listed(name: str) -> dict[str, Any]:
    """The tool's input schema as `tools/list` lists it (a copy: converters mutate)."""
    return copy.deepcopy(dict(load_catalog()[name].input_schema))


def mcp_tool(name: str) -> Any:
    """The tool as an MCP client library holds it after `tools/list`."""
    import mcp_types

    described = load_catalog()[name]
    return mcp_types.Tool(
        name=name,
        title=described.title,
        description=described.description,
        input_schema=listed(name),
        output_schema=copy.deepcopy(dict(described.output_schema)),
    )


def nullable(prop: Mapping[str, Any]) -> bool:
    return isinstance(prop["type"], list)


@pytest.mark.parametrize("name", TOOLS)
def test_openai_agents_takes_every_tool_strict_and_unchanged(name: str) -> None:
    from agents.mcp import MCPServerStdio, MCPUtil

    # Never started: the conversion needs the server's settings, not a session.
    server = MCPServerStdio(params={"command": "mcp-server-suite"}, name="suite")
    function_tool = MCPUtil.to_function_tool(mcp_tool(name), server, convert_schemas_to_strict=True)
    assert function_tool.strict_json_schema is True
    assert function_tool.params_json_schema == listed(name)


@pytest.mark.parametrize("name", TOOLS)
def test_google_genai_schema_keeps_every_description_bound_and_null(name: str) -> None:
    from google.genai import types

    schema = listed(name)
    converted = types.Schema.from_json_schema(json_schema=types.JSONSchema(**schema))
    assert converted.required == schema["required"]
    assert converted.properties is not None
    assert set(converted.properties) == set(schema["properties"])
    for argument, prop in schema["properties"].items():
        kept = converted.properties[argument]
        assert kept.description == prop["description"], argument
        assert kept.title == prop["title"], argument
        assert bool(kept.nullable) is nullable(prop), argument
        scalar = prop["type"][0] if nullable(prop) else prop["type"]
        assert kept.type is not None
        assert kept.type.value == scalar.upper(), argument
        for keyword, field in GOOGLE_BOUNDS.items():
            assert getattr(kept, field) == prop.get(keyword), (argument, keyword)


@pytest.mark.parametrize("name", TOOLS)
def test_google_genai_workaround_sends_the_listed_schema(name: str) -> None:
    from google.genai import types

    tool = mcp_tool(name)
    declaration = types.FunctionDeclaration(
        name=tool.name, description=tool.description, parameters_json_schema=tool.input_schema
    )
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[declaration])])
    assert config.tools is not None
    (sent,) = config.model_dump(mode="json", exclude_none=True)["tools"]
    assert sent["function_declarations"][0]["parameters_json_schema"] == listed(name)


def test_google_genai_mcp_path_still_crashes_on_additional_properties() -> None:
    # Known upstream bug: `additionalProperties: false` reaches a `.items()` call. When a
    # release fixes it, this fails: drop the documentation's note and hold that path too.
    from google.genai import _mcp_utils

    with pytest.raises(AttributeError, match="'bool' object has no attribute 'items'"):
        _mcp_utils.mcp_to_gemini_tools([mcp_tool(name) for name in TOOLS])


@pytest.mark.parametrize("name", TOOLS)
def test_anthropic_mcp_helper_sends_the_listed_schema_strict(name: str) -> None:
    from anthropic.lib.tools.mcp import mcp_tool as anthropic_mcp_tool

    # Never called: the definition needs the client only to make calls.
    session: Any = object()
    definition = anthropic_mcp_tool(mcp_tool(name), session, strict=True).to_dict()
    assert definition["input_schema"] == listed(name)
    assert definition["strict"] is True


@pytest.mark.parametrize("name", TOOLS)
def test_anthropic_transform_keeps_each_argument_and_its_stated_bounds(name: str) -> None:
    from anthropic import transform_schema

    for argument, prop in listed(name)["properties"].items():
        # The value a model writes when it does not write null: the type array's first type.
        value_schema = {**prop, "type": prop["type"][0] if nullable(prop) else prop["type"]}
        transformed = transform_schema(value_schema)
        assert transformed["type"] == value_schema["type"], argument
        # The description survives whole; what the transform moved is appended after it.
        assert transformed["description"].startswith(prop["description"]), argument


def test_anthropic_transform_still_fails_on_type_arrays() -> None:
    # Known upstream bug (anthropics/anthropic-sdk-python#1764). When a release fixes it,
    # this fails: drop the documentation's note and transform the whole listed schema.
    from anthropic import transform_schema

    with pytest.raises(AssertionError, match=r"\['integer', 'null'\]"):
        transform_schema(listed("read_only_sql"))
