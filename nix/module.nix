# NixOS module: the server on a host, one sandboxed instance per connection.
#
# An MCP client starts a stdio server as its child, so on a host the server is socket-activated:
# `mcp-server-suite.socket` listens on a Unix socket, and each connection starts an instance of
# `mcp-server-suite@.service` whose standard input and output are that connection. A client's
# command is then `socat - UNIX-CONNECT:/run/mcp-server-suite/mcp.sock`.
#
# The package comes from the flake's `overlays.default`. The unit shapes and the sandbox are
# pure data in units.nix and hardening.nix, so that they can be scored without NixOS.
{
  config,
  lib,
  pkgs,
  ...
}:
let
  cfg = config.services.mcp-server-suite;
  inherit (lib) mkOption types;

  absolutePath = types.strMatching "/.*";

  # A number of seconds in (low, high], or in [low, high] when `zeroAllowed`.
  seconds =
    {
      high,
      zeroAllowed ? false,
    }:
    types.addCheck types.number (x: (if zeroAllowed then x >= 0 else x > 0) && x <= high)
    // {
      description =
        "number of seconds, ${if zeroAllowed then "0" else "above 0"} to ${toString high}";
    };

  # Lower-case PostgreSQL identifiers, which the server quotes into search_path unescaped.
  identifier = "[a-z_][a-z0-9_$]{0,62}";

  # Extensions the server refuses to trust, whatever the operator says: their functions read or
  # write files or open connections to other servers.
  untrustableExtensions = [
    "adminpack"
    "dblink"
    "file_fdw"
    "postgres_fdw"
  ];

  # The directory systemd creates for the instances' logs (LogsDirectory=), writable by their
  # dynamic user under ProtectSystem=strict; an audit file lies directly inside it. A file name
  # may not start with a dot, so `..` cannot lead out of it.
  logsDirectory = "mcp-server-suite";
  auditFile = "/var/log/${logsDirectory}/[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}";

  units = import ./units.nix {
    socketPath = cfg.socket.path;
    socketUser = cfg.socket.user;
    socketGroup = cfg.socket.group;
    socketMode = cfg.socket.mode;
    maxConnections = cfg.socket.maxConnections;
    inherit (cfg) dsnFile databaseAddresses;
    dataDir = cfg.settings.MCP_SAFE_DATA_DIR;
    logsDirectory = if lib.hasPrefix "/" cfg.settings.MCP_AUDIT_LOG then logsDirectory else null;
  };

  serverEnvironment = import ./environment.nix { inherit (cfg) settings; };
