# The releases of the server's Python stack in the flake's package set, for the CI log to show
# beside uv.lock's: which of them the pinned nixpkgs decides, and which the pins in python.nix.
#
#   nix eval --impure --json --expr \
#     'import ./nix/checks/stack-versions.nix { flake = builtins.getFlake (toString ./.); }'
{
  flake,
  system ? builtins.currentSystem,
}:
let
  pkgs = flake.inputs.nixpkgs.legacyPackages.${system};
  python = (pkgs.callPackage ../python.nix { }).app;
  names = [
    "hypothesis"
    "mypy"
    "pglast"
    "psutil"
    "psycopg"
    "psycopg-pool"
    "pydantic"
    "pydantic-core"
    "pytest"
    "pytest-asyncio"
    "pytest-cov"
    "pytest-socket"
    "typing-extensions"
  ];
in
{
  python = python.version;
}
// builtins.listToAttrs (
  map (name: {
    inherit name;
    # A package that a nixpkgs release renames or drops shows as "-" rather than failing.
    value = python.pkgs.${name}.version or "-";
  }) names
)
