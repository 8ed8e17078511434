"""The base class of every strict contract model.

Every model that crosses a trust boundary (tool arguments, tool results, problem documents)
derives from `StrictModel`, so the three rules below hold everywhere without being repeated:

1. Unknown members are refused (`extra="forbid"`): a misspelt argument is an error, never a
   silently ignored option.
2. Types are strict: a JSON string is never coerced to a number, nor a number to a boolean.
3. Instances are frozen: a validated value cannot be changed after the check.
"""

from pydantic import BaseModel, ConfigDict

__all__ = ["StrictModel"]


class StrictModel(BaseModel):
    """A frozen, strict Pydantic model that refuses unknown members."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        # Non-finite floats are not JSON; refusing them keeps every document strict JSON.
        allow_inf_nan=False,
        validate_default=True,
    )
