# Fails the build when the image holds a shell, coreutils, busybox or a package manager
# (inside /nix/store too), a setuid file, anything unexpected at its root, an entry without
# its fixed modification time, or a configuration other than image-config.nix.
{
  python3,
  runCommand,
  writeText,
  image,
}:
let
  expect = writeText "image-config.json" (builtins.toJSON (import ../image-config.nix));
in
runCommand "mcp-server-suite-image-no-shell" { nativeBuildInputs = [ python3 ]; } ''
  python3 ${./inspect-image.py} --check-times --expect ${expect} ${image}
  touch "$out"
''
