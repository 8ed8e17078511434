# The NixOS module in a VM: socket activation, one handshake and a call of every tool through
# the socket, the DSN through LoadCredential, PostgreSQL over its Unix socket without network,
# the audit trail read back from the journal, the exposure score of a live instance, and a
# connection beyond MaxConnections closed at once.
{
  testers,
  module,
}:
let
  # Peer authentication over PostgreSQL's Unix socket: no password, and no network.
  dsn = "postgresql://mcp-server-suite@/app?host=/run/postgresql";
in
testers.runNixOSTest {
  name = "mcp-server-suite";

  nodes.machine =
    { pkgs, ... }:
    {
      imports = [ module ];

      services.mcp-server-suite = {
        enable = true;
        dsnFile = "/var/lib/mcp-secrets/dsn";
        settings.MCP_SAFE_DATA_DIR = "/srv/mcp-data";
        # Two, so that the test can fill every slot; the audit trail goes to the journal, as by
        # default.
        socket.maxConnections = 2;
      };

      # Peer authentication maps the instances' dynamic user to a role of the same name.
      services.postgresql = {
        enable = true;
        ensureDatabases = [ "app" ];
        ensureUsers = [ { name = "mcp-server-suite"; } ];
      };

      systemd.tmpfiles.rules = [
        "d /srv/mcp-data 0755 root root -"
        "f /srv/mcp-data/hello.txt 0644 root root - hello from the sandbox"
        # Readable by root only: systemd hands each instance its own copy.
        "d /var/lib/mcp-secrets 0700 root root -"
        "f /var/lib/mcp-secrets/dsn 0600 root root - ${dsn}"
      ];

      environment.systemPackages = [ pkgs.socat ];
    };

  testScript = ''
    import json
    import re
    import time

    SOCKET = "/run/mcp-server-suite/mcp.sock"
    HANDSHAKE = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "vm-test", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]


    def call(request_id, name, arguments):
        return {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }


    def session(*extra):
        """Run one session through the socket and return its responses by id."""
        lines = "\n".join(json.dumps(message) for message in [*HANDSHAKE, *extra])
        machine.succeed(f"cat > /tmp/requests.jsonl <<'EOF'\n{lines}\nEOF")
        # After the last request socat closes its side; the server answers, drains and exits.
        output = machine.succeed(f"socat -t 30 - UNIX-CONNECT:{SOCKET} < /tmp/requests.jsonl")
        replies = [json.loads(line) for line in output.splitlines() if line.strip()]
        return {reply["id"]: reply for reply in replies if "id" in reply}


    def structured(reply):
        assert "result" in reply, reply
        assert reply["result"].get("isError") is False, reply
        return reply["result"]["structuredContent"]


    RUNNING = (
        "systemctl list-units --plain --no-legend --state=running "
        "'mcp-server-suite@*.service'"
    )


    def hold_session():
        """Open a session that stays open, for as long as its sleep runs."""
        machine.succeed(f"(sleep 300 | socat - UNIX-CONNECT:{SOCKET}) >/dev/null 2>&1 &")


    start_all()
    machine.wait_for_unit("sockets.target")
    machine.wait_for_unit("mcp-server-suite.socket")
    machine.wait_for_unit("postgresql.service")
    machine.wait_until_succeeds(
        "runuser -u postgres -- psql -tAc "
        "\"SELECT 1 FROM pg_roles WHERE rolname = 'mcp-server-suite'\" | grep -qx 1"
    )

    with subtest("handshake and tools through the socket"):
        replies = session(
            call(3, "system_metrics", {"include_disk": True}),
            call(4, "sandbox_fs_read", {"relative_path": "hello.txt"}),
            call(5, "read_only_sql", {"query": "SELECT 1 AS one"}),
        )
        init = replies[1]["result"]
        assert init["protocolVersion"] == "2025-11-25", init
        assert init["serverInfo"]["name"] == "mcp-server-suite", init
        # Every tool this session calls is offered; the server may offer more (sql_schema
        # beside read_only_sql, for one).
        tools = {tool["name"] for tool in replies[2]["result"]["tools"]}
        assert {"read_only_sql", "sandbox_fs_read", "system_metrics"} <= tools, tools

        metrics = structured(replies[3])
        assert metrics["memory"]["total_bytes"] > 0, metrics
        assert metrics["cpu"]["core_count"] >= 1, metrics
        assert metrics["disk_percent_used"] is not None, metrics

        read = structured(replies[4])
        assert read["content"].rstrip("\n") == "hello from the sandbox", read

        rows = structured(replies[5])
        assert rows["columns"] == ["one"], rows
        assert rows["rows"] == [[1]], rows

    with subtest("the audit trail in the journal"):
        # One native journal entry per call, sent by the sandboxed instance itself. The kernel
        # hands journald the sender's credentials, so _UID is the instance's dynamic user;
        # the unit, read from the sender's cgroup, may be missing once the instance has exited.
        machine.wait_until_succeeds(
            "test $(journalctl -t mcp-server-suite-audit -o cat --no-pager | wc -l) -ge 3"
        )
        entries = [
            json.loads(line)
            for line in machine.succeed(
                "journalctl -t mcp-server-suite-audit -o json --no-pager"
            ).splitlines()
            if line.strip()
        ]
        for entry in entries:
            assert 61184 <= int(entry["_UID"]) <= 65519, entry
            assert entry.get("_SYSTEMD_UNIT", "mcp-server-suite@").startswith(
                "mcp-server-suite@"
            ), entry
        recorded = json.dumps(entries)
        for tool in ("system_metrics", "sandbox_fs_read", "read_only_sql"):
            assert tool in recorded, f"no audit entry names {tool}: {recorded}"
        assert "${dsn}" not in recorded, "the DSN reached the audit trail"

    with subtest("the sandbox of a live instance"):
        # Hold one session open so that its instance can be inspected.
        hold_session()
        machine.wait_until_succeeds(f"{RUNNING} | grep -q .")
        unit = machine.succeed(f"{RUNNING} | awk 'NR == 1 {{ print $1 }}'").strip()

        pid = machine.succeed(f"systemctl show --property=MainPID --value {unit}").strip()
        uid = int(machine.succeed(f"stat -c %u /proc/{pid}").strip())
        assert 61184 <= uid <= 65519, f"{unit} runs as uid {uid}, not a dynamic user"

        report = machine.succeed(f"systemd-analyze security --no-pager {unit}")
        print(report)
        match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", report)
        assert match, "no exposure level in the report"
        assert float(match.group(1)) <= 1.0, f"exposure {match.group(1)} is above 1.0"

    with subtest("a connection beyond MaxConnections reads end of file at once"):
        hold_session()
        machine.wait_until_succeeds(f"test $({RUNNING} | wc -l) -eq 2")
        machine.succeed(f"echo '{json.dumps(HANDSHAKE[0])}' > /tmp/initialize.jsonl")
        started = time.monotonic()
        # systemd closes the connection with the request unread, so socat may end with
        # ECONNRESET rather than a clean end of file; either way no reply comes.
        _, output = machine.execute(
            f"timeout 30 socat -t 20 - UNIX-CONNECT:{SOCKET} < /tmp/initialize.jsonl 2>/dev/null"
        )
        elapsed = time.monotonic() - started
        assert output.strip() == "", f"a third session was served: {output}"
        assert elapsed < 10, f"the refused connection took {elapsed:.1f} s to end"
        machine.wait_until_succeeds(
            "journalctl -u mcp-server-suite.socket --no-pager "
            "| grep -q 'Too many incoming connections'"
        )
        # Once the held sessions end, connections are served again.
        machine.succeed("pkill -x sleep")
        machine.wait_until_succeeds(f"test $({RUNNING} | wc -l) -eq 0")
        replies = session()
        assert replies[1]["result"]["serverInfo"]["name"] == "mcp-server-suite", replies
  '';
}
