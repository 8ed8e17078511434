"""Strict Pydantic contracts and the RFC 9457 error taxonomy."""

__all__: list[str] = []
