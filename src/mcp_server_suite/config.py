"""Start-up configuration: every `MCP_*` variable, parsed and validated once.

Rules:

1. Every setting comes from the environment and is validated before the server reads a
   byte. An invalid value stops the server; nothing is silently replaced by a default.
2. A `ConfigError` names the variable, what it accepts and (except for secrets) the value
   that was refused, in one line an operator can act on.
3. The DSN is a secret: it is held as a `SecretStr`, never printed, never in a repr, never in
   an error message. It can come from `MCP_SQL_DSN` or from the file `MCP_SQL_DSN_FILE` names
   (the form that systemd credentials and container secrets use), never from both.
"""

import logging
import math
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, NoReturn, TypeAlias, TypeVar

__all__ = [
    "AUDIT_KEYWORDS",
    "ENV_PREFIX",
    "KNOWN_VARIABLES",
    "ConfigError",
    "SecretStr",
    "Settings",
    "probable_variables",
    "unknown_variable_warning",
    "unknown_variables",
]

ENV_PREFIX: Final = "MCP_"

# A DSN file holds one line; 64 KiB is far beyond any real connection string and stops a
# misconfigured path (a device, a log file) from being read without bound.
MAX_DSN_FILE_BYTES: Final = 64 * 1024

# PostgreSQL truncates application_name to NAMEDATALEN - 1 = 63 bytes.
MAX_APPLICATION_NAME: Final = 63

# The bytes of row text one SQL call may receive: 4 KiB still holds a useful row; 16 MiB keeps
# a response (four times the bound, `tools/sql/values.py`) far below the container's memory.
MIN_RESULT_BYTES: Final = 4_096
MAX_RESULT_BYTES: Final = 16_777_216

# Extensions whose functions act outside a rolled-back read-only transaction (they open
# connections or touch server files), which MCP_SQL_TRUSTED_EXTENSIONS therefore refuses.
UNTRUSTABLE_EXTENSIONS: Final = frozenset({"adminpack", "dblink", "file_fdw", "postgres_fdw"})

# PostgreSQL identifiers are at most 63 bytes; schema and function names are checked against
# this shape so they can be quoted into `search_path` without escaping.
_PG_IDENTIFIER: Final = re.compile(r"[a-z_][a-z0-9_$]{0,62}")
_PG_QUALIFIED_NAME: Final = re.compile(r"(?:[a-z_][a-z0-9_$]{0,62}\.)?[a-z_][a-z0-9_$]{0,62}")

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})
_LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

T = TypeVar("T")

# MCP_AUDIT_LOG's destinations other than a file path; see `audit.sinks`.
AUDIT_KEYWORDS: Final = ("stderr", "off", "journal")
AuditArguments: TypeAlias = Literal["digest", "full"]
_AUDIT_ARGUMENTS: Final[Mapping[str, AuditArguments]] = {"digest": "digest", "full": "full"}


