"""Entry point: configuration, then the registry, then the stdio session.

`python -m mcp_server_suite` and the `mcp-server-suite` console script both land in `main`.
A standard descriptor left closed is opened on /dev/null before anything else; logging
goes to stderr, which a session writes without ever waiting for its reader (`core.stderr`);
the protocol streams are claimed before the session starts, so nothing else in the process
can write to stdout. Start-up imports only what answering the
handshake needs: the guardrails and the audit trail load once `initialize` (or the first
2026-07-28 request other than `server/discover`) is answered, or at the first call, each
tool's implementation on its first call, and the event loop runs only from the first call
that needs it (`core.stdio` names the session's phases).
"""

import logging
import os
import sys
from collections.abc import Sequence
from typing import Final

from mcp_server_suite import __version__
from mcp_server_suite.audit.sinks import AuditSink, open_sink
from mcp_server_suite.cli import (
    check_operations,
    check_summary,
    describe_configuration,
    parse_arguments,
)
from mcp_server_suite.config import (
    ConfigError,
    Settings,
    unknown_variable_warning,
    unknown_variables,
)
from mcp_server_suite.core.framing import LineFramer
from mcp_server_suite.core.handshake import answer_handshake
from mcp_server_suite.core.registry import ToolRegistry
from mcp_server_suite.core.server import Dispatcher
from mcp_server_suite.core.stderr import (
    STDERR_FD,
    claim_stderr,
    install_text_streams,
    stderr_stream,
)
from mcp_server_suite.core.stdio import (
    Handover,
    StopSignals,
    claim_stdio,
    guard_standard_descriptors,
)
from mcp_server_suite.tools import build_registry

__all__ = ["main"]

# sysexits.h EX_CONFIG: the conventional status for "configuration error", which service
# managers and wrappers recognise.
EXIT_CONFIG: Final = 78

logger = logging.getLogger("mcp_server_suite")

_LOG_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _console_handler() -> logging.Handler:
    # The log of a command run by hand (--check-config): plain stderr.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(_LOG_FORMAT))
    return handler


