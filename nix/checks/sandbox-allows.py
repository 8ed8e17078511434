"""Check that the sandbox of the service the module defines allows what the server does.

Reads the units that nix/checks/module-eval.nix evaluates (the JSON scripts/render-units.py
renders) and fails, listing every finding, when the sandbox would stop the server from:

- sending its audit records to the journal, with MCP_AUDIT_LOG=journal: a native journal entry
  is a datagram to /run/systemd/journal/socket, so AF_UNIX must be allowed, the system-call
  filter must allow socket, setsockopt, connect, sendto and sendmsg, and no InaccessiblePaths=,
  TemporaryFileSystem=, RootDirectory= or RootImage= may hide or replace the socket;
- appending to its audit file, with MCP_AUDIT_LOG=<path>: the file must lie directly in the
  LogsDirectory= that systemd creates for the dynamic user, and nothing may hide that;
- opening files with openat2(2), which sandbox_fs_read uses for kernel-enforced containment.

What is left alone, and why: ProtectSystem=strict mounts /run read-only, and a read-only mount
stops writing files, not sending to a socket in it; PrivateDevices= concerns /dev, and the
native socket lives in /run; DynamicUser= leaves the socket reachable, since journald makes it
writable by everyone; ProtectProc= hides other processes, not sockets; PrivateNetwork= scopes
the network, and a socket in the file system is reached across it.

The system-call groups are expanded from `systemd-analyze syscall-filter` (or a saved copy of
its output, --syscall-groups), the same table that `systemd-analyze security` scores with.
Only the standard library is used.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

JOURNAL_SOCKET = "/run/systemd/journal/socket"
LOGS_ROOT = "/var/log"

# What the journal client does: open a datagram socket, size its send buffer, connect it (the
# server does, to prove at start-up that journald listens), then send (sendto, or sendmsg for a
# client that passes a memfd with a large entry).
JOURNAL_CALLS = ("socket", "setsockopt", "connect", "sendto", "sendmsg")
# sandbox_fs_read resolves every path with openat2(RESOLVE_BENEATH); without it the tool falls
# back to its O_NOFOLLOW walk, which holds but which the kernel does not enforce.
FILE_CALLS = ("openat2",)

# Directives that remove a path from the instance's view of the file system, or replace the
# whole view.
HIDING = ("InaccessiblePaths", "TemporaryFileSystem")
REPLACING = ("RootDirectory", "RootImage")

# Turns the names of one directive line into what they stand for (system-call groups expand).
Expander = Callable[[list[str]], set[str]]


def as_list(value: object) -> list[str]:
    """Return a directive's values as a list of strings; an absent directive has none."""
    if value is None:
        return []
    if isinstance(value, list):
        return [str(item) for item in value]
    return [str(value)]


def parse_groups(text: str) -> dict[str, list[str]]:
    """Parse `systemd-analyze syscall-filter` output into group -> members (calls, groups)."""
    groups: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.split()[0], [])
        elif current is not None and line.startswith(" "):
            item = line.strip()
            if item and not item.startswith("#"):
                current.append(item)
        else:
            current = None
    return groups


def expand(name: str, groups: dict[str, list[str]], seen: frozenset[str] = frozenset()) -> set[str]:
    """Return the system calls a filter entry names, its groups expanded recursively."""
    if not name.startswith("@"):
        return {name}
    if name not in groups:
        raise SystemExit(f"unknown system-call group {name}")
    calls: set[str] = set()
    for member in groups[name]:
        if member not in seen:
            calls |= expand(member, groups, seen | {name})
    return calls


def applied(lines: list[str], expand_line: Expander) -> tuple[str, set[str]] | None:
    """Apply a list directive's lines in order, as systemd does; None when it is unset.

    The first line decides the kind of list: an allow list, or with `~` a deny list. Each later
    line adds its names to that list, or with the other prefix takes them away. Returns the
    kind ("allow" or "deny") and the names the list ends with.
    """
    kind: str | None = None
    names: set[str] = set()
    for line in lines:
        deny = line.startswith("~")
        entries = expand_line(line.lstrip("~").split())
        if kind is None:
            kind, names = ("deny" if deny else "allow"), set(entries)
        elif deny == (kind == "deny"):
            names |= entries
        else:
            names -= entries
    return None if kind is None else (kind, names)


