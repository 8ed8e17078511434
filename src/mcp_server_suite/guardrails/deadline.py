"""The execution deadline of a call.

`fail_after(seconds)` bounds the body by a relative deadline and raises `DeadlineExceeded`
when that deadline, and not some other timeout inside the body, expires. The name follows
the trio/anyio grid: `fail_*` raises, `*_after` is relative.
"""

import asyncio
from types import TracebackType
from typing import Final

from mcp_server_suite.schemas.errors import DeadlineExceeded

__all__ = ["DEFAULT_DEADLINE_S", "fail_after"]

# The design document's per-call deadline: long enough for a query at the default 10 s
# statement timeout plus connecting, short enough that a stuck call frees its slot.
DEFAULT_DEADLINE_S: Final = 30.0


def fail_after(seconds: float) -> "_Deadline":
    """Run the body of `async with` under a deadline `seconds` from now.

    Args:
        seconds: The time the body may take.

    Returns:
        The async context manager.

    Raises:
        DeadlineExceeded: On exit, when the deadline expired and the body was cancelled.
    """
    return _Deadline(seconds)


class _Deadline:
    # A class rather than @asynccontextmanager: it runs on every call, and the generator
    # machinery costs more than the timeout itself.
    __slots__ = ("_scope", "_seconds")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._scope = asyncio.timeout(seconds)

    async def __aenter__(self) -> None:
        await self._scope.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            await self._scope.__aexit__(exc_type, exc, traceback)
        except TimeoutError:
            # The scope raises TimeoutError only when its own deadline expired; a
            # TimeoutError of the body's own passes through it untouched.
            raise DeadlineExceeded(
                f"The call did not finish within its {self._seconds:g} s deadline and was "
                "cancelled.",
                metadata={"deadline_seconds": self._seconds},
            ) from None
