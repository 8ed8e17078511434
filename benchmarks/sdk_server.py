"""The SDK comparison server for `bench_core.py`: the MCP SDK's `MCPServer` with `system_metrics`.

The tool does the same work as this project's `system_metrics`: a psutil CPU sample of
`MCP_METRICS_CPU_SAMPLE_SECONDS` (default 0.1 s) in a worker thread, memory and load
readings, and a structured result with the same fields (the SDK derives the output schema
from the return type and sends `structuredContent`). Logging is at WARNING, this project's
default, so neither server pays for per-request log lines.

Run it as `python benchmarks/sdk_server.py`; it speaks MCP over stdio.
"""

import math
import os
from datetime import UTC, datetime

import anyio.to_thread
import psutil
from mcp.server import MCPServer
from pydantic import BaseModel

__all__ = ["CPUReading", "MemoryReading", "SystemMetrics", "server", "system_metrics"]

CPU_SAMPLE_SECONDS = float(os.environ.get("MCP_METRICS_CPU_SAMPLE_SECONDS", "0.1"))


class CPUReading(BaseModel):
    """Processor readings."""

    utilization_percent: float
    core_count: int
    load_average_1m: float


class MemoryReading(BaseModel):
    """Memory readings."""

    total_bytes: int
    available_bytes: int
    percent_used: float


class SystemMetrics(BaseModel):
    """Result of `system_metrics`."""

    cpu: CPUReading
    memory: MemoryReading
    disk_percent_used: float | None
    timestamp_utc: datetime


server: MCPServer = MCPServer("sdk-metrics-bench", log_level="WARNING")


def _sample(include_disk: bool) -> SystemMetrics:
    utilization = psutil.cpu_percent(interval=CPU_SAMPLE_SECONDS)
    memory = psutil.virtual_memory()
    disk = psutil.disk_usage("/").percent if include_disk else None
    return SystemMetrics(
        cpu=CPUReading(
            utilization_percent=min(max(utilization, 0.0), 100.0),
            core_count=max(psutil.cpu_count(logical=True) or 1, 1),
            load_average_1m=max(os.getloadavg()[0], 0.0),
        ),
        memory=MemoryReading(
            total_bytes=int(memory.total),
            available_bytes=int(memory.available),
            percent_used=float(memory.percent) if math.isfinite(memory.percent) else 0.0,
        ),
        disk_percent_used=disk,
        timestamp_utc=datetime.now(UTC),
    )


@server.tool()
async def system_metrics(include_disk: bool = False) -> SystemMetrics:
    """Report host CPU, memory and (optionally) disk utilisation.

    Args:
        include_disk: Also report how full the root filesystem is.

    Returns:
        The readings.
    """
    return await anyio.to_thread.run_sync(_sample, include_disk)


if __name__ == "__main__":
    server.run()
