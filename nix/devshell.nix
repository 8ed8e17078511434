# The development shell: the tools of the project's local development workflow.
#
# Python comes with the server's dependencies and its test and lint tools, so `pytest`, `mypy`
# and `bandit` work straight away. The official MCP SDK that the interop tests need is not in
# nixpkgs at the pinned release; `uv sync` installs it, and everything else, into .cache/venv
# on this same interpreter instead of downloading one.
{
  mkShellNoCC,
  postgresql,
  python,
  ruff,
  socat,
  uv,
}:
let
  env = python.withPackages (ps: [
    ps.bandit
    ps.coverage
    ps.hypothesis
    ps.mypy
    ps.pglast
    ps.psutil
    ps.psycopg
    ps.psycopg-pool
    ps.pydantic
    ps.pytest
    ps.pytest-asyncio
    ps.pytest-cov
    ps.pytest-socket
    ps.types-psutil
  ]);
in
mkShellNoCC {
  packages = [
    env
    # The tests marked `postgres` start their own server from initdb and postgres on PATH.
    postgresql
    ruff
    # A client's side of the socket-activated deployment.
    socat
    uv
  ];

  env = {
    UV_PYTHON = python.interpreter;
    UV_PYTHON_DOWNLOADS = "never";
  };

  # The sources are imported from the work tree, not from an installed copy.
  shellHook = ''
    export PYTHONPATH="$PWD/src''${PYTHONPATH:+:$PYTHONPATH}"
  '';
}
