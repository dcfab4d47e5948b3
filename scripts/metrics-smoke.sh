#!/usr/bin/env bash
# Smoke test of the Prometheus endpoint: starts relaymq-server
# with --metrics-listen 127.0.0.1:0 in a temporary directory, publishes with relaymq-cli
# (with confirms, and a mandatory message no queue takes), gets and acks one message, then
# scrapes /metrics (curl when installed, else python3) and checks a few lines: the
# content type, queue gauges and counters, confirms, returns, connections, the fsync
# histogram, build info, and that another path is a 404. Stops the server with SIGTERM
# and expects exit 0.
#
# Binaries: $RELAYMQ_BIN_SERVER and $RELAYMQ_BIN_CLI when set (the test suite sets them),
# else target/release after `cargo build --release`. Only 127.0.0.1; bounded: every wait
# has a limit; the server is killed on any exit (trap).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
server_bin=${RELAYMQ_BIN_SERVER:-}
cli_bin=${RELAYMQ_BIN_CLI:-}
if [ -z "$server_bin" ] || [ -z "$cli_bin" ]; then
  (cd "$root" && cargo build --quiet --release --bin relaymq-server --bin relaymq-cli)
  target=${CARGO_TARGET_DIR:-$root/target}
  server_bin=${server_bin:-$target/release/relaymq-server}
  cli_bin=${cli_bin:-$target/release/relaymq-cli}
fi

# shellcheck source=scripts/smoke-lib.sh
. "$root/scripts/smoke-lib.sh"
smoke_init metrics-smoke

# cli ARGS...: runs relaymq-cli, fails the script when it exits non-zero.
cli() {
  "$cli_bin" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null || fail "relaymq-cli $* failed: $(cat "$tmp/err")"
  pass
}

# http PATH: GET http://$metrics PATH; the status code in $code, the body in $tmp/body,
# the headers in $tmp/head.
http() {
  if command -v curl >/dev/null 2>&1; then
    code=$(curl -sS --max-time 20 -D "$tmp/head" -o "$tmp/body" -w '%{http_code}' "http://$metrics$1") \
      || fail "curl http://$metrics$1 failed"
  else
    code=$(python3 - "$metrics" "$1" "$tmp/head" "$tmp/body" <<'PY'
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=20)
s.sendall(f"GET {sys.argv[2]} HTTP/1.1\r\nHost: {sys.argv[1]}\r\n\r\n".encode())
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
head, _, body = data.partition(b"\r\n\r\n")
open(sys.argv[3], "wb").write(head + b"\r\n")
open(sys.argv[4], "wb").write(body)
print(head.split(b" ")[1].decode())
PY
) || fail "python3 GET $1 failed"
  fi
}

# has LINE: the last page has exactly this line.
has() { grep -qxF -- "$1" "$tmp/body" || fail "no line [$1] in the page"; pass; }
# at_least NAME_AND_LABELS MIN: the sample's value is ≥ MIN.
at_least() {
  local v
  v=$(grep -F -- "$1 " "$tmp/body" | grep -v '^#' | awk 'NR == 1 { print $NF }')
  [ -n "$v" ] || fail "no sample [$1]"
  python3 -c "import sys; sys.exit(0 if float('$v') >= float('$2') else 1)" || fail "[$1] is $v, expected >= $2"
  pass
}

# --- start ---------------------------------------------------------------------------------
"$server_bin" --listen 127.0.0.1:0 --amqp-listen off --metrics-listen 127.0.0.1:0 --http-listen off \
  --data-dir "$tmp/data" --ready-file "$tmp/ready.json" --log-level info 2>>"$tmp/server.log" &
server_pid=$!
for _ in $(seq 1 200); do
  [ -s "$tmp/ready.json" ] && break
  kill -0 "$server_pid" 2>/dev/null || fail "server exited during start-up"
  sleep 0.05
done
[ -s "$tmp/ready.json" ] || fail "server did not write its ready file within 10 s"
addr=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["listen"])' "$tmp/ready.json")
metrics=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["metrics_listen"])' "$tmp/ready.json")
case "$metrics" in 127.0.0.1:[0-9]*) pass ;; *) fail "no metrics_listen in $(cat "$tmp/ready.json")" ;; esac
grep -qF "listening on $metrics (Prometheus metrics, /metrics)" "$tmp/server.log" || fail "no start-up line for the metrics listener"
pass
export RELAYMQ_ADDR=$addr

# --- work ------------------------------------------------------------------------------------
cli declare queue smoke.metrics --durable
cli publish "" smoke.metrics "one" --persistent --confirm
cli publish "" smoke.metrics "two" --persistent --confirm
# A mandatory message no queue takes: returned (the CLI reports it and exits non-zero).
if "$cli_bin" publish "" no.such.queue "lost" --mandatory --confirm >"$tmp/out" 2>"$tmp/err" </dev/null; then
  fail "an unroutable mandatory publish succeeded"
fi
grep -qF "NO_ROUTE" "$tmp/err" || fail "no NO_ROUTE for the unroutable publish: $(cat "$tmp/err")"
pass
cli get smoke.metrics

# --- scrape ----------------------------------------------------------------------------------
http /metrics
[ "$code" = 200 ] || fail "GET /metrics answered $code"
pass
grep -qi '^content-type: text/plain; version=0.0.4; charset=utf-8' "$tmp/head" || fail "content type: $(cat "$tmp/head")"
pass
has '# TYPE relaymq_queue_messages_ready gauge'
has 'relaymq_queue_messages_ready{vhost="/",queue="smoke.metrics"} 1'
has 'relaymq_queue_messages_published_total{vhost="/",queue="smoke.metrics"} 2'
has 'relaymq_queue_messages_acked_total{vhost="/",queue="smoke.metrics"} 1'
has 'relaymq_global_messages_confirmed_total 3'
has 'relaymq_global_messages_unroutable_returned_total 1'
has 'relaymq_connections 0'
at_least 'relaymq_connections_opened_total' 5
at_least 'relaymq_queue_disk_bytes{vhost="/",queue="smoke.metrics"}' 1
at_least 'relaymq_io_sync_time_seconds_count' 1
at_least 'relaymq_process_resident_memory_bytes' 1
grep -q '^relaymq_build_info{version="[^"]*"} 1$' "$tmp/body" || fail "no build info"
pass

http /other
[ "$code" = 404 ] || fail "GET /other answered $code"
pass

# --- stop ------------------------------------------------------------------------------------
stop_server

echo "metrics-smoke: $checks passed, 0 failed"