class SecretStr:
    """A string that never shows itself: its repr and str are a fixed mask.

    The same contract as Pydantic's `SecretStr`, without importing Pydantic at start-up.

    Args:
        value: The secret.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        """Return the secret itself, for the one place that must use it."""
        return self._value

    def __repr__(self) -> str:
        return "SecretStr('**********')"

    def __str__(self) -> str:
        return "**********"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretStr) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> NoReturn:
        # A secret is not serialised by accident, for example into a process pool.
        raise TypeError("SecretStr cannot be pickled")


class ConfigError(ValueError):
    """A configuration variable holds a value the server will not start with.

    Args:
        variable: The environment variable's name.
        accepts: What the variable accepts, as a phrase.
        shown: The refused value as it may be shown, or None for secrets.
    """

    def __init__(self, variable: str, accepts: str, shown: str | None = None) -> None:
        value = "" if shown is None else f"={shown!r}"
        super().__init__(f"{variable}{value}: expected {accepts}")
        self.variable = variable


@dataclass(frozen=True, slots=True)
class Settings:
    """The validated configuration. Field defaults are the documented defaults."""

    sql_dsn: SecretStr | None = None
    sql_connect_timeout: float = 5.0
    sql_query_timeout: float = 10.0
    sql_pool_max_size: int = 4
    sql_application_name: str = "mcp-server-suite"
    sql_schemas: tuple[str, ...] = ("public",)
    sql_allowed_functions: frozenset[str] = field(default_factory=frozenset)
    sql_trusted_extensions: tuple[str, ...] = ()
    sql_max_result_bytes: int = 1_048_576
    safe_data_dir: Path | None = None
    fs_cross_mounts: bool = False
    metrics_enabled: bool = True
    metrics_cpu_sample_seconds: float = 0.1
    metrics_disk_path: Path = Path("/")
    max_concurrent_tools: int = 16
    tool_acquire_timeout_seconds: float = 5.0
    tool_timeout_seconds: float = 30.0
    max_argument_depth: int = 8
    max_argument_items: int = 1000
    log_level: str = "WARNING"
    audit_log: str | Path = "stderr"
    audit_arguments: AuditArguments = "digest"
    audit_required: bool = False

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> "Settings":
        """Parse and validate every setting.

        Args:
            environ: The environment to read; `os.environ` when None.

        Returns:
            The settings.

        Raises:
            ConfigError: A variable holds a value outside what it accepts, or the DSN file
                cannot be read.
        """
        env = os.environ if environ is None else environ
        defaults = cls()
        audit_log, audit_arguments, audit_required = _audit_settings(env)

        def get(name: str, parse: Callable[[str, str], T], default: T) -> T:
            raw = env.get(name)
            return default if raw is None else parse(name, raw)

        return cls(
            sql_dsn=_read_dsn(env),
            sql_connect_timeout=get(
                "MCP_SQL_CONNECT_TIMEOUT", _seconds(0, 60), defaults.sql_connect_timeout
            ),
            sql_query_timeout=get(
                "MCP_SQL_QUERY_TIMEOUT", _seconds(0, 300), defaults.sql_query_timeout
            ),
            sql_pool_max_size=get(
                "MCP_SQL_POOL_MAX_SIZE", _integer(1, 32), defaults.sql_pool_max_size
            ),
            sql_application_name=get(
                "MCP_SQL_APPLICATION_NAME", _application_name, defaults.sql_application_name
            ),
            sql_schemas=get("MCP_SQL_SCHEMAS", _schema_list, defaults.sql_schemas),
            sql_allowed_functions=get(
                "MCP_SQL_ALLOWED_FUNCTIONS", _function_set, defaults.sql_allowed_functions
            ),
            sql_trusted_extensions=get(
                "MCP_SQL_TRUSTED_EXTENSIONS", _extension_list, defaults.sql_trusted_extensions
            ),
            sql_max_result_bytes=get(
                "MCP_SQL_MAX_RESULT_BYTES",
                _integer(MIN_RESULT_BYTES, MAX_RESULT_BYTES),
                defaults.sql_max_result_bytes,
            ),
            safe_data_dir=get("MCP_SAFE_DATA_DIR", _existing_directory, None),
            fs_cross_mounts=get("MCP_FS_CROSS_MOUNTS", _boolean, defaults.fs_cross_mounts),
            metrics_enabled=get("MCP_METRICS_ENABLED", _boolean, defaults.metrics_enabled),
            metrics_cpu_sample_seconds=get(
                "MCP_METRICS_CPU_SAMPLE_SECONDS",
                _seconds(0, 2),
                defaults.metrics_cpu_sample_seconds,
            ),
            metrics_disk_path=get(
                "MCP_METRICS_DISK_PATH", _absolute_path, defaults.metrics_disk_path
            ),
            max_concurrent_tools=get(
                "MCP_MAX_CONCURRENT_TOOLS", _integer(1, 256), defaults.max_concurrent_tools
            ),
            tool_acquire_timeout_seconds=get(
                "MCP_TOOL_ACQUIRE_TIMEOUT_SECONDS",
                _seconds(0, 60, zero_ok=True),
                defaults.tool_acquire_timeout_seconds,
            ),
            tool_timeout_seconds=get(
                "MCP_TOOL_TIMEOUT_SECONDS", _seconds(0, 600), defaults.tool_timeout_seconds
            ),
            max_argument_depth=get(
                "MCP_MAX_ARGUMENT_DEPTH", _integer(1, 64), defaults.max_argument_depth
            ),
            max_argument_items=get(
                "MCP_MAX_ARGUMENT_ITEMS", _integer(1, 100_000), defaults.max_argument_items
            ),
            log_level=get("MCP_SERVER_SUITE_LOG_LEVEL", _log_level, defaults.log_level),
            audit_log=audit_log,
            audit_arguments=audit_arguments,
            audit_required=audit_required,
        )

    @property
    def log_level_number(self) -> int:
        """The `logging` level number of `log_level`."""
        return logging.getLevelNamesMapping()[self.log_level]


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """Return the `MCP_*` variables that are set but mean nothing to this server.

    A misspelt variable would otherwise leave a control at its default without a word. The
    prefix is matched in any case (`mcp_sql_dsn` is a mistake too: names are case-sensitive).

    Args:
        environ: The environment.

    Returns:
        The unknown names, sorted.
    """
    return sorted(
        name
        for name in environ
        if name[: len(ENV_PREFIX)].upper() == ENV_PREFIX and name not in KNOWN_VARIABLES
    )


# A misspelt name is matched to the known names within this many edits (an insertion, a
# deletion, a substitution or two adjacent characters swapped), and within one edit per
# `_CHARS_PER_EDIT` characters of the name, so that a short unrelated name is not matched by
# accident: a slip of the hand is one or two edits, a different variable is many more.
MAX_SUGGESTION_EDITS: Final = 3
_CHARS_PER_EDIT: Final = 5


def _edits(a: str, b: str) -> int:
    # The optimal-string-alignment distance: Levenshtein's, with a swap of two adjacent
    # characters counted as one edit.
    previous: list[int] = []
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        before, previous, row = previous, row, [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], before[j - 2] + 1)
    return row[len(b)]


def probable_variables(name: str) -> tuple[str, ...]:
    """Return the known variables an unknown name was probably meant to be.

    Names are compared in upper case. Closest first: a known name's words (between
    underscores) in another order; then a known name within a few edits (the fewest win);
    then a known name with one word more or one word less (`MCP_SQL_POOL_SIZE` for
    `MCP_SQL_POOL_MAX_SIZE`). Several names are returned only when they are equally close.

    Args:
        name: An unknown `MCP_*` name.

    Returns:
        The closest known names, sorted; empty when none is close.
    """
    wanted = name.upper()
    words = wanted.split("_")
    scored: list[tuple[int, str]] = []
    for known in KNOWN_VARIABLES:
        known_words = known.split("_")
        if sorted(known_words) == sorted(words):
            scored.append((0, known))
            continue
        edits = _edits(wanted, known)
        if edits <= min(MAX_SUGGESTION_EDITS, max(1, len(known) // _CHARS_PER_EDIT)):
            scored.append((edits, known))
        elif _one_word_apart(words, known_words):
            scored.append((MAX_SUGGESTION_EDITS + 1, known))
    if not scored:
        return ()
    best = min(edits for edits, _ in scored)
    return tuple(sorted(known for edits, known in scored if edits == best))


def _one_word_apart(words: list[str], known: list[str]) -> bool:
    # One list is the other with one word added, both with at least two words after MCP.
    shorter, longer = sorted((words, known), key=len)
    if len(longer) != len(shorter) + 1 or len(shorter) < 3:
        return False
    return any(longer[:i] + longer[i + 1 :] == shorter for i in range(len(longer)))


def unknown_variable_warning(name: str) -> str:
    """Return the one line that reports an unknown variable, naming the one probably meant.

    Args:
        name: An unknown `MCP_*` name (`unknown_variables`).

    Returns:
        "ignoring unknown configuration variable X", with "; did you mean Y?" when a known
        name is close.
    """
    line = f"ignoring unknown configuration variable {name}"
    meant = probable_variables(name)
    if meant:
        line += "; did you mean " + " or ".join(meant) + "?"
    return line


KNOWN_VARIABLES: Final = frozenset(
    {
        "MCP_SQL_DSN",
        "MCP_SQL_DSN_FILE",
        "MCP_SQL_CONNECT_TIMEOUT",
        "MCP_SQL_QUERY_TIMEOUT",
        "MCP_SQL_POOL_MAX_SIZE",
        "MCP_SQL_APPLICATION_NAME",
        "MCP_SQL_SCHEMAS",
        "MCP_SQL_ALLOWED_FUNCTIONS",
        "MCP_SQL_TRUSTED_EXTENSIONS",
        "MCP_SQL_MAX_RESULT_BYTES",
        "MCP_SAFE_DATA_DIR",
        "MCP_FS_CROSS_MOUNTS",
        "MCP_METRICS_ENABLED",
        "MCP_METRICS_CPU_SAMPLE_SECONDS",
        "MCP_METRICS_DISK_PATH",
        "MCP_MAX_CONCURRENT_TOOLS",
        "MCP_TOOL_ACQUIRE_TIMEOUT_SECONDS",
        "MCP_TOOL_TIMEOUT_SECONDS",
        "MCP_MAX_ARGUMENT_DEPTH",
        "MCP_MAX_ARGUMENT_ITEMS",
        "MCP_SERVER_SUITE_LOG_LEVEL",
        "MCP_AUDIT_LOG",
        "MCP_AUDIT_ARGUMENTS",
        "MCP_AUDIT_REQUIRED",
    }
)


def _seconds(low: float, high: float, *, zero_ok: bool = False) -> Callable[[str, str], float]:
    lower = f">= {low:g}" if zero_ok else f"> {low:g}"
    accepts = f"a number of seconds {lower} and <= {high:g}"

    def parse(name: str, raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ConfigError(name, accepts, raw) from None
        in_range = (low <= value if zero_ok else low < value) and value <= high
        if not (math.isfinite(value) and in_range):
            raise ConfigError(name, accepts, raw)
        return value

    return parse


def _integer(low: int, high: int) -> Callable[[str, str], int]:
    accepts = f"an integer from {low} to {high}"

    def parse(name: str, raw: str) -> int:
        text = raw.strip()
        # int() would also take '1_000' and '+5'; only plain decimal digits are accepted.
        if not text.isascii() or not text.isdigit():
            raise ConfigError(name, accepts, raw)
        value = int(text)
        if not low <= value <= high:
            raise ConfigError(name, accepts, raw)
        return value

    return parse


def _boolean(name: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(name, "a boolean: true/false, 1/0, yes/no or on/off", raw)


def _log_level(name: str, raw: str) -> str:
    text = raw.strip().upper()
    if text not in _LOG_LEVELS:
        raise ConfigError(name, f"a logging level name: {', '.join(_LOG_LEVELS)}", raw)
    return text


def _application_name(name: str, raw: str) -> str:
    accepts = f"1 to {MAX_APPLICATION_NAME} printable ASCII characters"
    if not (1 <= len(raw) <= MAX_APPLICATION_NAME and raw.isascii() and raw.isprintable()):
        raise ConfigError(name, accepts, raw)
    return raw


def _absolute_path(name: str, raw: str) -> Path:
    if "\x00" in raw or not os.path.isabs(raw):
        raise ConfigError(name, "an absolute path", raw)
    return Path(raw)


def _existing_directory(name: str, raw: str) -> Path:
    path = _absolute_path(name, raw)
    if not path.is_dir():
        raise ConfigError(name, "an absolute path to an existing directory", raw)
    return path


def _identifier_list(name: str, raw: str, shape: re.Pattern[str], accepts: str) -> list[str]:
    items = [item.strip() for item in raw.split(",") if item.strip()]
    if not all(shape.fullmatch(item) for item in items):
        raise ConfigError(name, accepts, raw)
    return items


def _schema_list(name: str, raw: str) -> tuple[str, ...]:
    accepts = "a comma-separated list of one or more lower-case PostgreSQL schema names"
    schemas = _identifier_list(name, raw, _PG_IDENTIFIER, accepts)
    if not schemas or "pg_catalog" in schemas:
        # pg_catalog always comes first and is never listed again.
        raise ConfigError(name, accepts + " other than pg_catalog", raw)
    return tuple(dict.fromkeys(schemas))


def _function_set(name: str, raw: str) -> frozenset[str]:
    # The denylist is data only (no SQL stack loads with it); it is read here, once the
    # variable is set, so that a denied name stops the server at start-up.
    from mcp_server_suite.tools.sql.functions import denial_reason  # noqa: PLC0415

    accepts = "a comma-separated list of lower-case function names, optionally schema-qualified"
    functions = frozenset(_identifier_list(name, raw, _PG_QUALIFIED_NAME, accepts))
    for entry in sorted(functions):
        if denial_reason(entry.rpartition(".")[2]) is not None:
            raise ConfigError(
                name,
                "functions the denylist allows (it names functions that act outside a "
                "read-only transaction)",
                entry,
            )
    return functions


def _extension_list(name: str, raw: str) -> tuple[str, ...]:
    accepts = "a comma-separated list of lower-case extension names"
    extensions = _identifier_list(name, raw, _PG_IDENTIFIER, accepts)
    for extension in extensions:
        if extension in UNTRUSTABLE_EXTENSIONS:
            raise ConfigError(
                name,
                "extensions whose code stays within a read-only transaction (adminpack, "
                "dblink, file_fdw and postgres_fdw reach outside it)",
                extension,
            )
    return tuple(dict.fromkeys(extensions))


def _valid_dsn(name: str, dsn: str) -> SecretStr:
    accepts = "a postgres:// or postgresql:// URI without whitespace or control characters"
    scheme, sep, rest = dsn.partition("://")
    if (
        not sep
        or scheme not in {"postgres", "postgresql"}
        or not rest
        or not dsn.isprintable()
        or any(ch.isspace() for ch in dsn)
    ):
        # The value is a secret: the message names the variable and never shows the value.
        raise ConfigError(name, accepts)
    return SecretStr(dsn)


def _read_dsn(env: Mapping[str, str]) -> SecretStr | None:
    inline = env.get("MCP_SQL_DSN")
    path = env.get("MCP_SQL_DSN_FILE")
    if inline is not None and path is not None:
        raise ConfigError("MCP_SQL_DSN_FILE", "to be unset when MCP_SQL_DSN is set (use one)")
    if inline is not None:
        return _valid_dsn("MCP_SQL_DSN", inline)
    if path is None:
        return None
    file_path = _absolute_path("MCP_SQL_DSN_FILE", path)
    accepts = "a readable regular file holding the DSN"
    try:
        # Non-blocking, so a FIFO or a device named by mistake cannot hang start-up; the
        # type is checked on the open descriptor, not on the name.
        fd = os.open(file_path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        raise ConfigError("MCP_SQL_DSN_FILE", accepts, path) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError("MCP_SQL_DSN_FILE", accepts, path)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_DSN_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_DSN_FILE_BYTES:
        raise ConfigError("MCP_SQL_DSN_FILE", f"a file of at most {MAX_DSN_FILE_BYTES} bytes", path)
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError("MCP_SQL_DSN_FILE", "a UTF-8 file holding the DSN", path) from None
    return _valid_dsn("MCP_SQL_DSN_FILE", text)


def _audit_settings(env: Mapping[str, str]) -> tuple[str | Path, AuditArguments, bool]:
    log = env.get("MCP_AUDIT_LOG", "stderr")
    destination: str | Path
    if log in AUDIT_KEYWORDS:
        destination = log
    elif "\x00" not in log and os.path.isabs(log):
        destination = Path(log)
    else:
        raise ConfigError("MCP_AUDIT_LOG", "stderr, off, journal or an absolute file path", log)
    raw_arguments = env.get("MCP_AUDIT_ARGUMENTS", "digest")
    arguments = _AUDIT_ARGUMENTS.get(raw_arguments)
    if arguments is None:
        raise ConfigError("MCP_AUDIT_ARGUMENTS", "digest or full", raw_arguments)
    raw_required = env.get("MCP_AUDIT_REQUIRED")
    required = raw_required is not None and _boolean("MCP_AUDIT_REQUIRED", raw_required)
    if required and destination == "off":
        # Refusing every call would be the only way to honour both: say so at start-up.
        raise ConfigError("MCP_AUDIT_REQUIRED", "false when MCP_AUDIT_LOG=off", raw_required)
    return destination, arguments, required
