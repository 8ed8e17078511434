"""Configuration: every variable validated at start-up, secrets never shown."""

import os
import pickle
from pathlib import Path
from typing import Final

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from mcp_server_suite.config import (
    KNOWN_VARIABLES,
    MAX_DSN_FILE_BYTES,
    ConfigError,
    SecretStr,
    Settings,
    probable_variables,
    unknown_variable_warning,
    unknown_variables,
)

# A made-up password: the tests prove it never appears in any message.
FAKE_PASSWORD = "hunter2"  # noqa: S105  # hygiene: allow-secret-fixture


def test_defaults_match_the_design_document() -> None:
    settings = Settings.from_environ({})
    assert settings == Settings()
    assert settings.sql_dsn is None
    assert settings.sql_connect_timeout == 5
    assert settings.sql_query_timeout == 10
    assert settings.sql_pool_max_size == 4
    assert settings.sql_application_name == "mcp-server-suite"
    assert settings.sql_schemas == ("public",)
    assert settings.sql_allowed_functions == frozenset()
    assert settings.sql_trusted_extensions == ()
    assert settings.sql_max_result_bytes == 1_048_576
    assert settings.safe_data_dir is None
    assert settings.fs_cross_mounts is False
    assert settings.metrics_enabled is True
    assert settings.metrics_cpu_sample_seconds == 0.1
    assert settings.metrics_disk_path == Path("/")
    assert settings.max_concurrent_tools == 16
    assert settings.tool_acquire_timeout_seconds == 5
    assert settings.tool_timeout_seconds == 30
    assert settings.max_argument_depth == 8
    assert settings.max_argument_items == 1000
    assert settings.log_level == "WARNING"
    assert settings.log_level_number == 30


VALID = [
    ("MCP_SQL_CONNECT_TIMEOUT", "60", "sql_connect_timeout", 60.0),
    ("MCP_SQL_CONNECT_TIMEOUT", " 0.5 ", "sql_connect_timeout", 0.5),
    ("MCP_SQL_QUERY_TIMEOUT", "300", "sql_query_timeout", 300.0),
    ("MCP_SQL_POOL_MAX_SIZE", "1", "sql_pool_max_size", 1),
    ("MCP_SQL_POOL_MAX_SIZE", "32", "sql_pool_max_size", 32),
    ("MCP_SQL_APPLICATION_NAME", "a" * 63, "sql_application_name", "a" * 63),
    ("MCP_SQL_SCHEMAS", "reporting, public,reporting", "sql_schemas", ("reporting", "public")),
    (
        "MCP_SQL_ALLOWED_FUNCTIONS",
        "st_area, postgis.st_x",
        "sql_allowed_functions",
        frozenset({"st_area", "postgis.st_x"}),
    ),
    ("MCP_SQL_ALLOWED_FUNCTIONS", "", "sql_allowed_functions", frozenset()),
    (
        "MCP_SQL_TRUSTED_EXTENSIONS",
        "postgis, pg_trgm,postgis",
        "sql_trusted_extensions",
        ("postgis", "pg_trgm"),
    ),
    ("MCP_SQL_TRUSTED_EXTENSIONS", "", "sql_trusted_extensions", ()),
    ("MCP_SQL_MAX_RESULT_BYTES", "4096", "sql_max_result_bytes", 4096),
    ("MCP_SQL_MAX_RESULT_BYTES", "16777216", "sql_max_result_bytes", 16_777_216),
    ("MCP_FS_CROSS_MOUNTS", "true", "fs_cross_mounts", True),
    ("MCP_FS_CROSS_MOUNTS", "off", "fs_cross_mounts", False),
    ("MCP_METRICS_ENABLED", "false", "metrics_enabled", False),
    ("MCP_METRICS_ENABLED", "OFF", "metrics_enabled", False),
    ("MCP_METRICS_ENABLED", "0", "metrics_enabled", False),
    ("MCP_METRICS_ENABLED", "no", "metrics_enabled", False),
    ("MCP_METRICS_ENABLED", "Yes", "metrics_enabled", True),
    ("MCP_METRICS_ENABLED", "1", "metrics_enabled", True),
    ("MCP_METRICS_ENABLED", "on", "metrics_enabled", True),
    ("MCP_METRICS_ENABLED", "TRUE", "metrics_enabled", True),
    ("MCP_METRICS_CPU_SAMPLE_SECONDS", "2", "metrics_cpu_sample_seconds", 2.0),
    ("MCP_METRICS_DISK_PATH", "/tmp", "metrics_disk_path", Path("/tmp")),
    ("MCP_MAX_CONCURRENT_TOOLS", "256", "max_concurrent_tools", 256),
    ("MCP_TOOL_ACQUIRE_TIMEOUT_SECONDS", "0", "tool_acquire_timeout_seconds", 0.0),
    ("MCP_TOOL_ACQUIRE_TIMEOUT_SECONDS", "60", "tool_acquire_timeout_seconds", 60.0),
    ("MCP_TOOL_TIMEOUT_SECONDS", "600", "tool_timeout_seconds", 600.0),
    ("MCP_MAX_ARGUMENT_DEPTH", "64", "max_argument_depth", 64),
    ("MCP_MAX_ARGUMENT_ITEMS", "100000", "max_argument_items", 100_000),
    ("MCP_SERVER_SUITE_LOG_LEVEL", "debug", "log_level", "DEBUG"),
    ("MCP_SERVER_SUITE_LOG_LEVEL", "CRITICAL", "log_level", "CRITICAL"),
]


