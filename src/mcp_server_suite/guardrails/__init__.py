"""Guardrails every `tools/call` passes, in order: sanitizer, concurrency slot, deadline.

The order is the design's: the sanitizer is cheap and needs no slot; the slot bounds how
much work runs at once; the deadline bounds how long a call may hold its slot.
"""

__all__: list[str] = []
