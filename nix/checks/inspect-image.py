"""Inspect a Docker image archive for what the appliance must and must not contain.

Reads the archive that `nix build .#image` produces (gzip-compressed) or that `docker save`
writes (plain tar), walks every layer and fails, listing every finding, when:

- a shell, coreutils, busybox or a package manager is in the image, as a store path or as a
  program in any bin directory, including inside /nix/store;
- pip or ensurepip is importable from any site-packages or standard library;
- a file carries a setuid or setgid bit, or is world-writable (the sticky scratch directory
  aside);
- the image root holds anything but /etc, /nix, the scratch directory and the data directory
  (a package's `nix-support/` copied to the root, for example);
- the CA bundle that SSL_CERT_FILE names does not resolve to a file inside the image;
- the image configuration differs from the expectations (user, environment, stop signal,
  entrypoint, creation time, account entries, data directory).

Times are compared as instants, not as text: dockerTools passes `created` through
`date -Iseconds` and writes it with `datetime.isoformat`, so 1970-01-01T00:00:01Z comes back
as 1970-01-01T00:00:01+00:00. With --check-times, every layer entry must also carry one of the
two fixed times the build gives it (see nix/image-config.nix); that holds for the archive Nix
builds, while `docker save` may rewrite entry times, so the smoke test leaves it out.

Only the standard library is used: the check runs in a Nix build sandbox and on CI hosts.
"""

from __future__ import annotations

import argparse
import json
import re
import stat
import sys
import tarfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import PurePosixPath
from typing import IO, Any

# Store path names (after the hash) of shells, core utilities and package managers. A version
# always follows the name in nixpkgs, which keeps e.g. "bashate" or "pipewire" out.
FORBIDDEN_STORE_NAMES = re.compile(
    r"^(?:bash|bash-interactive|dash|zsh|fish|mksh|ksh|tcsh|busybox|toybox|coreutils"
    r"|coreutils-full|uutils-coreutils|python3[0-9.]*-pip|pip|uv|nix|apk-tools|dpkg|apt|rpm)"
    r"-[0-9]"
)

# Program names that must not exist in any bin or sbin directory.
FORBIDDEN_PROGRAMS = frozenset(
    {
        # Shells.
        "sh",
        "bash",
        "dash",
        "ash",
        "zsh",
        "ksh",
        "mksh",
        "fish",
        "tcsh",
        "csh",
        "busybox",
        "toybox",
        # Package managers and installers.
        "pip",
        "pip3",
        "easy_install",
        "uv",
        "apt",
        "apt-get",
        "dpkg",
        "apk",
        "rpm",
        "yum",
        "dnf",
        "microdnf",
        "nix",
        "nix-env",
        "nix-store",
        "nix-shell",
        # The coreutils programs an intruder reaches for first.
        "coreutils",
        "ls",
        "cat",
        "cp",
        "mv",
        "rm",
        "ln",
        "chmod",
        "chown",
        "mkdir",
        "env",
        "id",
        "sleep",
        "head",
        "tail",
        "tee",
        "dd",
    }
)
PIP_PROGRAM = re.compile(r"^pip[0-9.]*$")

# Python packages that install other packages.
FORBIDDEN_MODULE_DIRS = frozenset({"pip", "ensurepip"})

STORE_PATH = re.compile(r"^nix/store/[0-9a-z]{32}-([^/]+)")

# The kernel gives up on a path after this many symbolic links (MAXSYMLINKS); the resolver of
# SSL_CERT_FILE below does the same, so a link loop is a finding rather than a hang.
MAX_SYMLINK_HOPS = 40

# Top-level entries every image has besides the scratch and data directories: the account
# files and CA bundle links under /etc, and the store.
ROOT_ENTRIES = frozenset({"etc", "nix"})


@dataclass
class Layers:
    """Everything the image's layers hold, merged in layer order."""

    entries: dict[str, tarfile.TarInfo] = field(default_factory=dict)
    store_paths: set[str] = field(default_factory=set)