@pytest.mark.parametrize(("variable", "raw", "field", "value"), VALID)
def test_valid_values(variable: str, raw: str, field: str, value: object) -> None:
    assert getattr(Settings.from_environ({variable: raw}), field) == value


INVALID = [
    ("MCP_SQL_CONNECT_TIMEOUT", "0"),
    ("MCP_SQL_CONNECT_TIMEOUT", "60.001"),
    ("MCP_SQL_CONNECT_TIMEOUT", "-1"),
    ("MCP_SQL_CONNECT_TIMEOUT", "nan"),
    ("MCP_SQL_CONNECT_TIMEOUT", "inf"),
    ("MCP_SQL_CONNECT_TIMEOUT", "five"),
    ("MCP_SQL_CONNECT_TIMEOUT", ""),
    ("MCP_SQL_QUERY_TIMEOUT", "301"),
    ("MCP_SQL_POOL_MAX_SIZE", "0"),
    ("MCP_SQL_POOL_MAX_SIZE", "33"),
    ("MCP_SQL_POOL_MAX_SIZE", "4.0"),
    ("MCP_SQL_POOL_MAX_SIZE", "+4"),
    ("MCP_SQL_POOL_MAX_SIZE", "1_0"),
    ("MCP_SQL_POOL_MAX_SIZE", "\u0664"),
    ("MCP_SQL_POOL_MAX_SIZE", "abc"),
    ("MCP_SQL_APPLICATION_NAME", ""),
    ("MCP_SQL_APPLICATION_NAME", "a" * 64),
    ("MCP_SQL_APPLICATION_NAME", "caf\u00e9"),
    ("MCP_SQL_APPLICATION_NAME", "a\nb"),
    ("MCP_SQL_SCHEMAS", ""),
    ("MCP_SQL_SCHEMAS", "pg_catalog"),
    ("MCP_SQL_SCHEMAS", "Public"),
    ("MCP_SQL_SCHEMAS", "public; drop"),
    ("MCP_SQL_SCHEMAS", '"x"'),
    ("MCP_SQL_ALLOWED_FUNCTIONS", "pg_sleep()"),
    ("MCP_SQL_ALLOWED_FUNCTIONS", "a.b.c"),
    ("MCP_SQL_ALLOWED_FUNCTIONS", "abs,pg_sleep"),
    ("MCP_SQL_ALLOWED_FUNCTIONS", "public.dblink_exec"),
    ("MCP_SQL_ALLOWED_FUNCTIONS", "pg_catalog.lo_import"),
    ("MCP_SQL_TRUSTED_EXTENSIONS", "dblink"),
    ("MCP_SQL_TRUSTED_EXTENSIONS", "postgis, postgres_fdw"),
    ("MCP_SQL_TRUSTED_EXTENSIONS", "PostGIS"),
    ("MCP_SQL_MAX_RESULT_BYTES", "4095"),
    ("MCP_SQL_MAX_RESULT_BYTES", "16777217"),
    ("MCP_SQL_MAX_RESULT_BYTES", "1e6"),
    ("MCP_SAFE_DATA_DIR", "relative/dir"),
    ("MCP_SAFE_DATA_DIR", "/definitely/not/here"),
    ("MCP_SAFE_DATA_DIR", "/etc/hostname"),
    ("MCP_SAFE_DATA_DIR", "/tmp\x00x"),
    ("MCP_FS_CROSS_MOUNTS", "sometimes"),
    ("MCP_FS_CROSS_MOUNTS", ""),
    ("MCP_METRICS_ENABLED", "maybe"),
    ("MCP_METRICS_CPU_SAMPLE_SECONDS", "0"),
    ("MCP_METRICS_CPU_SAMPLE_SECONDS", "2.5"),
    ("MCP_METRICS_DISK_PATH", "relative"),
    ("MCP_MAX_CONCURRENT_TOOLS", "0"),
    ("MCP_MAX_CONCURRENT_TOOLS", "257"),
    ("MCP_TOOL_ACQUIRE_TIMEOUT_SECONDS", "-0.1"),
    ("MCP_TOOL_ACQUIRE_TIMEOUT_SECONDS", "61"),
    ("MCP_TOOL_TIMEOUT_SECONDS", "0"),
    ("MCP_TOOL_TIMEOUT_SECONDS", "601"),
    ("MCP_MAX_ARGUMENT_DEPTH", "0"),
    ("MCP_MAX_ARGUMENT_DEPTH", "65"),
    ("MCP_MAX_ARGUMENT_ITEMS", "0"),
    ("MCP_MAX_ARGUMENT_ITEMS", "100001"),
    ("MCP_SERVER_SUITE_LOG_LEVEL", "VERBOSE"),
    ("MCP_SERVER_SUITE_LOG_LEVEL", "10"),
]


