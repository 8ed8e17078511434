"""The tool catalog: `tools/list` is answered from data that matches the code exactly."""

import subprocess
import sys
import textwrap

from mcp_server_suite.tools.catalog import CATALOG_FILE, generate_catalog, load_catalog


def test_catalog_matches_the_tools_models_and_texts() -> None:
    # On failure, run scripts/generate-tool-catalog.py and commit the result.
    assert CATALOG_FILE.read_text(encoding="utf-8") == generate_catalog()


def test_catalog_describes_every_tool() -> None:
    catalog = load_catalog()
    assert list(catalog) == [
        "read_only_sql",
        "sandbox_fs_list",
        "sandbox_fs_read",
        "sql_schema",
        "system_metrics",
    ]
    for name, described in catalog.items():
        assert described.name == name
        assert described.title
        assert described.input_schema["type"] == "object"
        assert described.input_schema["additionalProperties"] is False
        assert described.output_schema["type"] == "object"


def test_start_up_and_tools_list_load_no_tool_dependencies() -> None:
    # Start-up latency is user-visible: building the registry and answering tools/list must
    # not import Pydantic, psutil or the SQL stack. A fresh interpreter proves it.
    probe = textwrap.dedent(
        """
        import json, sys, tempfile
        from pathlib import Path
        from mcp_server_suite.config import SecretStr, Settings
        from mcp_server_suite.core.server import Dispatcher
        from mcp_server_suite.tools import build_registry

        settings = Settings(
            safe_data_dir=Path(tempfile.mkdtemp()),
            sql_dsn=SecretStr("postgresql://u@h/db"),
        )
        dispatcher = Dispatcher(build_registry(settings), server_version="1")
        init = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "c", "version": "1"},
        }
        request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}
        dispatcher.handle_frame(json.dumps(request).encode())
        listed = dispatcher.handle_frame(b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}')
        assert len(listed.message["result"]["tools"]) == 5
        heavy = ("pydantic", "psutil", "psycopg", "pglast")
        print(sorted(name for name in heavy if name in sys.modules))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
