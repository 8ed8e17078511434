# What the OCI image is, as pure data.
#
# This file evaluates without nixpkgs, so that the checks that have no Nix store (the Compose
# file check, the smoke test's expectations) read the same values the image is built from.
let
  # The mount point of the read-only volume that sandbox_fs_read serves.
  dataDir = "/safe_data_dir";
in
{
  inherit dataDir;

  name = "mcp-server-suite";
  # The tag that `docker run` and `docker compose` name; the image is loaded, never pulled.
  tag = "local";

  # Fixed times, so that two builds of the same sources are bit-identical. `created` is the
  # image's creation time in its configuration; dockerTools writes it back as
  # 1970-01-01T00:00:01+00:00, the same instant. `mtime` is the modification time of every
  # entry of the store layers (all of /nix).
  created = "1970-01-01T00:00:01Z";
  mtime = "1970-01-01T00:00:01Z";
  # The customisation layer (/etc with the accounts and the CA bundle links, /tmp, the data
  # directory) does not get `mtime`: dockerTools packs it with `tar --mtime` at the build's
  # SOURCE_DATE_EPOCH, which nixpkgs' stdenv fixes at 315532800, 1980-01-01. It is not an input
  # of dockerTools; it is written here so that the image check can hold the build to it.
  customisationMtime = "1980-01-01T00:00:00Z";

  user = {
    name = "mcp";
    uid = 10001;
    group = "mcp";
    gid = 10001;
    home = "/var/empty";
    # Not a shell: no login is possible, and the image holds no shell to log in to.
    shell = "/sbin/nologin";
  };

  # Docker mounts a tmpfs here; the directory itself keeps the path usable without one.
  tmpDir = "/tmp";

  # The server is started as `python -m <module>`. A console script would need a wrapper, and
  # the one nixpkgs writes is a bash script.
  module = "mcp_server_suite";

  # The server drains in-flight calls for up to 5 s on SIGTERM, then exits 0.
  stopSignal = "SIGTERM";

  environment = {
    MCP_SAFE_DATA_DIR = dataDir;
    # The root file system is read-only; nothing could be cached anyway.
    PYTHONDONTWRITEBYTECODE = "1";
    # `python -m` would otherwise put the working directory first on sys.path.
    PYTHONSAFEPATH = "1";
    # The image has no locales; UTF-8 mode keeps text I/O independent of them.
    PYTHONUTF8 = "1";
    # OpenSSL, and so libpq with sslrootcert=system, finds the CA bundle here.
    SSL_CERT_FILE = "/etc/ssl/certs/ca-bundle.crt";
  };

  labels = {
    "org.opencontainers.image.description" =
      "A hardened MCP server over stdio: read-only SQL, sandboxed file reads and host metrics.";
    "org.opencontainers.image.licenses" = "MIT";
    "org.opencontainers.image.title" = "mcp-server-suite";
  };
}