@pytest.mark.parametrize(("variable", "raw"), INVALID)
def test_invalid_values_name_the_variable_and_what_it_accepts(variable: str, raw: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_environ({variable: raw})
    message = str(caught.value)
    assert caught.value.variable == variable
    assert message.startswith(variable)
    assert "expected " in message
    assert "\n" not in message


DSNS = [
    "postgres://reader@db/app",
    f"postgresql://reader:{FAKE_PASSWORD}@db.internal:5432/app?sslmode=verify-full",
    "postgresql://reader@/app?host=/run/postgresql",
]


@pytest.mark.parametrize("dsn", DSNS)
def test_dsn_is_held_as_a_secret(dsn: str) -> None:
    settings = Settings.from_environ({"MCP_SQL_DSN": dsn})
    assert settings.sql_dsn is not None
    assert settings.sql_dsn.get_secret_value() == dsn
    assert dsn not in repr(settings)
    assert dsn not in str(settings)


BAD_DSNS = [
    f"mysql://root:{FAKE_PASSWORD}@db/app",
    FAKE_PASSWORD,
    "postgresql://",
    f"postgresql://u:{FAKE_PASSWORD}@db/app name",
    f"postgresql://u:{FAKE_PASSWORD}@db/app\n",
    f"host=db password={FAKE_PASSWORD}",
    "",
]


@pytest.mark.parametrize("dsn", BAD_DSNS)
def test_invalid_dsn_is_refused_without_showing_it(dsn: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_environ({"MCP_SQL_DSN": dsn})
    assert FAKE_PASSWORD not in str(caught.value)
    assert caught.value.variable == "MCP_SQL_DSN"


def test_dsn_file_is_read_and_trimmed(tmp_path: Path) -> None:
    secret = tmp_path / "dsn"
    secret.write_text(f"postgresql://reader:{FAKE_PASSWORD}@db/app\n")
    settings = Settings.from_environ({"MCP_SQL_DSN_FILE": str(secret)})
    assert settings.sql_dsn is not None
    assert settings.sql_dsn.get_secret_value() == f"postgresql://reader:{FAKE_PASSWORD}@db/app"


def test_dsn_and_dsn_file_together_are_refused(tmp_path: Path) -> None:
    secret = tmp_path / "dsn"
    secret.write_text("postgresql://reader@db/app")
    with pytest.raises(ConfigError, match="MCP_SQL_DSN_FILE"):
        Settings.from_environ(
            {"MCP_SQL_DSN": "postgresql://x@y/z", "MCP_SQL_DSN_FILE": str(secret)}
        )


def test_dsn_file_problems(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(ConfigError, match="regular file"):
        Settings.from_environ({"MCP_SQL_DSN_FILE": str(missing)})
    with pytest.raises(ConfigError, match="regular file"):
        Settings.from_environ({"MCP_SQL_DSN_FILE": str(tmp_path)})
    with pytest.raises(ConfigError, match="absolute path"):
        Settings.from_environ({"MCP_SQL_DSN_FILE": "dsn.txt"})
    big = tmp_path / "big"
    big.write_bytes(b"p" * (MAX_DSN_FILE_BYTES + 1))
    with pytest.raises(ConfigError, match="at most"):
        Settings.from_environ({"MCP_SQL_DSN_FILE": str(big)})
    binary = tmp_path / "binary"
    binary.write_bytes(b"postgresql://\xff")
    with pytest.raises(ConfigError, match="UTF-8"):
        Settings.from_environ({"MCP_SQL_DSN_FILE": str(binary)})
    wrong = tmp_path / "wrong"
    wrong.write_text(f"mysql://root:{FAKE_PASSWORD}@db")
    with pytest.raises(ConfigError) as caught:
        Settings.from_environ({"MCP_SQL_DSN_FILE": str(wrong)})
    assert FAKE_PASSWORD not in str(caught.value)


def test_dsn_file_that_is_a_fifo_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="regular file"):
        Settings.from_environ({"MCP_SQL_DSN_FILE": str(fifo)})


def test_safe_data_dir_must_exist(tmp_path: Path) -> None:
    assert Settings.from_environ({"MCP_SAFE_DATA_DIR": str(tmp_path)}).safe_data_dir == tmp_path


def test_unknown_variables_are_reported() -> None:
    environ = {"MCP_SAFE_DATA_DIRR": "/x", "MCP_SQL_DSN": "postgres://a@b/c", "HOME": "/root"}
    assert unknown_variables(environ) == ["MCP_SAFE_DATA_DIRR"]
    assert unknown_variables(dict.fromkeys(KNOWN_VARIABLES, "")) == []
    # Names are case-sensitive: a lower-case one is a mistake too.
    assert unknown_variables({"mcp_sql_dsn": "x", "Mcp_Safe_Data_Dir": "y"}) == [
        "Mcp_Safe_Data_Dir",
        "mcp_sql_dsn",
    ]


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("MCP_SAFE_DATA_DRI", ("MCP_SAFE_DATA_DIR",)),
        ("mcp_sql_dsn", ("MCP_SQL_DSN",)),
        ("MCP_DATA_DIR_SAFE", ("MCP_SAFE_DATA_DIR",)),
        ("MCP_SQL_POOL_SIZE", ("MCP_SQL_POOL_MAX_SIZE",)),
        ("MCP_SQL_TIMEOUT", ("MCP_SQL_CONNECT_TIMEOUT", "MCP_SQL_QUERY_TIMEOUT")),
        ("MCP_PROXY_URL", ()),
        ("MCP_SQL", ()),
        ("MCP_LOG", ()),
    ],
)
def test_the_variable_probably_meant_is_named(name: str, meant: tuple[str, ...]) -> None:
    assert probable_variables(name) == meant
    warning = unknown_variable_warning(name)
    assert warning.startswith(f"ignoring unknown configuration variable {name}")
    assert warning.endswith("?" if meant else name)