def _check_config(
    settings: Settings,
    registry: ToolRegistry,
    audit_sink: AuditSink | None,
    *,
    offline: bool,
    warnings: list[str],
) -> int:
    # `--check-config`: the configuration, the operations it sets up and the checks that
    # reach out (the database), printed on stdout; returns the exit status.
    operations = _check_operations(settings, audit_sink)
    if operations is not None:
        print(describe_configuration(settings, registry))
        print(operations)
    registry.release_unloaded()
    if operations is None:
        return EXIT_CONFIG
    summary = check_summary(settings, offline=offline, warnings=warnings)
    print("\n".join(summary.lines))
    return EXIT_CHECK_FAILED if summary.failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server, or the command-line action asked for.

    Args:
        argv: Command-line arguments without the program name; `sys.argv[1:]` when None.

    Returns:
        The exit status: 0 after a session or a successful check, `EXIT_CONFIG` when the
        configuration is invalid.
    """
    # Before anything opens a file: a closed standard descriptor's number would be its.
    closed = guard_standard_descriptors()
    if STDERR_FD in closed:
        # The interpreter found no stderr; print() would write to stdout instead.
        sys.stderr = stderr_stream().text
    options = parse_arguments(argv)
    # Installed early: a stop signal while the configuration and the tools are set up is
    # counted and ends the session before it reads anything, with status 0.
    stop = None if options.check_config else StopSignals()
    stderr = None
    try:
        settings = Settings.from_environ()
        if stop is not None:
            # From here on nothing written to stderr waits for its reader (`core.stderr`).
            stderr = claim_stderr()
            install_text_streams(stderr)
        registry = build_registry(settings)
        audit_sink = open_sink(
            settings.audit_log,
            required=settings.audit_required,
            stderr_closed=STDERR_FD in closed,
        )
    except ConfigError as exc:
        if stop is not None:
            stop.restore()
        print(f"mcp-server-suite: invalid configuration: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(
        level=settings.log_level_number,
        handlers=[_console_handler() if stderr is None else stderr.log_handler(_LOG_FORMAT)],
    )
    warnings = [unknown_variable_warning(name) for name in unknown_variables(os.environ)]
    if stop is None:  # --check-config: the report says everything, on stdout.
        return _check_config(
            settings, registry, audit_sink, offline=options.offline, warnings=warnings
        )
    for warning in warnings:
        logger.warning("%s", warning)
    if settings.sql_dsn is not None:
        # One line on stderr for a DSN every call would fail on, found in the background.
        from mcp_server_suite.tools.sql.deployment import (  # noqa: PLC0415  # SQL only.
            announce_deployment_problems,
        )

        announce_deployment_problems(settings)
    in_fd, out_fd = claim_stdio()
    dispatcher = Dispatcher(registry, server_version=__version__)
    framer = LineFramer()
    logger.info("serving %s", ", ".join(registry) or "no tools")
    handover = answer_handshake(dispatcher, framer, stop, in_fd=in_fd, out_fd=out_fd)
    if handover is not None:
        _run_session(
            settings,
            registry,
            dispatcher,
            framer,
            stop,
            audit_sink=audit_sink,
            handover=handover,
            in_fd=in_fd,
            out_fd=out_fd,
        )
    else:
        if audit_sink is not None:
            audit_sink.close()
        if stop.last is not None:
            # The session's own handlers log this once they run; none ran here.
            logger.warning("received %s before the session started, ending it", stop.last.name)
        registry.release_unloaded()
        os.close(in_fd)
        os.close(out_fd)
    stop.ignore()
    logger.info("session ended")
    return 0


# `--check-config` found a problem with something the configuration names.
EXIT_CHECK_FAILED: Final = 1


def _run_session(
    settings: Settings,
    registry: ToolRegistry,
    dispatcher: Dispatcher,
    framer: LineFramer,
    stop: StopSignals,
    *,
    audit_sink: AuditSink | None,
    handover: Handover,
    in_fd: int,
    out_fd: int,
) -> None:
    # Imported here, after the handshake or the first stateless answer: the client already
    # has its answer while the limiter, the deadline and the audit records load. The event
    # loop starts only if a call needs it (`serve_inline` says when).
    import asyncio  # noqa: PLC0415

    from mcp_server_suite.audit.trail import AuditTrail  # noqa: PLC0415
    from mcp_server_suite.core.event_loop import new_event_loop  # noqa: PLC0415
    from mcp_server_suite.core.inline import InlineCalls, serve_inline  # noqa: PLC0415
    from mcp_server_suite.guardrails.limiter import ConcurrencyLimiter  # noqa: PLC0415
    from mcp_server_suite.guardrails.pipeline import Guardrails  # noqa: PLC0415
    from mcp_server_suite.workers import set_worker_limit  # noqa: PLC0415

    # One worker thread per concurrency slot at most, whatever deadlines abandon.
    set_worker_limit(settings.max_concurrent_tools)

    guardrails = Guardrails(
        limiter=ConcurrencyLimiter(settings.max_concurrent_tools),
        acquire_timeout=settings.tool_acquire_timeout_seconds,
        deadline=settings.tool_timeout_seconds,
        max_depth=settings.max_argument_depth,
        max_items=settings.max_argument_items,
    )
    audit = AuditTrail(
        audit_sink, arguments=settings.audit_arguments, required=settings.audit_required
    )

    calls = InlineCalls(dispatcher, guardrails, audit)
    try:
        rest = serve_inline(
            calls,
            dispatcher,
            framer,
            stop,
            in_fd=in_fd,
            out_fd=out_fd,
            first_call=handover.first_call,
        )
    except BaseException:
        audit.close()
        raise
    if rest is None:
        audit.close()
        # Loaded tools release what they hold (the sandbox root's descriptor) on a loop.
        asyncio.run(registry.aclose())
        os.close(in_fd)
        os.close(out_fd)
        return

    # The event loop's phase loads only now that the inline phase has handed over to it.
    from mcp_server_suite.core.session import serve  # noqa: PLC0415

    async def session() -> None:
        try:
            await serve(
                dispatcher,
                guardrails,
                in_fd=in_fd,
                out_fd=out_fd,
                framer=framer,
                stop=stop,
                audit=audit,
                handover=rest,
            )
        finally:
            audit.close()
            await registry.aclose()

    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.run(session())
    # The loop's close restored the default actions; nothing is left for a signal to stop.
    stop.ignore()


def _check_operations(settings: Settings, audit_sink: AuditSink | None) -> str | None:
    # The operator checks of --check-config beyond the tools (they may load psycopg, which the
    # server itself never does before the first SQL call); None after reporting a failure.
    try:
        return check_operations(settings, audit_sink, os.environ)
    except ConfigError as exc:
        print(f"mcp-server-suite: invalid configuration: {exc}", file=sys.stderr)
        return None
    finally:
        if audit_sink is not None:
            audit_sink.close()


if __name__ == "__main__":
    sys.exit(main())
