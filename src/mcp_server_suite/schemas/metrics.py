"""Contracts of `system_metrics`."""

from datetime import datetime, timedelta
from typing import Self

from pydantic import Field, model_validator

from mcp_server_suite.schemas.arguments import ToolArguments
from mcp_server_suite.schemas.base import StrictModel

__all__ = ["CPUReading", "MemoryReading", "SystemMetricsParams", "SystemMetricsResult"]


class SystemMetricsParams(ToolArguments):
    """Arguments of `system_metrics`."""

    include_disk: bool = Field(
        default=False,
        description="Also report how full the configured filesystem is; null means false.",
    )


class CPUReading(StrictModel):
    """Processor readings."""

    utilization_percent: float = Field(ge=0, le=100, description="CPU busy time, percent.")
    core_count: int = Field(ge=1, description="Logical CPUs.")
    load_average_1m: float = Field(ge=0, description="One-minute load average.")


class MemoryReading(StrictModel):
    """Memory readings."""

    total_bytes: int = Field(ge=0, description="Physical memory.")
    available_bytes: int = Field(ge=0, description="Memory available without swapping.")
    percent_used: float = Field(ge=0, le=100, description="Memory in use, percent.")

    @model_validator(mode="after")
    def _available_within_total(self) -> Self:
        if self.available_bytes > self.total_bytes:
            raise ValueError("available_bytes exceeds total_bytes")
        return self


class SystemMetricsResult(StrictModel):
    """Result of `system_metrics`."""

    cpu: CPUReading
    memory: MemoryReading
    disk_percent_used: float | None = Field(
        ge=0, le=100, description="Used space of the configured filesystem, or null."
    )
    timestamp_utc: datetime = Field(description="When the readings were taken, in UTC.")

    @model_validator(mode="after")
    def _timestamp_is_utc(self) -> Self:
        if self.timestamp_utc.utcoffset() != timedelta(0):
            raise ValueError("timestamp_utc must carry a zero UTC offset")
        return self
