# The OCI image: the server's runtime closure and nothing else.
#
# No shell, no coreutils and no package manager, including inside /nix/store. nixpkgs' CPython
# names bash as the shell of subprocess, and its console-script wrappers are bash scripts, so
# the image runs its own interpreter (see python.nix) with `python -m` through the binary
# wrapper of a `withPackages` environment. checks/no-shell.nix proves the result.
{
  lib,
  callPackage,
  dockerTools,
  writeText,
}:
let
  settings = import ./image-config.nix;
  project = (lib.importTOML ../pyproject.toml).project;
  pythons = callPackage ./python.nix { };

  server = (pythons.imagePackages.callPackage ./package.nix { }).overridePythonAttrs (old: {
    # The same sources are built and tested in packages.default; a second run against an
    # interpreter that differs in one stdlib string would prove nothing new.
    doCheck = false;
    # The entrypoint runs the module with -m; the console script and its wrapper would only
    # bring a shell, or the build's interpreter, into the image.
    dontWrapPythonPrograms = true;
    postInstall = (old.postInstall or "") + ''
      rm -r "$out/bin"
    '';
  });

  # What `withPackages` builds, from the image's own package set: the interpreter's binary
  # wrapper with the server and its closure on its path.
  runtime = pythons.image.buildEnv.override { extraLibs = [ server ]; };

  inherit (settings) user;

  # The layer is built in a directory that stands for the image root.
  dataDir = lib.removePrefix "/" settings.dataDir;
  tmpDir = lib.removePrefix "/" settings.tmpDir;

  passwd = writeText "passwd" ''
    root:x:0:0:root:/var/empty:${user.shell}
    ${user.name}:x:${toString user.uid}:${toString user.gid}::${user.home}:${user.shell}
  '';

  group = writeText "group" ''
    root:x:0:
    ${user.group}:x:${toString user.gid}:
  '';
in
dockerTools.buildLayeredImage {
  inherit (settings)
    name
    tag
    created
    mtime
    ;

  # The CA bundle for TLS to PostgreSQL (sslmode=verify-full with sslrootcert=system): links
  # at /etc/ssl/certs/ca-bundle.crt (which SSL_CERT_FILE names), ca-certificates.crt and
  # /etc/pki/tls/certs/ca-bundle.crt to the bundle in the store. Listing cacert itself would
  # copy all of its top level into the image root, its nix-support/setup-hook included.
  contents = [ dockerTools.caCertificates ];

  # Copies, not links, of the account files: the image holds no store path it does not need.
  fakeRootCommands = ''
    mkdir -p etc ${dataDir} ${tmpDir}
    install -m 0444 ${passwd} etc/passwd
    install -m 0444 ${group} etc/group
    # The mount point of the read-only data volume; readable by the server's user.
    chmod 0555 ${dataDir}
    chmod 1777 ${tmpDir}
  '';

  config = {
    Entrypoint = [
      runtime.interpreter
      "-m"
      settings.module
    ];
    Env = lib.mapAttrsToList (name: value: "${name}=${value}") settings.environment;
    Labels = settings.labels // {
      "org.opencontainers.image.version" = project.version;
    };
    StopSignal = settings.stopSignal;
    User = "${toString user.uid}:${toString user.gid}";
    WorkingDir = "/";
  };
}