def normalise(name: str) -> str:
    """Return a tar member name as a path relative to the image root, without ./ or /."""
    return str(PurePosixPath("/", name))[1:]


def parse_instant(text: object) -> datetime | None:
    """Return the instant an ISO 8601 time with an offset (or Z) names, else None."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return None
    return moment if moment.utcoffset() is not None else None


def resolve(layers: Layers, path: str) -> tarfile.TarInfo | None:
    """Follow symbolic links through the merged layers as a lookup from / would.

    Returns the entry the path finally names, or None when a component is missing or the
    links go on for more than MAX_SYMLINK_HOPS.
    """
    pending = list(PurePosixPath("/", path).parts[1:])
    resolved: list[str] = []
    hops = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = "/".join([*resolved, part])
        entry = layers.entries.get(candidate)
        if entry is None:
            # A layer may leave out a directory that only holds other entries; a lookup finds
            # it all the same, once the layers are unpacked.
            if not any(path.startswith(candidate + "/") for path in layers.entries):
                return None
            resolved.append(part)
            continue
        if entry.issym():
            hops += 1
            if hops > MAX_SYMLINK_HOPS:
                return None
            target = PurePosixPath(entry.linkname)
            if target.is_absolute():
                resolved = []
            pending = [*target.parts[1 if target.is_absolute() else 0 :], *pending]
            continue
        resolved.append(part)
    return layers.entries.get("/".join(resolved)) if resolved else None


def read_layers(archive: tarfile.TarFile, names: list[str]) -> Layers:
    """Merge the layers named by the manifest, lowest first."""
    layers = Layers()
    for name in names:
        stream = archive.extractfile(name)
        if stream is None:
            raise SystemExit(f"layer {name} is not a regular file in the archive")
        with tarfile.open(fileobj=stream, mode="r|*") as layer:
            for member in layer:
                path = normalise(member.name)
                if not path:
                    continue
                layers.entries[path] = member
                match = STORE_PATH.match(path)
                if match:
                    layers.store_paths.add(match.group(0))
    return layers


def read_json(archive: tarfile.TarFile, name: str) -> Any:
    """Read one JSON document from the archive."""
    stream = archive.extractfile(name)
    if stream is None:
        raise SystemExit(f"{name} is not a regular file in the archive")
    with stream:
        return json.load(stream)


def check_contents(layers: Layers, scratch_dir: str) -> list[str]:
    """Return the findings about programs, packages and file modes."""
    findings: list[str] = []
    for store_path in sorted(layers.store_paths):
        name = store_path.split("-", 1)[1]
        if FORBIDDEN_STORE_NAMES.match(name):
            findings.append(f"forbidden store path in the image: /{store_path}")
    for path, member in sorted(layers.entries.items()):
        parts = PurePosixPath(path).parts
        leaf = parts[-1]
        in_bin = len(parts) > 1 and parts[-2] in {"bin", "sbin"}
        if (
            in_bin
            and not member.isdir()
            and (leaf in FORBIDDEN_PROGRAMS or PIP_PROGRAM.match(leaf))
        ):
            findings.append(f"forbidden program in the image: /{path}")
        if member.isdir() and leaf in FORBIDDEN_MODULE_DIRS and len(parts) > 1:
            parent = parts[-2]
            if parent == "site-packages" or re.fullmatch(r"python3\.[0-9]+", parent):
                findings.append(f"package installer in the image: /{path}")
        if member.mode & (stat.S_ISUID | stat.S_ISGID) and not member.isdir():
            findings.append(f"setuid or setgid file: /{path}")
        if member.mode & stat.S_IWOTH and not member.issym():
            sticky_dir = member.isdir() and member.mode & stat.S_ISVTX
            if not (sticky_dir and path == normalise(scratch_dir)):
                findings.append(f"world-writable entry: /{path}")
    return findings


def read_text(archive_layers: dict[str, bytes], path: str) -> str | None:
    """Return the text of a small file captured from the layers, if any."""
    data = archive_layers.get(path)
    return None if data is None else data.decode("utf-8")


def capture_files(archive: tarfile.TarFile, names: list[str], wanted: set[str]) -> dict[str, bytes]:
    """Read the regular files in `wanted` from the layers, the highest layer winning."""
    captured: dict[str, bytes] = {}
    for name in names:
        stream = archive.extractfile(name)
        if stream is None:
            continue
        with tarfile.open(fileobj=stream, mode="r|*") as layer:
            for member in layer:
                path = normalise(member.name)
                if path in wanted and member.isfile():
                    handle: IO[bytes] | None = layer.extractfile(member)
                    if handle is not None:
                        captured[path] = handle.read()
    return captured


def check_settings(config: dict[str, Any], layers: Layers, expect: dict[str, Any]) -> list[str]:
    """Return the findings about the image configuration."""
    findings: list[str] = []
    settings = config.get("config") or {}
    user = expect["user"]

    wanted_user = f"{user['uid']}:{user['gid']}"
    if settings.get("User") != wanted_user:
        findings.append(f"User is {settings.get('User')!r}, expected {wanted_user!r}")
    if settings.get("StopSignal") != expect["stopSignal"]:
        findings.append(
            f"StopSignal is {settings.get('StopSignal')!r}, expected {expect['stopSignal']!r}"
        )
    env = dict(item.split("=", 1) for item in settings.get("Env") or [])
    findings.extend(
        f"Env {name} is {env.get(name)!r}, expected {value!r}"
        for name, value in sorted(expect["environment"].items())
        if env.get(name) != value
    )
    wanted_created = parse_instant(expect["created"])
    if wanted_created is None:
        findings.append(f"the expected creation time {expect['created']!r} is not ISO 8601")
    else:
        stamps = [("created", config.get("created"))] + [
            (f"history[{index}].created", item.get("created"))
            for index, item in enumerate(config.get("history") or [])
            if isinstance(item, dict) and "created" in item
        ]
        findings.extend(
            f"{where} is {stamp!r}, expected the instant {expect['created']}"
            for where, stamp in stamps
            if parse_instant(stamp) != wanted_created
        )

    entrypoint = settings.get("Entrypoint") or []
    if not entrypoint or entrypoint[1:] != ["-m", expect["module"]]:
        findings.append(
            f"Entrypoint is {entrypoint!r}, expected [<python>, '-m', {expect['module']!r}]"
        )
    elif normalise(entrypoint[0]) not in layers.entries:
        findings.append(f"the entrypoint {entrypoint[0]} is not in the image")
    if settings.get("Cmd"):
        findings.append(f"Cmd is {settings['Cmd']!r}, expected none")

    for directory in (expect["dataDir"], expect["tmpDir"]):
        entry = layers.entries.get(normalise(directory))
        if entry is None or not entry.isdir():
            findings.append(f"the directory {directory} is missing")

    bundle = expect["environment"].get("SSL_CERT_FILE")
    if bundle is not None:
        target = resolve(layers, normalise(bundle))
        if target is None or not target.isfile():
            findings.append(f"SSL_CERT_FILE {bundle} does not resolve to a file in the image")
    return findings


def check_root(layers: Layers, expect: dict[str, Any]) -> list[str]:
    """Return the findings about what sits at the top of the image."""
    allowed = ROOT_ENTRIES | {normalise(expect["dataDir"]), normalise(expect["tmpDir"])}
    top = {PurePosixPath(path).parts[0] for path in layers.entries}
    return [f"unexpected entry at the image root: /{name}" for name in sorted(top - allowed)]


def check_times(layers: Layers, expect: dict[str, Any]) -> list[str]:
    """Return the entries whose modification time is not the fixed time of their layer.

    The store layers are written by stream_layered_image.py with `mtime`; everything else comes
    from the customisation layer, which dockerTools packs at the build's SOURCE_DATE_EPOCH.
    """
    wanted: dict[str, datetime | None] = {
        "store": parse_instant(expect["mtime"]),
        "customisation": parse_instant(expect["customisationMtime"]),
    }
    findings = [
        f"the expected {layer} time is not ISO 8601" for layer, at in wanted.items() if at is None
    ]
    if findings:
        return findings
    for path, member in sorted(layers.entries.items()):
        layer = "store" if path == "nix" or path.startswith("nix/") else "customisation"
        moment = wanted[layer]
        if moment is not None and member.mtime != moment.timestamp():
            findings.append(
                f"/{path} has mtime {member.mtime}, expected the {layer} time "
                f"{int(moment.timestamp())}"
            )
    return findings


def check_accounts(layers: Layers, files: dict[str, bytes], expect: dict[str, Any]) -> list[str]:
    """Return the findings about /etc/passwd and /etc/group."""
    user = expect["user"]
    passwd = read_text(files, "etc/passwd")
    group = read_text(files, "etc/group")
    if passwd is None or group is None:
        return ["/etc/passwd or /etc/group is missing or not a regular file"]
    findings: list[str] = []
    accounts = [line.split(":") for line in passwd.splitlines() if line]
    if not any(len(a) == 7 and a[2] == str(user["uid"]) for a in accounts):
        findings.append(f"/etc/passwd has no entry for uid {user['uid']}")
    for account in accounts:
        shell = account[-1] if len(account) == 7 else ""
        if normalise(shell) in layers.entries or PurePosixPath(shell).name in FORBIDDEN_PROGRAMS:
            findings.append(f"/etc/passwd gives {account[0]} a login shell: {shell}")
    groups = [line.split(":") for line in group.splitlines() if line]
    if not any(len(g) == 4 and g[2] == str(user["gid"]) for g in groups):
        findings.append(f"/etc/group has no entry for gid {user['gid']}")
    return findings


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("image", help="image archive (.tar or .tar.gz)")
    parser.add_argument("--expect", required=True, help="JSON of nix/image-config.nix")
    parser.add_argument(
        "--check-times",
        action="store_true",
        help="require the fixed modification times of the archive Nix builds",
    )
    args = parser.parse_args(argv)

    with open(args.expect, encoding="utf-8") as handle:
        expect = json.load(handle)

    with tarfile.open(args.image, mode="r:*") as archive:
        manifest = read_json(archive, "manifest.json")
        if len(manifest) != 1:
            print(f"expected one image in the archive, found {len(manifest)}", file=sys.stderr)
            return 1
        image = manifest[0]
        config = read_json(archive, image["Config"])
        layer_names = list(image["Layers"])
        layers = read_layers(archive, layer_names)
        files = capture_files(archive, layer_names, {"etc/passwd", "etc/group"})

    findings = (
        check_contents(layers, expect["tmpDir"])
        + check_root(layers, expect)
        + check_settings(config, layers, expect)
        + check_accounts(layers, files, expect)
        + (check_times(layers, expect) if args.check_times else [])
    )
    tag = f"{expect['name']}:{expect['tag']}"
    tags = image.get("RepoTags") or []
    if tag not in tags and f"localhost/{tag}" not in tags:
        findings.append(f"RepoTags are {tags!r}, expected {tag!r}")

    print(f"{len(layer_names)} layers, {len(layers.entries)} entries, store paths:")
    for store_path in sorted(layers.store_paths, key=lambda p: p.split("-", 1)[1]):
        print(f"  /{store_path}")
    if findings:
        print(f"{len(findings)} finding(s):", file=sys.stderr)
        for finding in findings:
            print(f"  {finding}", file=sys.stderr)
        return 1
    print("no shell, no package manager, configuration as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
