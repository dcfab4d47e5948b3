#!/usr/bin/env bash
# Configuration smoke test, as an operator would do it from a shell: precedence flags > RELAYMQ_SERVER_* > --config file > defaults shown by
# --print-config, a bad key refused at start-up, then a running server reconfigured with
# SIGHUP (a limit raised, the log level changed, a restart-only change warned about, a
# bad file ignored), then SIGTERM.
#
# Binaries: $RELAYMQ_BIN_SERVER and $RELAYMQ_BIN_CLI when set (the test suite sets them),
# else target/release after `cargo build --release`. Only 127.0.0.1; every wait bounded;
# the server is killed on exit.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
server_bin=${RELAYMQ_BIN_SERVER:-}
cli_bin=${RELAYMQ_BIN_CLI:-}
if [ -z "$server_bin" ] || [ -z "$cli_bin" ]; then
  (cd "$root" && cargo build --release --quiet --bin relaymq-server --bin relaymq-cli)
  server_bin=$root/target/release/relaymq-server
  cli_bin=$root/target/release/relaymq-cli
fi
# Start from a clean environment for the server's settings.
for v in $(compgen -e | grep '^RELAYMQ_SERVER_' || true); do unset "$v"; done
unset RELAYMQ_ADDR RELAYMQ_VHOST RELAYMQ_USER RELAYMQ_PASSWORD NOTIFY_SOCKET

# shellcheck source=scripts/smoke-lib.sh
. "$root/scripts/smoke-lib.sh"
smoke_init config-smoke
# has FILE TEXT: FILE contains TEXT (fixed string).
has() { grep -qF -- "$2" "$1"; }
# wait_log TEXT [COUNT]: waits (≤ 10 s) until the server log holds TEXT COUNT times.
wait_log() {
  local want=${2:-1}
  for _ in $(seq 1 200); do
    [ "$(grep -cF -- "$1" "$tmp/server.log" || true)" -ge "$want" ] && { pass; return; }
    sleep 0.05
  done
  fail "server log lacks [$1] x$want"
}
cfg=$tmp/relaymq.toml

# --- precedence, as --print-config shows it ------------------------------------------------
cat >"$cfg" <<TOML
# relaymq test configuration
max-connections = 10
max-queues-per-vhost = 11
heartbeat = 12
default-pass = "file-secret"
TOML
RELAYMQ_SERVER_MAX_CONNECTIONS=20 RELAYMQ_SERVER_MAX_QUEUES_PER_VHOST=21 \
  "$server_bin" --config "$cfg" --max-connections 30 --print-config >"$tmp/printed" \
  || fail "--print-config exited $?"
has "$tmp/printed" 'max-connections = 30  # flag --max-connections' || fail "flag does not win: $(cat "$tmp/printed")"
pass
has "$tmp/printed" 'max-queues-per-vhost = 21  # env RELAYMQ_SERVER_MAX_QUEUES_PER_VHOST' || fail "env does not beat the file"
pass
has "$tmp/printed" 'heartbeat = 12  # file' || fail "file value missing"
pass
has "$tmp/printed" 'frame-max = "128KiB"  # default' || fail "default missing"
pass
has "$tmp/printed" '# default-pass = "<hidden>"' || fail "secret not hidden"
has "$tmp/printed" 'file-secret' && fail "secret printed"
pass

# --- a typo stops the start-up with exit 2, naming the key and the file ----------------------
printf 'max-conections = 5\n' >"$tmp/typo.toml"
set +e
"$server_bin" --config "$tmp/typo.toml" --data-dir "$tmp/never" 2>"$tmp/err" >/dev/null
code=$?
set -e
[ "$code" = 2 ] || fail "unknown key exited $code, expected 2"
has "$tmp/err" "max-conections" && has "$tmp/err" "$tmp/typo.toml" || fail "message does not name key and file: $(cat "$tmp/err")"
pass
set +e
RELAYMQ_SERVER_MAX_CONECTIONS=5 "$server_bin" --data-dir "$tmp/never" 2>"$tmp/err" >/dev/null
code=$?
set -e
[ "$code" = 2 ] && has "$tmp/err" RELAYMQ_SERVER_MAX_CONECTIONS || fail "unknown variable: exit $code, $(cat "$tmp/err")"
[ ! -e "$tmp/never" ] || fail "a data directory was created despite a bad configuration"
pass

# --- a running server, reconfigured with SIGHUP ----------------------------------------------
cat >"$cfg" <<TOML
data-dir = "$tmp/data"
listen = "127.0.0.1:0"
amqp-listen = "off"
metrics-listen = "off"
http-listen = "off"
log-level = "info"
max-queues-per-vhost = 1
TOML
"$server_bin" --config "$cfg" --ready-file "$tmp/ready.json" 2>"$tmp/server.log" &
server_pid=$!
for _ in $(seq 1 200); do
  [ -s "$tmp/ready.json" ] && break
  kill -0 "$server_pid" 2>/dev/null || fail "server exited during start-up"
  sleep 0.05
done
[ -s "$tmp/ready.json" ] || fail "no ready file within 10 s"
export RELAYMQ_ADDR=$(sed -E 's/.*"listen" *: *"([^"]+)".*/\1/' "$tmp/ready.json")

"$cli_bin" declare queue first >/dev/null || fail "first queue refused"
set +e
"$cli_bin" declare queue second >/dev/null 2>"$tmp/err"
code=$?
set -e
[ "$code" = 1 ] && has "$tmp/err" "(406)" || fail "second queue: exit $code, $(cat "$tmp/err")"
pass

sed -i 's/^max-queues-per-vhost = 1$/max-queues-per-vhost = 2/; s/^log-level = "info"$/log-level = "debug"/; s/^listen = .*/listen = "127.0.0.1:1"/' "$cfg"
kill -HUP "$server_pid"
wait_log "config reload: max-queues-per-vhost 1 -> 2"
wait_log "config reload: log-level info -> debug"
wait_log "config reload: listen changed"
has "$tmp/server.log" "needs a restart" || fail "no restart warning"
pass
"$cli_bin" declare queue second >/dev/null || fail "second queue refused after the reload"
pass
grep -q " DEBUG " "$tmp/server.log" || fail "no debug lines after log-level debug"
pass

printf 'max-queues-per-vhost = "lots"\n' >>"$cfg"
kill -HUP "$server_pid"
wait_log "config reload failed, nothing changed"
set +e
"$cli_bin" declare queue third >/dev/null 2>"$tmp/err"
code=$?
set -e
[ "$code" = 1 ] || fail "third queue: exit $code (the limit should still be 2)"
pass

stop_server

echo "config-smoke: $checks passed, 0 failed"
