"""The execution deadline of a call.

`fail_after(seconds)` bounds the body by a relative deadline and raises `DeadlineExceeded`
when that deadline, and not some other timeout inside the body, expires. The name follows
the trio/anyio grid: `fail_*` raises, `*_after` is relative.
"""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

from mcp_server_suite.schemas.errors import DeadlineExceeded

__all__ = ["DEFAULT_DEADLINE_S", "fail_after"]

# The design document's per-call deadline: long enough for a query at the default 10 s
# statement timeout plus connecting, short enough that a stuck call frees its slot.
DEFAULT_DEADLINE_S: Final = 30.0


@asynccontextmanager
async def fail_after(seconds: float) -> AsyncIterator[None]:
    """Run the body under a deadline `seconds` from now.

    Args:
        seconds: The time the body may take.

    Raises:
        DeadlineExceeded: The deadline expired; the body was cancelled.
    """
    scope = asyncio.timeout(seconds)
    try:
        async with scope:
            yield
    except TimeoutError:
        if not scope.expired():
            raise
        raise DeadlineExceeded(
            f"The call did not finish within its {seconds:g} s deadline and was cancelled.",
            metadata={"deadline_seconds": seconds},
        ) from None
