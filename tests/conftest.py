"""Suite-wide test configuration: hermetic environment and Hypothesis profiles.

The suite is hermetic: pytest-socket blocks every IP socket (Unix sockets stay open for
the event loop and the test PostgreSQL server), and `MCP_*` variables are removed around
each test so the developer's own configuration can never change an outcome.
"""

import os

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

# `dev` keeps local runs quick; `ci` runs a thousand derandomised examples per property, so
# a CI failure reproduces exactly on a developer's machine.
# Failing examples are kept under .cache/, with every other cache of the project.
_EXAMPLES = DirectoryBasedExampleDatabase(".cache/hypothesis")
settings.register_profile("dev", max_examples=100, deadline=None, database=_EXAMPLES)
settings.register_profile(
    "ci",
    max_examples=1000,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
# `mutation` is `ci` without shrinking, for scripts/mutation-check.sh (`pytest-args` of a
# mutation): a kill needs a failing example, not the smallest one, and shrinking a property
# whose every example evaluates the Nix module took five minutes for one mutation.
settings.register_profile(
    "mutation",
    parent=settings.get_profile("ci"),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

pytest_plugins: list[str] = [
    "tests.support.postgres",
    "tests.support.client_examples",
    "tests.support.unprivileged",
]


@pytest.fixture(autouse=True)
def _clear_mcp_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # monkeypatch restores every removed variable when the test ends.
    for name in list(os.environ):
        if name.startswith("MCP_"):
            monkeypatch.delenv(name)
