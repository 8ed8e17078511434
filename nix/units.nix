# The socket unit and the template service of one host deployment, as pure data.
#
# A stdio server is started by whoever connects, so the host runs it by socket activation: the
# socket accepts each connection (Accept=true) and starts one instance of the template service
# with the connection as its standard input and output, sandboxed by hardening.nix. The NixOS
# module renders these attribute sets into units; scripts/render-units.py renders the same data
# without NixOS, for `systemd-analyze security --offline=yes`.
{
  socketPath ? "/run/mcp-server-suite/mcp.sock",
  socketUser ? "root",
  socketGroup ? "mcp-server-suite-clients",
  socketMode ? "0660",
  maxConnections ? 64,
  # The host file that holds the PostgreSQL DSN, or null when the SQL tool is off.
  dsnFile ? null,
  # The host directory that sandbox_fs_read serves, or null when the tool is off.
  dataDir ? null,
  # Addresses of a PostgreSQL server reached over TCP; see hardening.nix.
  databaseAddresses ? [ ],
  # The name of the instances' logs directory below /var/log, for an audit file, or null.
  logsDirectory ? null,
}:
{
  socket = {
    Accept = true;
    ListenStream = socketPath;
    # Sessions that may run at once. systemd does not queue the next one: it accepts it, logs
    # "Too many incoming connections" and closes it, so that client reads end of file at once.
    # 64, systemd's own default, leaves room for every client a host serves at once; each
    # session is bounded by the limits below.
    MaxConnections = maxConnections;
    RemoveOnStop = true;
    SocketGroup = socketGroup;
    SocketMode = socketMode;
    SocketUser = socketUser;
  };

  serviceUnit = {
    # One instance per connection: a failed session must not linger as a failed unit.
    CollectMode = "inactive-or-failed";
  };

  service = import ./hardening.nix { inherit databaseAddresses; } // {
    # The data directory is the only host path the instance needs, and only to read it.
    BindReadOnlyPaths = if dataDir == null then [ ] else [ dataDir ];
    # systemd reads the DSN as root and hands the instance a private copy; the server reads it
    # from the file that MCP_SQL_DSN_FILE names, so the secret never enters the environment.
    LoadCredential = if dsnFile == null then [ ] else [ "dsn:${dsnFile}" ];
    # Created for the dynamic user and writable under ProtectSystem=strict, for an audit file;
    # the journal, the default destination, needs nothing here.
    LogsDirectory = if logsDirectory == null then [ ] else logsDirectory;
    StandardError = "journal";
    StandardInput = "socket";
    StandardOutput = "socket";
    # The server drains in-flight calls for up to 5 s after SIGTERM.
    TimeoutStopSec = 10;
    # A fixed name for the dynamic user, so that PostgreSQL peer authentication can map it.
    User = "mcp-server-suite";
  };

  # Resource limits of one session, the same as the container profile's.
  limits = {
    CPUQuota = "100%";
    MemoryMax = "256M";
    TasksMax = 64;
  };

  environment = if dsnFile == null then { } else { MCP_SQL_DSN_FILE = "%d/dsn"; };
}
