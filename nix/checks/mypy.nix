# mypy --strict over the server's sources, with the configuration of pyproject.toml.
#
# The tests are left to the code-quality job: the interop tests import the official MCP SDK,
# which nixpkgs does not carry at the release the project pins.
{
  lib,
  runCommand,
  python,
}:
let
  env = python.withPackages (ps: [
    ps.mypy
    ps.pglast
    ps.psutil
    ps.psycopg
    ps.psycopg-pool
    ps.pydantic
    ps.sqlglot
    ps.types-psutil
  ]);
  src = lib.fileset.toSource {
    root = ../..;
    fileset = lib.fileset.unions [
      ../../pyproject.toml
      ../../src
    ];
  };
in
runCommand "mcp-server-suite-mypy" { nativeBuildInputs = [ env ]; } ''
  cd ${src}
  mypy --cache-dir "$TMPDIR/mypy" src/
  touch "$out"
''
