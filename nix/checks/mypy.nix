# mypy --strict over the server's sources, with the configuration of pyproject.toml, against
# the library stubs and the Pydantic plugin of the Nix package set.
#
# The tests are left to the code-quality job: the interop tests import the official MCP SDK,
# which nixpkgs does not carry at the release the project pins.
#
# Version skew: nixpkgs' mypy is another release than uv.lock's, and whether a
# `# type: ignore[code]` is still needed is a verdict of one mypy release on one set of stubs.
# pyproject.toml's warn_unused_ignores stays on in the code-quality job, which type-checks with
# the locked releases; here it is off, and every other strict check is on.
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
  mypy --cache-dir "$TMPDIR/mypy" --no-warn-unused-ignores src/
  touch "$out"
''
