"""`system_metrics`: the contract, clamping, the disk reading and its failure."""

import math
from collections import namedtuple
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
from pydantic import ValidationError

from mcp_server_suite.config import Settings
from mcp_server_suite.schemas.errors import ToolFailure
from mcp_server_suite.schemas.metrics import SystemMetricsParams, SystemMetricsResult
from mcp_server_suite.schemas.problems import MCPErrorCode
from mcp_server_suite.tools.metrics import HostMetrics, build_metrics_tool

Memory = namedtuple("Memory", "total available percent")


def tool(**settings: Any) -> Any:
    return build_metrics_tool(Settings(metrics_cpu_sample_seconds=0.01, **settings))


async def test_real_readings_satisfy_the_contract() -> None:
    result = await tool().run(SystemMetricsParams(include_disk=True))
    assert isinstance(result, SystemMetricsResult)
    assert 0 <= result.cpu.utilization_percent <= 100
    assert result.cpu.core_count >= 1
    assert result.cpu.load_average_1m >= 0
    assert 0 <= result.memory.available_bytes <= result.memory.total_bytes
    assert result.disk_percent_used is not None
    assert 0 <= result.disk_percent_used <= 100
    assert result.timestamp_utc.utcoffset() == timedelta(0)
    SystemMetricsResult.model_validate_json(result.model_dump_json())


async def test_disk_is_null_unless_asked() -> None:
    result = await tool().run(SystemMetricsParams())
    assert result.disk_percent_used is None


async def test_out_of_range_readings_are_clamped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(psutil, "cpu_percent", lambda interval: 100.4)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: Memory(1000, 1200, -0.1))
    monkeypatch.setattr(psutil, "cpu_count", lambda logical: None)
    monkeypatch.setattr(psutil, "disk_usage", lambda path: SimpleNamespace(percent=math.nan))
    monkeypatch.setattr("os.getloadavg", lambda: (-0.5, 0.0, 0.0))
    result = await tool().run(SystemMetricsParams(include_disk=True))
    assert result.cpu.utilization_percent == 100
    assert result.cpu.core_count == 1
    assert result.cpu.load_average_1m == 0
    assert result.memory.available_bytes == result.memory.total_bytes == 1000
    assert result.memory.percent_used == 0
    assert result.disk_percent_used == 0


async def test_unreadable_disk_is_an_internal_problem_without_the_path(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    metrics = HostMetrics(0.01, gone)
    with pytest.raises(ToolFailure) as caught:
        await metrics.read(SystemMetricsParams(include_disk=True))
    assert caught.value.problem.code is MCPErrorCode.INTERNAL_ERROR
    assert str(tmp_path) not in caught.value.problem.as_text()


def test_arguments_are_strict() -> None:
    for bad in ('{"include_disk": "true"}', '{"include_disk": 1}', '{"other": true}'):
        with pytest.raises(ValidationError):
            SystemMetricsParams.model_validate_json(bad)


def test_result_contract_refuses_inconsistent_readings() -> None:
    good = {
        "cpu": {"utilization_percent": 1.0, "core_count": 1, "load_average_1m": 0.0},
        "memory": {"total_bytes": 10, "available_bytes": 5, "percent_used": 50.0},
        "disk_percent_used": None,
        "timestamp_utc": "2026-01-01T00:00:00Z",
    }
    SystemMetricsResult.model_validate(good, strict=False)
    with pytest.raises(ValidationError, match="exceeds"):
        SystemMetricsResult.model_validate(
            good | {"memory": {"total_bytes": 1, "available_bytes": 5, "percent_used": 1.0}},
            strict=False,
        )
    with pytest.raises(ValidationError, match="zero UTC offset"):
        SystemMetricsResult.model_validate(
            good | {"timestamp_utc": "2026-01-01T00:00:00+02:00"}, strict=False
        )
    with pytest.raises(ValidationError):
        SystemMetricsResult.model_validate(good | {"disk_percent_used": 100.5}, strict=False)


def test_spec_describes_a_read_only_tool() -> None:
    spec = tool()
    assert spec.name == "system_metrics"
    assert spec.params_model is SystemMetricsParams
    assert spec.result_model is SystemMetricsResult
