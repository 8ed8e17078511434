"""Check docker-compose.yml against the container hardening profile, without a daemon.

The values that the image defines (tag, user, stop signal, data directory) come from
nix/image-config.nix, evaluated to JSON, so the Compose file cannot drift from the image.

Only the standard library is available where this runs, so the file is read with a parser for
the subset of YAML it uses: block mappings and sequences, `{}` and `[a, b]` flow collections,
plain and quoted scalars, and comments. Anything outside that subset is an error, not a guess.

Usage:
    check-compose.py --expect image-config.json [docker-compose.yml]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVICE = "mcp-server"
VOLUME = "safe-data"
TMPFS_OPTIONS = {"noexec", "nosuid", "nodev"}


class YAMLSubsetError(ValueError):
    """The file uses YAML beyond the subset this checker reads."""


@dataclass(frozen=True)
class Line:
    number: int
    indent: int
    text: str


def strip_comment(text: str) -> str:
    """Drop a trailing comment that is not inside quotes."""
    quote = ""
    for index, char in enumerate(text):
        if quote:
            if char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "#" and (index == 0 or text[index - 1] in " \t"):
            return text[:index].rstrip()
    return text.rstrip()


def logical_lines(source: str) -> list[Line]:
    """Return the non-blank, comment-free lines with their indentation."""
    lines = []
    for number, raw in enumerate(source.splitlines(), start=1):
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise YAMLSubsetError(f"line {number}: tab in indentation")
        text = strip_comment(raw)
        if text.strip():
            lines.append(Line(number, len(text) - len(text.lstrip()), text.strip()))
    return lines


def scalar(text: str, number: int) -> Any:
    """Convert a scalar or a flow collection of scalars."""
    if text in {"{}", "[]"}:
        return {} if text == "{}" else []
    if text.startswith("[") and text.endswith("]"):
        return [scalar(item.strip(), number) for item in text[1:-1].split(",") if item.strip()]
    if text[0] in "{[&*!|>%@`":
        raise YAMLSubsetError(f"line {number}: unsupported YAML: {text}")
    if text[0] in "\"'":
        if len(text) < 2 or text[-1] != text[0]:
            raise YAMLSubsetError(f"line {number}: unterminated quoted scalar")
        return text[1:-1]
    if text in {"true", "false"}:
        return text == "true"
    if re.fullmatch(r"-?[0-9]+", text):
        return int(text)
    return text


def split_key(text: str, number: int) -> tuple[str, str] | None:
    """Split `key: value` or `key:`; None when the text is not a mapping entry."""
    match = re.fullmatch(r"(\"[^\"]*\"|'[^']*'|[^\s:\"'][^:]*?)\s*:(?:\s+(.*))?", text)
    if match is None:
        return None
    key = match.group(1)
    if key[0] in "\"'":
        key = key[1:-1]
    return key, (match.group(2) or "").strip()


class Parser:
    """Recursive descent over indentation, for the YAML subset described above."""

    def __init__(self, lines: list[Line]) -> None:
        self.lines = lines
        self.index = 0

    def parse(self) -> Any:
        if not self.lines:
            return {}
        value = self.block(self.lines[0].indent)
        if self.index != len(self.lines):
            line = self.lines[self.index]
            raise YAMLSubsetError(f"line {line.number}: unexpected indentation")
        return value

    def block(self, indent: int) -> Any:
        line = self.lines[self.index]
        if line.text == "-" or line.text.startswith("- "):
            return self.sequence(indent)
        return self.mapping(indent)

    def nested(self, parent: Line) -> Any:
        """Parse the block below `parent`, or return None when there is none."""
        if self.index >= len(self.lines):
            return None
        line = self.lines[self.index]
        is_item = line.text == "-" or line.text.startswith("- ")
        if line.indent > parent.indent or (line.indent == parent.indent and is_item):
            return self.block(line.indent)
        return None

    def mapping(self, indent: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        while self.index < len(self.lines):
            line = self.lines[self.index]
            if line.indent < indent or line.text.startswith("- ") or line.text == "-":
                break
            if line.indent > indent:
                raise YAMLSubsetError(f"line {line.number}: unexpected indentation")
            entry = split_key(line.text, line.number)
            if entry is None:
                raise YAMLSubsetError(f"line {line.number}: expected `key: value`")
            key, rest = entry
            if key in result:
                raise YAMLSubsetError(f"line {line.number}: duplicate key {key!r}")
            self.index += 1
            result[key] = scalar(rest, line.number) if rest else self.nested(line)
        return result

    def sequence(self, indent: int) -> list[Any]:
        result: list[Any] = []
        while self.index < len(self.lines):
            line = self.lines[self.index]
            if line.indent != indent or not (line.text == "-" or line.text.startswith("- ")):
                break
            rest = line.text[1:].strip()
            if not rest:
                self.index += 1
                result.append(self.nested(line))
            elif split_key(rest, line.number) is not None and rest[0] not in "\"'[":
                # `- key: value` opens a mapping whose keys line up after the dash.
                self.lines[self.index] = Line(line.number, indent + 2, rest)
                result.append(self.mapping(indent + 2))
            else:
                self.index += 1
                result.append(scalar(rest, line.number))
        return result


def check_flags(service: dict[str, Any], expect: dict[str, Any]) -> list[str]:
    """Return the departures of the service's own settings."""
    user = expect["user"]
    wanted = {
        "image": f"{expect['name']}:{expect['tag']}",
        "pull_policy": "never",
        "user": f"{user['uid']}:{user['gid']}",
        "read_only": True,
        "cap_drop": ["ALL"],
        "network_mode": "none",
        "stdin_open": True,
        "tty": False,
        "stop_signal": expect["stopSignal"],
    }
    problems = [
        f"{key} is {service.get(key)!r}, expected {value!r}"
        for key, value in wanted.items()
        if service.get(key) != value
    ]
    if "no-new-privileges:true" not in (service.get("security_opt") or []):
        problems.append("security_opt lacks no-new-privileges:true")
    problems.extend(
        f"{forbidden} must not be set"
        for forbidden in ("privileged", "cap_add", "ports", "devices", "pid", "ipc")
        if service.get(forbidden)
    )
    limits = ((service.get("deploy") or {}).get("resources") or {}).get("limits") or {}
    problems.extend(
        f"deploy.resources.limits.{limit} is missing"
        for limit in ("cpus", "memory", "pids")
        if limit not in limits
    )
    environment = service.get("environment") or {}
    names = environment if isinstance(environment, dict) else [e.split("=")[0] for e in environment]
    if "MCP_SQL_DSN" in names:
        problems.append(
            "MCP_SQL_DSN must come from a file (MCP_SQL_DSN_FILE), not the Compose file"
        )
    return problems