def refused(lines: list[str], wanted: tuple[str, ...], expand_line: Expander) -> list[str]:
    """Return the wanted names that the list directive refuses."""
    result = applied(lines, expand_line)
    if result is None:
        return []
    kind, names = result
    return [name for name in wanted if (name not in names) == (kind == "allow")]


def refused_calls(
    filters: list[str], wanted: tuple[str, ...], groups: dict[str, list[str]]
) -> list[str]:
    """Return the wanted system calls that SystemCallFilter= refuses."""

    def calls(names: list[str]) -> set[str]:
        return set().union(*(expand(name, groups) for name in names))

    return refused(filters, wanted, calls)


def covers(entry: str, path: str) -> bool:
    """Whether a path directive's entry (with its optional - or + prefix) covers the path."""
    target = PurePosixPath(entry.lstrip("-+").split(":", 1)[0])
    return PurePosixPath(path) == target or target in PurePosixPath(path).parents


def hidden(service: dict[str, Any], path: str) -> list[str]:
    """Return the findings of directives that hide or replace the path."""
    findings = [
        f"{directive}={entry} hides {path}"
        for directive in HIDING
        for entry in as_list(service.get(directive))
        if covers(entry, path)
    ]
    findings.extend(
        f"{directive}= gives the instance another root, without {path}"
        for directive in REPLACING
        if as_list(service.get(directive))
    )
    return findings


def address_family_allowed(service: dict[str, Any], family: str) -> bool:
    """Whether RestrictAddressFamilies= lets the instance open sockets of the family."""
    lines = as_list(service.get("RestrictAddressFamilies"))
    return not refused(lines, (family,), set)


def check(units: dict[str, Any], groups: dict[str, list[str]]) -> list[str]:
    """Return every way the service's sandbox stops what the server does."""
    service = units["service"]
    environment = units.get("environment") or {}
    filters = as_list(service.get("SystemCallFilter"))
    findings: list[str] = []

    destination = environment.get("MCP_AUDIT_LOG", "stderr")
    if destination == "journal":
        if not address_family_allowed(service, "AF_UNIX"):
            findings.append("RestrictAddressFamilies= refuses AF_UNIX, the journal's socket")
        findings.extend(
            f"SystemCallFilter= refuses {call}, which sends to the journal"
            for call in refused_calls(filters, JOURNAL_CALLS, groups)
        )
        findings.extend(hidden(service, JOURNAL_SOCKET))
    elif destination.startswith("/"):
        directories = [f"{LOGS_ROOT}/{name}" for name in as_list(service.get("LogsDirectory"))]
        if str(PurePosixPath(destination).parent) not in directories:
            findings.append(
                f"the audit file {destination} is not directly in a LogsDirectory= "
                f"({', '.join(directories) or 'none'}), the only place the dynamic user may write"
            )
        findings.extend(hidden(service, destination))

    findings.extend(
        f"SystemCallFilter= refuses {call}, which sandbox_fs_read's containment uses"
        for call in refused_calls(filters, FILE_CALLS, groups)
    )
    return findings


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", required=True, type=Path, help="JSON of module-eval.nix")
    parser.add_argument(
        "--syscall-groups", type=Path, help="saved `systemd-analyze syscall-filter` output"
    )
    args = parser.parse_args(argv)

    units = json.loads(args.units.read_text(encoding="utf-8"))
    if args.syscall_groups is not None:
        table = args.syscall_groups.read_text(encoding="utf-8")
    else:
        program = shutil.which("systemd-analyze")
        if program is None:
            raise SystemExit("systemd-analyze is required (part of systemd)")
        table = subprocess.run(  # noqa: S603  # systemd-analyze from PATH, fixed arguments.
            [program, "syscall-filter", "--no-pager"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    findings = check(units, parse_groups(table))
    destination = (units.get("environment") or {}).get("MCP_AUDIT_LOG", "stderr")
    if findings:
        print(f"{args.units.name}: {len(findings)} finding(s):", file=sys.stderr)
        for finding in findings:
            print(f"  {finding}", file=sys.stderr)
        return 1
    print(f"{args.units.name}: the sandbox allows the audit trail ({destination}) and openat2")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
