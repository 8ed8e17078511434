# Adds the server to nixpkgs as `mcp-server-suite`, the default of the NixOS module's `package`
# option. Only the server and its own Python package set are new: the pins of that set do not
# leak into the Python packages of the rest of the system.
final: _prev:
let
  python = (final.callPackage ./python.nix { }).app;
in
{
  mcp-server-suite = python.pkgs.toPythonApplication (python.pkgs.callPackage ./package.nix { });
}
