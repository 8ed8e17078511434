"""Quoting caller input inside messages the server writes.

Problems and errors may repeat what the caller sent, so the caller can see what was refused.
The repetition is bounded and escaped: `quote` cuts the text to a limit and renders it with
Python's `repr`, which escapes every non-printable code point (control characters, bidi
overrides, zero-width characters, lone surrogates), so an echo can never reorder or hide text
in a client's display.
"""

__all__ = ["quote"]


def quote(text: str, limit: int) -> str:
    """Return `text` as a bounded, escaped, quoted literal.

    Args:
        text: Untrusted text from the caller.
        limit: The most characters of `text` to show.

    Returns:
        The quoted literal, followed by a note when it was cut.
    """
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r} (cut at {limit} characters)"
