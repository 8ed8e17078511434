"""Render nix/units.nix, evaluated to JSON, into systemd unit files.

The NixOS module renders the same attribute sets into the same directives; this renderer
follows its rules (booleans as true/false, one line per list item, no line for an empty list,
JSON-quoted Environment= assignments), so that `systemd-analyze security --offline=yes` can
score the unit on a machine without NixOS or a Nix store.

Usage:
    render-units.py --units units.json [--environment env.json] --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

SOCKET_NAME = "mcp-server-suite.socket"
SERVICE_NAME = "mcp-server-suite@.service"
# Stands for the store path of the package; the analysis does not read the program.
DEFAULT_EXEC_START = "/run/current-system/sw/bin/mcp-server-suite"


def render_value(value: object) -> str:
    """Render one directive value the way NixOS's systemd library does."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise TypeError(f"cannot render {value!r} as a unit directive")


def render_section(name: str, directives: dict[str, Any]) -> list[str]:
    """Render a section; a list value gives one line per item, an empty list none."""
    lines = [f"[{name}]"]
    for key in sorted(directives):
        value = directives[key]
        values = value if isinstance(value, list) else [value]
        lines.extend(f"{key}={render_value(item)}" for item in values)
    return [*lines, ""]


def render_socket(units: dict[str, Any]) -> str:
    """Return the text of the socket unit."""
    lines = [
        *render_section("Unit", {"Description": "MCP server suite socket"}),
        *render_section("Socket", units["socket"]),
        *render_section("Install", {"WantedBy": "sockets.target"}),
    ]
    return "\n".join(lines)


def render_service(units: dict[str, Any], environment: dict[str, str], exec_start: str) -> str:
    """Return the text of the template service unit."""
    unit = {"Description": "MCP server suite session %i", **units["serviceUnit"]}
    service = {**units["limits"], **units["service"], "ExecStart": exec_start}
    env = {**units["environment"], **environment}
    lines = render_section("Unit", unit)
    service_lines = render_section("Service", service)
    env_lines = [f"Environment={json.dumps(f'{name}={env[name]}')}" for name in sorted(env)]
    # Environment= lines go first in the section, as NixOS writes them.
    lines += [service_lines[0], *env_lines, *service_lines[1:]]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", required=True, type=Path, help="JSON of nix/units.nix")
    parser.add_argument("--environment", type=Path, help="JSON of nix/environment.nix")
    parser.add_argument("--exec-start", default=DEFAULT_EXEC_START, help="ExecStart= command")
    parser.add_argument("--out", required=True, type=Path, help="directory for the unit files")
    args = parser.parse_args(argv)

    units = json.loads(args.units.read_text(encoding="utf-8"))
    environment: dict[str, str] = {}
    if args.environment is not None:
        environment = json.loads(args.environment.read_text(encoding="utf-8"))

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / SOCKET_NAME).write_text(render_socket(units), encoding="utf-8")
    (args.out / SERVICE_NAME).write_text(
        render_service(units, environment, args.exec_start), encoding="utf-8"
    )
    print(f"rendered {SOCKET_NAME} and {SERVICE_NAME} into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
