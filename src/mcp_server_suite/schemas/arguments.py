"""The contract every tool's arguments share: `ToolArguments`, the base of each params model.

What a tool lists in `tools/list` is its contract: clients validate against it, and model
providers convert it for function calling. These rules hold for every argument of every tool,
here and nowhere else, so that no tool can list one thing and accept another:

1. An argument listed as `"type": "integer"` takes what JSON Schema 2020-12 calls an integer
   (section 6.1.1 of its validation vocabulary): any number whose fractional part is zero, so
   `5.0` is the integer 5 and `-0.0` is 0. Numbers are read as I-JSON (RFC 7493) reads them, as
   IEEE doubles, so the test is on the double a literal denotes: `1e300` is an integer, which
   its bound then refuses like any other. A boolean is never an integer and a string never a
   number: the models stay strict (`StrictModel`). JSON-RPC ids are not arguments; the
   envelope's own rules judge them (`core/jsonrpc.py`).
2. An argument a tool can do without is nullable, and `null` means "use the default", exactly
   as leaving the argument out does, so the tool always sees a value of its declared type.
3. The listed schema is strict-ready as it stands (OpenAI's strict function calling, and the
   converters that prepare a schema for it): every property is in `required`,
   `additionalProperties` is false, a nullable argument is `"type": [T, "null"]` and never an
   `anyOf` (google-genai's converter drops the description, title and default of an `anyOf`
   property), and no property carries `default` (Azure OpenAI refuses the keyword in strict
   mode; the description states the default instead).
4. Each argument's description states its bounds and its default in words, because converters
   drop the keywords (langchain-google-genai drops them all): every bound with thousands
   separators ("1 to 10,000 characters"), and for a nullable argument what null means
   ("null means 50", "null means 'utf-8'"). The catalog's tests hold every argument to this.
5. Arguments are scalars (strings, integers, numbers, booleans, null): rules 1 and 2 apply to
   the top-level arguments, and a model with any other kind of field cannot be listed.
"""

from typing import Any, ClassVar, Final

from pydantic import model_validator
from pydantic.annotated_handlers import GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from mcp_server_suite.schemas.base import StrictModel

__all__ = ["ToolArguments"]

# The JSON types an argument may have (rule 5).
_SCALAR_TYPES: Final = frozenset({"string", "integer", "number", "boolean", "null"})


class ToolArguments(StrictModel):
    """The base of every tool's params model: the wire rules above, for each field it declares.

    Subclasses declare their fields as usual, an optional one with the default that `null`
    stands for (`max_rows: int = Field(default=50, ...)`); the tool then always receives a value
    of the declared type.
    """

    # The fields that have a default, which null stands for (rule 2); set for each subclass.
    _defaulted: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._defaulted = frozenset(
            name for name, field in cls.model_fields.items() if not field.is_required()
        )

    @model_validator(mode="before")
    @classmethod
    def _wire_values(cls, data: Any) -> Any:
        # On the path of every call: one look at each value, and a copy only when a value is
        # null or a float (rules 1 and 2). Anything but an object is left for the model to
        # refuse.
        if type(data) is not dict:
            return data
        for value in data.values():
            if value is None or type(value) is float:
                return cls._read_wire_values(data)
        return data

    @classmethod
    def _read_wire_values(cls, data: dict[str, Any]) -> dict[str, Any]:
        read: dict[str, Any] = {}
        for name, value in data.items():
            if value is None and name in cls._defaulted:
                continue  # Rule 2: the field's default applies, as when it is left out.
            # Rule 1. is_integer() is false for NaN and the infinities, so int() cannot fail;
            # the model refuses those (and 5.5) as it refuses any float for an int.
            integral = type(value) is float and value.is_integer()
            read[name] = int(value) if integral else value
        return read

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """Render the listed schema by rules 2, 3 and 5 from the one Pydantic generates.

        Raises:
            TypeError: A field is not a scalar, or its schema has a shape these rules do not
                know how to list.
        """
        json_schema = handler.resolve_ref_schema(handler(core_schema))
        properties: dict[str, Any] = json_schema.get("properties", {})
        for name, prop in properties.items():
            _list_property(cls.__name__, name, prop, nullable=name in cls._defaulted)
        json_schema["properties"] = properties
        # Sorted, as the catalog sorts the properties: the converters that fill in `required`
        # list the properties in their order, and the listed schema is then what they make.
        json_schema["required"] = sorted(properties)
        json_schema["additionalProperties"] = False
        return json_schema


def _list_property(model: str, name: str, prop: dict[str, Any], *, nullable: bool) -> None:
    """Rewrite one property's schema in place: nullable as a type array, no default."""
    prop.pop("default", None)
    variants = prop.pop("anyOf", None)
    if variants is not None:
        # Pydantic spells `T | None` as anyOf [T, null]: lift T into the property itself.
        kept = [variant for variant in variants if variant != {"type": "null"}]
        if len(kept) != 1 or len(variants) != 2:
            raise TypeError(f"{model}.{name}: only T | None unions can be listed")
        prop.update(kept[0])
        nullable = True
    types = prop.get("type")
    if not isinstance(types, str) or types not in _SCALAR_TYPES:
        raise TypeError(f"{model}.{name}: tool arguments must be scalars, not {types!r}")
    if nullable:
        prop["type"] = [types, "null"]
        if "enum" in prop:
            prop["enum"] = [*prop["enum"], None]
