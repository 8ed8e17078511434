"""nix/checks/inspect-image.py against synthetic image archives.

No image can be built here, so each test writes an archive laid out the way nixpkgs'
`stream_layered_image.py` writes one: one `<sha256>/layer.tar` per store layer (members named
`/nix/store/...`, `/nix` and `/nix/store` first, every entry at the fixed `mtime`), then the
customisation layer that dockerTools packs with GNU tar (members named `./etc/...`, every entry
at SOURCE_DATE_EPOCH), then `<sha256>.json` (the image configuration, `created` written by
`datetime.isoformat`) and `manifest.json`. The expectations are nix/image-config.nix itself.

The checker runs as the flake check and the smoke test run it, as a program; the property
tests call its functions directly so that they can try many images quickly.
"""

import gzip
import hashlib
import importlib.util
import io
import json
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from types import ModuleType
from typing import Any, Final, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit._nix import CHECKS_DIR, image_config

CHECKER: Final = CHECKS_DIR / "inspect-image.py"

# Store path hashes: 32 characters of Nix's base-32 alphabet.
PYTHON_ENV: Final = "/nix/store/" + "1" * 32 + "-python3-3.13.5-env"
PYTHON: Final = "/nix/store/" + "2" * 32 + "-python3-3.13.5"
CACERT: Final = "/nix/store/" + "3" * 32 + "-nss-cacert-3.117"
CA_LINKS: Final = "/nix/store/" + "4" * 32 + "-ca-certificates"
BUNDLE: Final = "etc/ssl/certs/ca-bundle.crt"

ACCOUNTS: Final = (
    "root:x:0:0:root:/var/empty:/sbin/nologin\nmcp:x:10001:10001::/var/empty:/sbin/nologin\n"
)
GROUPS: Final = "root:x:0:\nmcp:x:10001:\n"

# The times dockerTools gives the entries: `mtime` for the store layers, and stdenv's
# SOURCE_DATE_EPOCH for the customisation layer.
STORE_MTIME: Final = 1
SOURCE_DATE_EPOCH: Final = 315_532_800

Kind = Literal["file", "dir", "symlink"]


@dataclass(frozen=True)
class Entry:
    """One member of a layer, named relative to the image root."""

    path: str
    kind: Kind = "file"
    data: bytes = b""
    mode: int = 0o444
    target: str = ""
    mtime: int | None = None


def directory(path: str, mode: int = 0o555) -> Entry:
    return Entry(path, "dir", mode=mode)


def link(path: str, target: str) -> Entry:
    return Entry(path, "symlink", mode=0o777, target=target)


def store_entries() -> list[Entry]:
    """The store paths of a minimal server closure, the CA bundle included."""
    return [
        directory(PYTHON_ENV.lstrip("/")),
        directory(f"{PYTHON_ENV.lstrip('/')}/bin"),
        Entry(f"{PYTHON_ENV.lstrip('/')}/bin/python3.13", data=b"\x7fELF", mode=0o555),
        directory(PYTHON.lstrip("/")),
        directory(f"{PYTHON.lstrip('/')}/lib/python3.13/site-packages"),
        directory(CACERT.lstrip("/")),
        Entry(f"{CACERT.lstrip('/')}/{BUNDLE}", data=b"-----BEGIN CERTIFICATE-----\n"),
        directory(CA_LINKS.lstrip("/")),
        link(f"{CA_LINKS.lstrip('/')}/{BUNDLE}", f"{CACERT}/{BUNDLE}"),
        link(f"{CA_LINKS.lstrip('/')}/etc/ssl/certs/ca-certificates.crt", f"{CACERT}/{BUNDLE}"),
    ]


def customisation_entries() -> list[Entry]:
    """What dockerTools.caCertificates and the image's fakeRootCommands put at the root."""
    return [
        directory("etc", 0o755),
        Entry("etc/group", data=GROUPS.encode()),
        Entry("etc/passwd", data=ACCOUNTS.encode()),
        directory("etc/ssl", 0o755),
        directory("etc/ssl/certs", 0o755),
        link(BUNDLE, f"{CA_LINKS}/{BUNDLE}"),
        link("etc/ssl/certs/ca-certificates.crt", f"{CA_LINKS}/etc/ssl/certs/ca-certificates.crt"),
        directory("safe_data_dir"),
        directory("tmp", 0o1777),
    ]