_NAME_CHARACTERS: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"


@given(
    known=st.sampled_from(sorted(KNOWN_VARIABLES)),
    edit=st.sampled_from(["delete", "insert", "substitute", "swap"]),
    where=st.integers(min_value=4, max_value=40),
    character=st.sampled_from(_NAME_CHARACTERS),
)
def test_any_one_slip_of_the_hand_names_the_variable_meant(
    known: str, edit: str, where: int, character: str
) -> None:
    # One edit after the prefix (a character dropped, added, changed, or two swapped), in
    # upper or lower case, always names the variable meant, alone or among equals.
    at = min(where, len(known) - 2)
    typo = {
        "delete": known[:at] + known[at + 1 :],
        "insert": known[:at] + character + known[at:],
        "substitute": known[:at] + character + known[at + 1 :],
        "swap": known[:at] + known[at + 1] + known[at] + known[at + 2 :],
    }[edit]
    assume(typo not in KNOWN_VARIABLES)
    assert known in probable_variables(typo)
    assert known in probable_variables(typo.lower())


def test_secret_str_never_shows_its_value() -> None:
    secret = SecretStr(FAKE_PASSWORD)
    assert FAKE_PASSWORD not in repr(secret)
    assert FAKE_PASSWORD not in str(secret)
    assert FAKE_PASSWORD not in f"{secret}"
    assert secret.get_secret_value() == FAKE_PASSWORD
    assert secret == SecretStr(FAKE_PASSWORD)
    assert secret != SecretStr("other")
    assert secret != FAKE_PASSWORD
    assert hash(secret) == hash(SecretStr(FAKE_PASSWORD))
    with pytest.raises(TypeError, match="pickled"):
        pickle.dumps(secret)
