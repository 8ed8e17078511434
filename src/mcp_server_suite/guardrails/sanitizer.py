"""The structural sanitizer: tool arguments are checked before any schema sees them.

Rules:

1. Object keys are short ASCII identifiers and never dunder names: keys name arguments,
   and nothing else belongs there (no `__proto__`, no `../x`, no invisible characters).
2. No string, key or value, holds a control character (other than tab, line feed and
   carriage return, which queries legitimately contain), a format character (bidi
   overrides and isolates, zero-width characters, tag characters: the Trojan Source and
   hidden-prompt classes) or a lone surrogate. The test is Unicode's own categories `Cc`,
   `Cf` and `Cs`, as the running interpreter's `unicodedata` reports them.
3. Containers nest at most `max_depth` levels (the arguments object is level 1) and hold
   at most `max_items` members each.
4. The walk is iterative, so no input can exhaust the interpreter's stack.
"""

import re
import unicodedata
from typing import Final

from mcp_server_suite.schemas.errors import PolicyViolation

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_ITEMS",
    "MAX_KEY_CHARS",
    "ensure_clean_arguments",
]

# The design document's defaults: real tool arguments are flat, so eight levels and a
# thousand members per container are generous while bounding the work of every later check.
DEFAULT_MAX_DEPTH: Final = 8
DEFAULT_MAX_ITEMS: Final = 1000

# Argument names are identifiers; 64 characters is longer than any name a tool defines.
MAX_KEY_CHARS: Final = 64

_KEY: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REFUSED_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs"})
_ALLOWED_CONTROLS: Final = frozenset("\t\n\r")


def ensure_clean_arguments(
    arguments: object,
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_items: int = DEFAULT_MAX_ITEMS,
) -> None:
    """Refuse arguments whose structure or text could poison a later check.

    Args:
        arguments: The decoded `arguments` object of a `tools/call`.
        max_depth: The deepest nesting allowed; the arguments object is level 1.
        max_items: The most members any one object or array may hold.

    Raises:
        PolicyViolation: The arguments break a rule; `invalid_params` names the top-level
            argument at fault.
    """
    stack: list[tuple[object, int, str | None]] = [(arguments, 1, None)]
    while stack:
        value, depth, top = stack.pop()
        if isinstance(value, str):
            _check_text(value, top)
        elif isinstance(value, dict | list):
            if depth > max_depth:
                _refuse(top, f"arguments are nested deeper than {max_depth} levels")
            if len(value) > max_items:
                _refuse(top, f"a container holds more than {max_items} items")
            if isinstance(value, dict):
                for key, child in value.items():
                    _check_key(key, top)
                    stack.append((child, depth + 1, top if top is not None else key))
            else:
                stack.extend((child, depth + 1, top) for child in value)


def _check_key(key: str, top: str | None) -> None:
    if len(key) > MAX_KEY_CHARS or not _KEY.fullmatch(key) or key.startswith("__"):
        # The key itself is not echoed: it is exactly the text that was found unsafe.
        _refuse(top, "an argument name is not a plain identifier")


def _check_text(text: str, top: str | None) -> None:
    # isprintable() is a C-speed test that is true for almost every argument; only text
    # holding a non-printable code point needs the per-character look-up.
    if text.isprintable():
        return
    for char in text:
        if char in _ALLOWED_CONTROLS or char.isprintable():
            continue
        if unicodedata.category(char) in _REFUSED_CATEGORIES:
            _refuse(
                top,
                f"text holds the control or format character U+{ord(char):04X}, "
                "which is not allowed",
            )


def _refuse(top: str | None, reason: str) -> None:
    raise PolicyViolation(
        f"Arguments refused by the sanitizer: {reason}.",
        invalid_params=(top,) if top is not None else (),
    )
