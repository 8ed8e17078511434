"""`system_metrics`: host CPU, memory and disk utilisation.

psutil blocks for the CPU sampling interval, so every reading is taken in a worker thread.
Readings are clamped into their documented ranges, because containers and virtual machines
occasionally report values slightly outside them. The disk path is configuration only: it
is never echoed, in results or in problems.
"""

import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import psutil

from mcp_server_suite.config import Settings
from mcp_server_suite.core.registry import ToolSpec
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.metrics import (
    CPUReading,
    MemoryReading,
    SystemMetricsParams,
    SystemMetricsResult,
)
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.workers import run_blocking

__all__ = ["HostMetrics", "build_metrics_tool"]

DESCRIPTION: Final = (
    "Report host CPU utilisation, logical core count, one-minute load average and memory "
    "use. Set include_disk to also report how full the configured filesystem is."
)


def _clamp(value: float, low: float, high: float) -> float:
    if not math.isfinite(value):
        return low
    return min(max(value, low), high)


class HostMetrics:
    """Takes one set of readings per call.

    Args:
        cpu_sample_seconds: How long CPU utilisation is sampled.
        disk_path: The filesystem whose use `include_disk` reports.
    """

    def __init__(self, cpu_sample_seconds: float, disk_path: Path) -> None:
        self._cpu_sample_seconds: Final = cpu_sample_seconds
        self._disk_path: Final = disk_path

    async def read(self, params: SystemMetricsParams) -> SystemMetricsResult:
        """Take the readings in a worker thread.

        Raises:
            ToolFailure: The filesystem could not be read (internal error, path withheld).
        """
        return await run_blocking(self._sample, params.include_disk)

    def _sample(self, include_disk: bool) -> SystemMetricsResult:
        utilization = psutil.cpu_percent(interval=self._cpu_sample_seconds)
        memory = psutil.virtual_memory()
        total = max(int(memory.total), 0)
        available = min(max(int(memory.available), 0), total)
        try:
            load_1m = os.getloadavg()[0]
        except OSError:  # pragma: no cover - Linux always provides /proc/loadavg
            load_1m = 0.0
        return SystemMetricsResult(
            cpu=CPUReading(
                utilization_percent=_clamp(utilization, 0.0, 100.0),
                core_count=max(psutil.cpu_count(logical=True) or 1, 1),
                load_average_1m=_clamp(load_1m, 0.0, math.inf),
            ),
            memory=MemoryReading(
                total_bytes=total,
                available_bytes=available,
                percent_used=_clamp(float(memory.percent), 0.0, 100.0),
            ),
            disk_percent_used=self._disk_percent() if include_disk else None,
            timestamp_utc=datetime.now(UTC),
        )

    def _disk_percent(self) -> float:
        try:
            usage = psutil.disk_usage(str(self._disk_path))
        except OSError:
            raise ToolFailure(
                "The disk reading is unavailable: the configured filesystem cannot be read.",
                code=MCPErrorCode.INTERNAL_ERROR,
            ) from None
        return _clamp(float(usage.percent), 0.0, 100.0)


def build_metrics_tool(settings: Settings) -> ToolSpec[SystemMetricsParams, SystemMetricsResult]:
    """Describe `system_metrics` with the configured sampling interval and disk path."""
    metrics = HostMetrics(settings.metrics_cpu_sample_seconds, settings.metrics_disk_path)
    return ToolSpec(
        name="system_metrics",
        title="System metrics",
        description=DESCRIPTION,
        params_model=SystemMetricsParams,
        result_model=SystemMetricsResult,
        run=metrics.read,
    )