def tar_member(entry: Entry, name: str, default_mtime: int) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = entry.mode
    info.mtime = default_mtime if entry.mtime is None else entry.mtime
    if entry.kind == "dir":
        info.type = tarfile.DIRTYPE
    elif entry.kind == "symlink":
        info.type = tarfile.SYMTYPE
        info.linkname = entry.target
    else:
        info.size = len(entry.data)
    return info, entry.data


def layer_tar(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as layer:
        for info, data in members:
            layer.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return buffer.getvalue()


def with_parents(entries: list[Entry]) -> list[Entry]:
    """Add the directories above each store entry, as `Path.rglob` lists them, sorted."""
    by_path = {entry.path: entry for entry in entries}
    for entry in entries:
        parts = entry.path.split("/")
        for depth in range(3, len(parts)):
            by_path.setdefault("/".join(parts[:depth]), directory("/".join(parts[:depth])))
    return [by_path[path] for path in sorted(by_path)]


def store_layer(entries: list[Entry], mtime: int) -> bytes:
    """A layer as `archive_paths_to` writes it: absolute names, /nix and /nix/store first."""
    roots = [Entry("nix", "dir", mode=0o755), Entry("nix/store", "dir", mode=0o755)]
    members = roots + with_parents(entries)
    return layer_tar([tar_member(e, "/" + e.path, mtime) for e in members])


def customisation_layer(entries: list[Entry], mtime: int) -> bytes:
    """A layer as `tar --sort name -cf layer.tar .` writes it: names below ./, root included."""
    members = [tar_member(Entry(".", "dir", mode=0o755), "./", mtime)]
    for entry in sorted(entries, key=lambda e: e.path):
        suffix = "/" if entry.kind == "dir" else ""
        members.append(tar_member(entry, f"./{entry.path}{suffix}", mtime))
    return layer_tar(members)


@dataclass(frozen=True)
class Image:
    """The parts of an image archive that a test may change."""

    expect: dict[str, Any]
    store: list[Entry] = field(default_factory=store_entries)
    root: list[Entry] = field(default_factory=customisation_entries)
    created: object = "1970-01-01T00:00:01+00:00"
    user: str = "10001:10001"
    store_mtime: int = STORE_MTIME
    customisation_mtime: int = SOURCE_DATE_EPOCH
    repo_tag: str = "mcp-server-suite:local"

    def configuration(self, layers: list[bytes]) -> dict[str, Any]:
        env = [f"{name}={value}" for name, value in self.expect["environment"].items()]
        return {
            "created": self.created,
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Entrypoint": [f"{PYTHON_ENV}/bin/python3.13", "-m", self.expect["module"]],
                "Env": env,
                "Labels": self.expect["labels"],
                "StopSignal": self.expect["stopSignal"],
                "User": self.user,
                "WorkingDir": "/",
            },
            "rootfs": {
                "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}" for layer in layers],
                "type": "layers",
            },
            "history": [{"created": self.created, "comment": "store paths"} for _ in layers],
        }

    def archive(self) -> bytes:
        """The image as stream_layered_image.py streams it, uncompressed."""
        layers = [
            store_layer(self.store, self.store_mtime),
            customisation_layer(self.root, self.customisation_mtime),
        ]
        config = json.dumps(self.configuration(layers), indent=4).encode()
        config_name = f"{hashlib.sha256(config).hexdigest()}.json"
        layer_names = [f"{hashlib.sha256(layer).hexdigest()}/layer.tar" for layer in layers]
        manifest = [{"Config": config_name, "RepoTags": [self.repo_tag], "Layers": layer_names}]
        members = [*zip(layer_names, layers, strict=True), (config_name, config)]
        members.append(("manifest.json", json.dumps(manifest, indent=4).encode()))
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as outer:
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = self.store_mtime
                outer.addfile(info, io.BytesIO(data))
        return buffer.getvalue()

    def write(self, directory: Path, *, compressed: bool = False) -> Path:
        data = self.archive()
        if compressed:
            # buildLayeredImage pipes the stream through `pigz -nT`: no name, no time.
            data = gzip.compress(data, mtime=0)
        path = directory / ("image.tar.gz" if compressed else "image.tar")
        path.write_bytes(data)
        return path


@dataclass(frozen=True)
class Verdict:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def expect() -> dict[str, Any]:
    return image_config()


@pytest.fixture
def image(expect: dict[str, Any]) -> Image:
    return Image(expect=expect)