in
{
  options.services.mcp-server-suite = {
    enable = lib.mkEnableOption "the MCP server suite, one sandboxed instance per connection";

    package = lib.mkPackageOption pkgs "mcp-server-suite" { };

    socket = {
      path = mkOption {
        type = absolutePath;
        default = "/run/mcp-server-suite/mcp.sock";
        description = "Unix socket that MCP clients connect to; systemd creates its directory.";
      };
      user = mkOption {
        type = types.str;
        default = "root";
        description = "Owner of the socket.";
      };
      group = mkOption {
        type = types.str;
        default = "mcp-server-suite-clients";
        description = ''
          Group of the socket. With the default mode, its members are the users who may start
          sessions; the module creates the group.
        '';
      };
      mode = mkOption {
        type = types.strMatching "0?[0-7]{3}";
        default = "0660";
        description = "Access mode of the socket.";
      };
      maxConnections = mkOption {
        type = types.ints.between 1 1024;
        default = 64;
        description = ''
          Sessions that may run at once. systemd does not queue a connection beyond this many:
          it accepts it, logs "Too many incoming connections" and closes it, so that client
          reads end of file before any reply. An MCP client holds its session for as long as
          it runs, so this must exceed the clients the host serves at once; each session is
          bounded on its own by `MemoryMax`, `TasksMax` and `CPUQuota`.
        '';
      };
    };

    dsnFile = mkOption {
      type = types.nullOr absolutePath;
      default = null;
      example = "/run/keys/mcp-server-suite-dsn";
      description = ''
        File holding the PostgreSQL DSN (`postgresql://…`), which enables `read_only_sql`.
        systemd reads it with `LoadCredential` and the server reads its private copy through
        `MCP_SQL_DSN_FILE`. It is a string, never a Nix path: a path would be copied into the
        world-readable Nix store.
      '';
    };

    databaseAddresses = mkOption {
      type = types.listOf types.str;
      default = [ ];
      example = [ "10.0.0.5/32" ];
      description = ''
        Addresses of a PostgreSQL server that the DSN reaches over TCP. Left empty, each instance
        has no network and reaches PostgreSQL only through its Unix socket. Set, the instance
        gets IPv4 and IPv6 sockets and may reach these addresses and no others.
      '';
    };

    settings = mkOption {
      description = ''
        The server's configuration, rendered into the environment of each instance. The names
        are the server's environment variables; the DSN is set with `dsnFile` only.
      '';
      default = { };
      type = types.submodule {
        options = {
          MCP_SQL_CONNECT_TIMEOUT = mkOption {
            type = seconds { high = 60; };
            default = 5;
            description = "Connect and pool-acquire timeout.";
          };
          MCP_SQL_QUERY_TIMEOUT = mkOption {
            type = seconds { high = 300; };
            default = 10;
            description = "Client timeout and server-side `statement_timeout` of a query.";
          };
          MCP_SQL_POOL_MAX_SIZE = mkOption {
            type = types.ints.between 1 32;
            default = 4;
            description = "Most pooled connections of one session, created lazily.";
          };
          MCP_SQL_APPLICATION_NAME = mkOption {
            type = types.strMatching "[ -~]{1,63}";
            default = "mcp-server-suite";
            description = "`application_name` seen in `pg_stat_activity`.";
          };
          MCP_SQL_SCHEMAS = mkOption {
            type = types.addCheck (types.nonEmptyListOf (types.strMatching identifier)) (
              schemas: !builtins.elem "pg_catalog" schemas
            );
            default = [ "public" ];
            description = "Schemas on `search_path`, after `pg_catalog`, which always comes first.";
          };
          MCP_SQL_ALLOWED_FUNCTIONS = mkOption {
            type = types.listOf (types.strMatching "(${identifier}\\.)?${identifier}");
            default = [ ];
            description = "SQL functions allowed beyond the built-in allowlist.";
          };
          MCP_SQL_TRUSTED_EXTENSIONS = mkOption {
            type = types.listOf (
              types.addCheck (types.strMatching identifier) (
                name: !builtins.elem name untrustableExtensions
              )
            );
            default = [ ];
            example = [ "postgis" ];
            description = ''
              Extensions whose objects the SQL tool trusts beside `pg_catalog`; never one whose
              code reaches outside a read-only transaction:
              ${lib.concatStringsSep ", " untrustableExtensions}.
            '';
          };
          MCP_SQL_MAX_RESULT_BYTES = mkOption {
            type = types.ints.between 4096 16777216;
            default = 1048576;
            description = ''
              Row data the server receives from PostgreSQL for one call, at most; beyond it the
              result is cut at a row boundary and says so.
            '';
          };
          MCP_SAFE_DATA_DIR = mkOption {
            type = types.nullOr absolutePath;
            default = null;
            example = "/srv/mcp-data";
            description = ''
              Directory that `sandbox_fs_read` serves, bound read-only into each instance; null
              turns the tool off. Files must be world-readable: each instance runs as a
              dynamic user.
            '';
          };
          MCP_FS_CROSS_MOUNTS = mkOption {
            type = types.bool;
            default = false;
            description = ''
              Whether `sandbox_fs_read` follows paths onto other mounts below the directory.
            '';
          };
          MCP_METRICS_ENABLED = mkOption {
            type = types.bool;
            default = true;
            description = "Whether `system_metrics` is offered.";
          };
          MCP_METRICS_CPU_SAMPLE_SECONDS = mkOption {
            type = seconds { high = 2; };
            default = 0.1;
            description = "CPU sampling interval.";
          };
          MCP_METRICS_DISK_PATH = mkOption {
            type = absolutePath;
            default = "/";
            description = "File system reported by `disk_percent_used`.";
          };
          MCP_MAX_CONCURRENT_TOOLS = mkOption {
            type = types.ints.between 1 256;
            default = 16;
            description = "Concurrent `tools/call` slots of one session.";
          };
          MCP_TOOL_ACQUIRE_TIMEOUT_SECONDS = mkOption {
            type = seconds {
              high = 60;
              zeroAllowed = true;
            };
            default = 5;
            description = "Wait for a slot before rejecting a call; 0 rejects at once.";
          };
          MCP_TOOL_TIMEOUT_SECONDS = mkOption {
            type = seconds { high = 600; };
            default = 30;
            description = "Execution deadline of one call.";
          };
          MCP_MAX_ARGUMENT_DEPTH = mkOption {
            type = types.ints.between 1 64;
            default = 8;
            description = "Deepest nesting of tool arguments.";
          };
          MCP_MAX_ARGUMENT_ITEMS = mkOption {
            type = types.ints.between 1 100000;
            default = 1000;
            description = "Most items in any argument container.";
          };
          MCP_SERVER_SUITE_LOG_LEVEL = mkOption {
            type = types.enum [
              "DEBUG"
              "INFO"
              "WARNING"
              "ERROR"
              "CRITICAL"
            ];
            default = "WARNING";
            description = "Verbosity of the log, which goes to the journal.";
          };
          MCP_AUDIT_LOG = mkOption {
            type = types.either (types.enum [
              "journal"
              "stderr"
              "off"
            ]) (types.strMatching auditFile);
            default = "journal";
            example = "/var/log/${logsDirectory}/audit.jsonl";
            description = ''
              Where the audit trail goes, one JSON record per `tools/call`. `journal` sends each
              record as a journal entry of its own, `SYSLOG_IDENTIFIER=mcp-server-suite-audit`
              (`journalctl -t mcp-server-suite-audit`); `stderr` mixes the records into the
              server's log; `off` keeps none. A file must lie directly in
              `/var/log/${logsDirectory}/`, which systemd then creates for the instances'
              dynamic user, and every instance appends to it.
            '';
          };
          MCP_AUDIT_ARGUMENTS = mkOption {
            type = types.enum [
              "digest"
              "full"
            ];
            default = "digest";
            description = ''
              What an audit record holds of a call's arguments: their SHA-256 digest, or the
              arguments themselves, escaped, SQL text included.
            '';
          };
          MCP_AUDIT_REQUIRED = mkOption {
            type = types.bool;
            default = false;
            description = "Whether a call that cannot be recorded is refused rather than run.";
          };
        };
      };
    };
  };

  config = lib.mkIf cfg.enable {
    assertions = [
      {
        assertion = cfg.dsnFile == null || !lib.hasPrefix "${builtins.storeDir}/" cfg.dsnFile;
        message = "services.mcp-server-suite.dsnFile holds a secret; it must not be in the store.";
      }
      {
        assertion = !(cfg.settings.MCP_AUDIT_REQUIRED && cfg.settings.MCP_AUDIT_LOG == "off");
        message = "services.mcp-server-suite.settings.MCP_AUDIT_REQUIRED needs an audit log.";
      }
    ];

    users.groups.${cfg.socket.group} = { };

    systemd.sockets.mcp-server-suite = {
      description = "MCP server suite socket";
      wantedBy = [ "sockets.target" ];
      socketConfig = units.socket;
    };

    systemd.services."mcp-server-suite@" = {
      description = "MCP server suite session %i";
      environment = units.environment // serverEnvironment;
      unitConfig = units.serviceUnit;
      serviceConfig =
        lib.mapAttrs (_: lib.mkDefault) units.limits
        // units.service
        // {
          ExecStart = lib.getExe cfg.package;
        };
    };
  };
}