def check_mounts(
    compose: dict[str, Any], service: dict[str, Any], expect: dict[str, Any]
) -> list[str]:
    """Return the departures of the tmpfs and the volumes."""
    problems: list[str] = []
    tmpfs: dict[str, set[str]] = {}
    for entry in service.get("tmpfs") or []:
        target, _, flags = str(entry).partition(":")
        tmpfs[target] = set(flags.split(","))
    options = tmpfs.get(expect["tmpDir"])
    if options is None:
        problems.append(f"no tmpfs at {expect['tmpDir']}")
    elif not options >= TMPFS_OPTIONS or not any(o.startswith("size=") for o in options):
        problems.append(f"the tmpfs at {expect['tmpDir']} needs noexec,nosuid,nodev and a size")

    volumes = service.get("volumes") or []
    data = [v for v in volumes if isinstance(v, dict) and v.get("target") == expect["dataDir"]]
    if len(data) != 1 or data[0].get("read_only") is not True or data[0].get("source") != VOLUME:
        problems.append(f"{expect['dataDir']} must be the read-only volume {VOLUME}")
    if VOLUME not in (compose.get("volumes") or {}):
        problems.append(f"the volume {VOLUME} is not declared")
    if any(isinstance(v, str) and not v.endswith(":ro") for v in volumes):
        problems.append("every short-syntax volume must be mounted :ro")
    return problems


def check(compose: dict[str, Any], expect: dict[str, Any]) -> list[str]:
    """Return every way the Compose file departs from the hardening profile."""
    service = (compose.get("services") or {}).get(SERVICE)
    if not isinstance(service, dict):
        return [f"services.{SERVICE} is missing"]
    return check_flags(service, expect) + check_mounts(compose, service, expect)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expect", required=True, type=Path, help="JSON of image-config.nix")
    parser.add_argument("compose", nargs="?", type=Path, default=Path("docker-compose.yml"))
    args = parser.parse_args(argv)

    expect = json.loads(args.expect.read_text(encoding="utf-8"))
    try:
        compose = Parser(logical_lines(args.compose.read_text(encoding="utf-8"))).parse()
    except YAMLSubsetError as error:
        print(f"{args.compose}: {error}", file=sys.stderr)
        return 1
    problems = check(compose, expect)
    if problems:
        print(f"{args.compose}: {len(problems)} problem(s):", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print(f"{args.compose}: service {SERVICE} matches the hardening profile")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
