# The systemd sandbox of one server instance, as pure data.
#
# This file must evaluate without nixpkgs: it is rendered into unit files and scored with
# `systemd-analyze security --offline=yes` on machines that have no Nix store. Directives are
# listed alphabetically; every relaxation names its reason on the same line.
{
  # Addresses (an IP or a CIDR block each) of the PostgreSQL server, for a DSN that reaches
  # it over TCP. Left empty, the instance has no network at all and reaches PostgreSQL only
  # through its Unix socket.
  databaseAddresses ? [ ],
}:
let
  tcp = databaseAddresses != [ ];
in
{
  AmbientCapabilities = [ "" ];
  CapabilityBoundingSet = [ "" ];
  DevicePolicy = "closed";
  DynamicUser = true;
  # The server never starts another program; only the store, which holds it, is executable.
  ExecPaths = [ "/nix/store" ];
  IPAddressAllow = databaseAddresses; # empty unless a TCP DSN needs the database
  IPAddressDeny = "any";
  KeyringMode = "private";
  LimitCORE = 0; # a core dump would hold the DSN
  LockPersonality = true;
  MemoryDenyWriteExecute = true;
  NoExecPaths = [ "/" ];
  NoNewPrivileges = true;
  PrivateDevices = true;
  PrivateIPC = true;
  PrivateMounts = true;
  PrivateNetwork = !tcp; # PostgreSQL is reached over its Unix socket unless the DSN needs TCP
  PrivateTmp = true;
  PrivateUsers = true;
  ProcSubset = "all"; # psutil reads /proc/stat, /proc/meminfo and /proc/loadavg
  ProtectClock = true;
  ProtectControlGroups = true;
  ProtectHome = "tmpfs"; # an empty /home, so that a data directory below it can still be bound in
  ProtectHostname = true;
  ProtectKernelLogs = true;
  ProtectKernelModules = true;
  ProtectKernelTunables = true;
  ProtectProc = "invisible";
  ProtectSystem = "strict";
  RemoveIPC = true;
  RestrictAddressFamilies = [
    "AF_UNIX" # sockets passed in by systemd are not affected; PostgreSQL listens on one
  ]
  # Only for a TCP DSN, and narrowed to the database by IPAddressAllow.
  ++ (
    if tcp then
      [
        "AF_INET"
        "AF_INET6"
      ]
    else
      [ ]
  );
  RestrictNamespaces = true;
  RestrictRealtime = true;
  RestrictSUIDSGID = true;
  SystemCallArchitectures = "native";
  SystemCallErrorNumber = "EPERM";
  SystemCallFilter = [
    "@system-service" # CPython, its threads and psutil need no more than this set
    "~@privileged @resources"
  ];
  UMask = "0077";
}