def inspect(image: Image, tmp_path: Path, *options: str, compressed: bool = False) -> Verdict:
    expectations = tmp_path / "image-config.json"
    expectations.write_text(json.dumps(image.expect), encoding="utf-8")
    archive = image.write(tmp_path, compressed=compressed)
    result = subprocess.run(
        [sys.executable, str(CHECKER), *options, "--expect", str(expectations), str(archive)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return Verdict(result.returncode, result.stdout, result.stderr)


def assert_only_finding(verdict: Verdict, text: str) -> None:
    assert verdict.returncode == 1, verdict
    assert "1 finding(s):" in verdict.stderr, verdict.stderr
    assert text in verdict.stderr, verdict.stderr


# The image as nixpkgs builds it passes, in both archive forms and with the time check.


@pytest.mark.parametrize("compressed", [False, True], ids=["docker-save", "nix-build"])
@pytest.mark.parametrize("options", [(), ("--check-times",)], ids=["plain", "check-times"])
def test_the_image_as_dockertools_writes_it_passes(
    image: Image, tmp_path: Path, compressed: bool, options: tuple[str, ...]
) -> None:
    verdict = inspect(image, tmp_path, *options, compressed=compressed)
    assert verdict.returncode == 0, verdict.stderr
    assert "no shell, no package manager, configuration as expected" in verdict.stdout
    assert f"  {PYTHON_ENV}" in verdict.stdout


def test_the_expected_time_is_written_with_z_and_read_back_with_an_offset(
    expect: dict[str, Any],
) -> None:
    # The certain failure this check once had: a string comparison of these two.
    assert expect["created"] == "1970-01-01T00:00:01Z"
    assert Image(expect=expect).created == "1970-01-01T00:00:01+00:00"


# Each kind of defect fails the check, with a finding that names it.


@pytest.mark.parametrize(
    "created",
    ["1970-01-01T00:00:02+00:00", "2026-06-01T12:00:00+00:00", "1970-01-01T00:00:01"],
    ids=["one-second-later", "build-time", "no-offset"],
)
def test_another_creation_time_fails(image: Image, tmp_path: Path, created: str) -> None:
    verdict = inspect(replace(image, created=created), tmp_path)
    assert verdict.returncode == 1, verdict
    assert f"created is {created!r}, expected the instant 1970-01-01T00:00:01Z" in verdict.stderr
    assert "history[0].created" in verdict.stderr


@pytest.mark.parametrize(
    ("extra", "finding"),
    [
        (
            # The store path alone, even without a bin directory: libraries of a shell.
            [Entry("nix/store/" + "5" * 32 + "-bash-5.3p3/lib/bash/loadables.h")],
            "forbidden store path in the image: /nix/store/" + "5" * 32 + "-bash-5.3p3",
        ),
        (
            [Entry(f"{PYTHON_ENV.lstrip('/')}/bin/sh", mode=0o555)],
            f"forbidden program in the image: {PYTHON_ENV}/bin/sh",
        ),
        (
            [directory(f"{PYTHON.lstrip('/')}/lib/python3.13/site-packages/pip")],
            f"package installer in the image: {PYTHON}/lib/python3.13/site-packages/pip",
        ),
    ],
    ids=["bash-store-path", "sh-in-a-bin-directory", "pip"],
)
def test_a_shell_or_installer_in_a_store_layer_fails(
    image: Image, tmp_path: Path, extra: list[Entry], finding: str
) -> None:
    assert_only_finding(inspect(replace(image, store=[*image.store, *extra]), tmp_path), finding)


def test_a_shell_in_the_customisation_layer_fails(image: Image, tmp_path: Path) -> None:
    shell = [directory("bin", 0o755), Entry("bin/sh", mode=0o555)]
    verdict = inspect(replace(image, root=[*image.root, *shell]), tmp_path)
    assert verdict.returncode == 1
    assert "forbidden program in the image: /bin/sh" in verdict.stderr
    assert "unexpected entry at the image root: /bin" in verdict.stderr


def test_cacerts_setup_hook_at_the_root_fails(image: Image, tmp_path: Path) -> None:
    # What `contents = [ cacert ]` did: the package's nix-support/ copied to the root.
    hook = [directory("nix-support", 0o755), Entry("nix-support/setup-hook")]
    verdict = inspect(replace(image, root=[*image.root, *hook]), tmp_path)
    assert_only_finding(verdict, "unexpected entry at the image root: /nix-support")


@pytest.mark.parametrize(
    "user",
    ["0:0", "10002:10001", "10001:0", "10001"],
    ids=["root", "other-uid", "root-group", "no-group"],
)
def test_a_wrong_user_fails(image: Image, tmp_path: Path, user: str) -> None:
    verdict = inspect(replace(image, user=user), tmp_path)
    assert_only_finding(verdict, f"User is {user!r}, expected '10001:10001'")


def test_an_account_file_without_the_servers_uid_fails(image: Image, tmp_path: Path) -> None:
    passwd = Entry("etc/passwd", data=b"root:x:0:0:root:/var/empty:/sbin/nologin\n")
    root = [passwd if entry.path == "etc/passwd" else entry for entry in image.root]
    verdict = inspect(replace(image, root=root), tmp_path)
    assert_only_finding(verdict, "/etc/passwd has no entry for uid 10001")


def test_a_setuid_file_fails(image: Image, tmp_path: Path) -> None:
    setuid = Entry(f"{PYTHON.lstrip('/')}/lib/helper", mode=0o4555)
    verdict = inspect(replace(image, store=[*image.store, setuid]), tmp_path)
    assert_only_finding(verdict, f"setuid or setgid file: {PYTHON}/lib/helper")


@pytest.mark.parametrize(
    "store",
    [
        [e for e in store_entries() if e.path != f"{CACERT.lstrip('/')}/{BUNDLE}"],
        [*store_entries(), link(f"{CACERT.lstrip('/')}/loop", f"{CACERT}/loop")],
    ],
    ids=["dangling", "loop"],
)
def test_a_ca_bundle_that_does_not_resolve_fails(
    image: Image, tmp_path: Path, store: list[Entry]
) -> None:
    root = image.root
    if any(entry.path.endswith("/loop") for entry in store):
        root = [link(BUNDLE, f"{CACERT}/loop") if e.path == BUNDLE else e for e in root]
    verdict = inspect(replace(image, store=store, root=root), tmp_path)
    assert_only_finding(verdict, f"SSL_CERT_FILE /{BUNDLE} does not resolve to a file")


def test_a_missing_data_directory_fails(image: Image, tmp_path: Path) -> None:
    root = [entry for entry in image.root if entry.path != "safe_data_dir"]
    assert_only_finding(
        inspect(replace(image, root=root), tmp_path), "the directory /safe_data_dir is missing"
    )


def test_a_wrong_tag_fails(image: Image, tmp_path: Path) -> None:
    verdict = inspect(replace(image, repo_tag="mcp-server-suite:latest"), tmp_path)
    assert_only_finding(verdict, "expected 'mcp-server-suite:local'")


@pytest.mark.parametrize(
    ("store_mtime", "customisation_mtime", "finding"),
    [
        (2, SOURCE_DATE_EPOCH, "/nix has mtime 2, expected the store time 1"),
        (STORE_MTIME, 1, "/etc has mtime 1, expected the customisation time 315532800"),
    ],
    ids=["store-layer", "customisation-layer"],
)
def test_an_entry_off_its_fixed_time_fails_the_time_check(
    image: Image, tmp_path: Path, store_mtime: int, customisation_mtime: int, finding: str
) -> None:
    changed = replace(image, store_mtime=store_mtime, customisation_mtime=customisation_mtime)
    assert inspect(changed, tmp_path).returncode == 0
    verdict = inspect(changed, tmp_path, "--check-times")
    assert verdict.returncode == 1
    assert finding in verdict.stderr


def test_one_late_file_fails_the_time_check(image: Image, tmp_path: Path) -> None:
    late = replace(image.store[2], mtime=SOURCE_DATE_EPOCH)
    store = [late if entry.path == late.path else entry for entry in image.store]
    verdict = inspect(replace(image, store=store), tmp_path, "--check-times")
    assert_only_finding(verdict, f"{PYTHON_ENV}/bin/python3.13 has mtime 315532800")


# Properties: the classes of input, not only the lines above.


def load_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("inspect_image", CHECKER)
    if spec is None or spec.loader is None:
        raise AssertionError(f"cannot load {CHECKER}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


CHECK: Final = load_checker()
EXPECT: Final = image_config()


@dataclass(frozen=True)
class Opened:
    config: dict[str, Any]
    layers: Any


def opened(image: Image) -> Opened:
    """Read an in-memory archive the way the checker's main does."""
    with tarfile.open(fileobj=io.BytesIO(image.archive()), mode="r:") as archive:
        manifest = CHECK.read_json(archive, "manifest.json")[0]
        config = CHECK.read_json(archive, manifest["Config"])
        return Opened(config, CHECK.read_layers(archive, list(manifest["Layers"])))


REFERENCE: Final = opened(Image(expect=EXPECT))


def extended(extra: list[Entry], *, in_store: bool) -> Any:
    """The reference image's layers with one more layer on top, read by the checker.

    The checker merges layers in order, so one small layer over the reference stands for an
    image that holds the extra entries, at a fraction of the cost of writing it whole.
    """
    layer = store_layer(extra, STORE_MTIME) if in_store else customisation_layer(extra, 1)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as outer:
        info = tarfile.TarInfo("extra/layer.tar")
        info.size = len(layer)
        outer.addfile(info, io.BytesIO(layer))
    buffer.seek(0)
    with tarfile.open(fileobj=buffer, mode="r:") as archive:
        top = CHECK.read_layers(archive, ["extra/layer.tar"])
    return CHECK.Layers(
        entries={**REFERENCE.layers.entries, **top.entries},
        store_paths=REFERENCE.layers.store_paths | top.store_paths,
    )


FIXED: Final = datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)


def offsets() -> st.SearchStrategy[timezone]:
    minutes = st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59)
    return minutes.map(lambda m: timezone(timedelta(minutes=m)))


def settings_findings(created: object) -> list[str]:
    config = {**REFERENCE.config, "created": created, "history": []}
    findings: list[str] = CHECK.check_settings(config, REFERENCE.layers, EXPECT)
    return findings


@given(offsets(), st.sampled_from(["seconds", "microseconds"]))
def test_the_fixed_instant_passes_in_any_offset(zone: timezone, precision: str) -> None:
    text = FIXED.astimezone(zone).isoformat(timespec=precision)
    assert settings_findings(text) == []


@given(
    st.datetimes(
        # Hypothesis takes naive bounds and draws the offset from `timezones`.
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=offsets(),
    ).filter(lambda moment: moment != FIXED)
)
def test_any_other_instant_fails(moment: datetime) -> None:
    findings = settings_findings(moment.isoformat())
    assert [f for f in findings if f.startswith("created is")], findings


@given(st.one_of(st.none(), st.integers(), st.text(max_size=40)))
def test_anything_but_a_time_fails(created: object) -> None:
    findings = settings_findings(created)
    assert [f for f in findings if f.startswith("created is")], findings


def bin_directories() -> st.SearchStrategy[str]:
    at_root = st.sampled_from(["bin", "sbin", "usr/bin", "usr/local/sbin"])
    in_store = st.sampled_from([PYTHON_ENV, PYTHON, CACERT]).flatmap(
        lambda prefix: st.sampled_from(["bin", "sbin", "libexec/x/bin"]).map(
            lambda tail: f"{prefix.lstrip('/')}/{tail}"
        )
    )
    return st.one_of(at_root, in_store)


def program_names() -> st.SearchStrategy[str]:
    pips = st.from_regex(r"pip[0-9.]{0,4}", fullmatch=True)
    return st.one_of(st.sampled_from(sorted(CHECK.FORBIDDEN_PROGRAMS)), pips)


@given(bin_directories(), program_names(), st.sampled_from(["file", "symlink"]))
def test_a_forbidden_program_in_any_bin_directory_is_found(
    where: str, name: str, kind: Literal["file", "symlink"]
) -> None:
    program = Entry(f"{where}/{name}", kind, mode=0o555, target="/nowhere")
    layers = extended([program], in_store=where.startswith("nix/"))
    findings = CHECK.check_contents(layers, EXPECT["tmpDir"])
    assert f"forbidden program in the image: /{where}/{name}" in findings


FORBIDDEN_STORE_NAMES: Final = (
    "bash-5.3p3",
    "busybox-1.37.0",
    "coreutils-9.8",
    "python3.13-pip-25.2",
)
NIX_BASE32: Final = "0123456789abcdfghijklmnpqrsvwxyz"


@given(st.sampled_from(FORBIDDEN_STORE_NAMES), st.text(NIX_BASE32, min_size=32, max_size=32))
def test_a_forbidden_store_path_is_found_under_any_hash(name: str, digest: str) -> None:
    path = f"nix/store/{digest}-{name}"
    findings = CHECK.check_contents(extended([directory(path)], in_store=True), EXPECT["tmpDir"])
    assert f"forbidden store path in the image: /{path}" in findings


@given(st.from_regex(r"[a-z][a-z0-9_.-]{0,15}", fullmatch=True))
def test_any_other_root_entry_is_found(name: str) -> None:
    allowed = {"etc", "nix", "safe_data_dir", "tmp"}
    findings = CHECK.check_root(extended([directory(name)], in_store=False), EXPECT)
    assert findings == ([] if name in allowed else [f"unexpected entry at the image root: /{name}"])
