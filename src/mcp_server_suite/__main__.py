"""Entry point: configuration, then the registry, then the stdio session.

`python -m mcp_server_suite` and the `mcp-server-suite` console script both land in `main`.
Logging goes to stderr; the protocol streams are claimed before the session starts, so
nothing else in the process can write to stdout.
"""

import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from typing import Final

from mcp_server_suite import __version__
from mcp_server_suite.cli import describe_configuration, parse_arguments
from mcp_server_suite.config import ConfigError, Settings, unknown_variables
from mcp_server_suite.core.server import Dispatcher
from mcp_server_suite.core.stdio import claim_stdio, serve
from mcp_server_suite.guardrails.limiter import ConcurrencyLimiter
from mcp_server_suite.guardrails.pipeline import Guardrails
from mcp_server_suite.tools import build_registry

__all__ = ["main"]

# sysexits.h EX_CONFIG: the conventional status for "configuration error", which service
# managers and wrappers recognise.
EXIT_CONFIG: Final = 78

logger = logging.getLogger("mcp_server_suite")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server, or the command-line action asked for.

    Args:
        argv: Command-line arguments without the program name; `sys.argv[1:]` when None.

    Returns:
        The exit status: 0 after a session or a successful check, `EXIT_CONFIG` when the
        configuration is invalid.
    """
    options = parse_arguments(argv)
    try:
        settings = Settings.from_environ()
        registry = build_registry(settings)
    except ConfigError as exc:
        print(f"mcp-server-suite: invalid configuration: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(
        level=settings.log_level_number,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for name in unknown_variables(os.environ):
        logger.warning("ignoring unknown configuration variable %s", name)
    if options.check_config:
        print(describe_configuration(settings, registry))
        asyncio.run(registry.aclose())
        return 0
    in_fd, out_fd = claim_stdio()
    guardrails = Guardrails(
        limiter=ConcurrencyLimiter(settings.max_concurrent_tools),
        acquire_timeout=settings.tool_acquire_timeout_seconds,
        deadline=settings.tool_timeout_seconds,
        max_depth=settings.max_argument_depth,
        max_items=settings.max_argument_items,
    )
    dispatcher = Dispatcher(registry, server_version=__version__)
    logger.info("serving %s", ", ".join(registry) or "no tools")

    async def session() -> None:
        try:
            await serve(dispatcher, guardrails, in_fd=in_fd, out_fd=out_fd)
        finally:
            await registry.aclose()

    asyncio.run(session())
    logger.info("session ended")
    return 0


if __name__ == "__main__":
    sys.exit(main())
