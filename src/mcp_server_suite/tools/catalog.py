"""The tool catalog: each tool's static description, kept as data beside the code.

`tools/list` is answered from `catalog.json`, so neither start-up nor the tool list imports
Pydantic or any tool's dependencies. The file is generated from the tools' own models and
texts by `generate_catalog` (`scripts/generate-tool-catalog.py`), and a test regenerates it
and fails on any difference, so it can never drift from the code.
"""

import json
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from mcp_server_suite.config import SecretStr, Settings
from mcp_server_suite.core.registry import ToolDescription, ToolSpec

__all__ = ["CATALOG_FILE", "generate_catalog", "load_catalog"]

CATALOG_FILE: Final = Path(__file__).with_name("catalog.json")

# Settings that let every tool be built for its description alone: nothing here is opened
# or connected to (the pool is created lazily, on the first query).
_DESCRIPTION_DSN: Final = "postgresql://catalog@localhost/catalog"


def load_catalog(path: Path = CATALOG_FILE) -> Mapping[str, ToolDescription]:
    """Read the catalog.

    Returns:
        Each tool's description, by name.
    """
    entries: dict[str, dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    return MappingProxyType(
        {
            name: ToolDescription(
                name,
                entry["title"],
                entry["description"],
                entry["inputSchema"],
                entry["outputSchema"],
            )
            for name, entry in entries.items()
        }
    )


def generate_catalog() -> str:
    """Build every tool and render the catalog text from its models and texts."""
    import tempfile  # noqa: PLC0415  # The generator alone needs a scratch directory.

    from mcp_server_suite.tools.fs.listing import build_list_tool  # noqa: PLC0415
    from mcp_server_suite.tools.fs.read import build_read_tool  # noqa: PLC0415  # Loads Pydantic.
    from mcp_server_suite.tools.metrics import build_metrics_tool  # noqa: PLC0415
    from mcp_server_suite.tools.sql import build_sql_tools  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as sandbox:
        settings = Settings(sql_dsn=SecretStr(_DESCRIPTION_DSN), safe_data_dir=Path(sandbox))
        sql_tools = build_sql_tools(settings)
        specs: list[ToolSpec[Any, Any]] = [
            sql_tools["read_only_sql"],
            sql_tools["sql_schema"],
            build_read_tool(settings),
            build_list_tool(settings),
            build_metrics_tool(settings),
        ]
        entries = {}
        for spec in specs:
            described = spec.describe()
            entries[spec.name] = {
                "title": described.title,
                "description": described.description,
                "inputSchema": described.input_schema,
                "outputSchema": described.output_schema,
            }
            if spec.close is not None:
                import asyncio  # noqa: PLC0415  # Only the generator closes tools itself.

                asyncio.run(spec.close())
    return json.dumps(entries, indent=2, sort_keys=True, ensure_ascii=True) + "\n"
