#!/usr/bin/env bash
# Definitions round trip with the real binaries: start relaymq-server in
# a temporary directory on free loopback ports, declare a vhost, a user, permissions,
# exchanges (one with an alternate exchange), queues with arguments (one transient) and
# bindings with relaymq-cli, export the definitions, stop the server, wipe the data
# directory, start again, import the file, export again and compare: the two exports must
# be identical.
# Also checks the CLI's exit codes for a bad file and an unknown connection.
#
# Binaries: $RELAYMQ_BIN_SERVER and $RELAYMQ_BIN_CLI (the test suite sets them), else
# target/release/. Bounded: every wait has a limit; the server is killed on exit.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
server_bin=${RELAYMQ_BIN_SERVER:-$root/target/release/relaymq-server}
cli_bin=${RELAYMQ_BIN_CLI:-$root/target/release/relaymq-cli}
[ -x "$server_bin" ] && [ -x "$cli_bin" ] || {
  echo "definitions-smoke: build first (cargo build --release) or set RELAYMQ_BIN_SERVER/RELAYMQ_BIN_CLI" >&2
  exit 2
}

# shellcheck source=scripts/smoke-lib.sh
. "$root/scripts/smoke-lib.sh"
smoke_init definitions-smoke

# The metrics listener (when this build has one) would clash with other servers' ports.
extra=()
# A here-string, not `--help | grep -q`: grep -q exits at its first match, and with pipefail
# the server's failed write of the rest would turn the test false.
if grep -q -- '--metrics-listen' <<<"$("$server_bin" --help 2>&1)"; then extra+=(--metrics-listen off); fi
if grep -q -- '--http-listen' <<<"$("$server_bin" --help 2>&1)"; then extra+=(--http-listen off); fi

start() {
  rm -f "$tmp/ready"
  "$server_bin" --data-dir "$tmp/data" --listen 127.0.0.1:0 --amqp-listen off \
    --ready-file "$tmp/ready" --log-level info "${extra[@]}" 2>>"$tmp/server.log" &
  server_pid=$!
  for _ in $(seq 200); do
    if [ -s "$tmp/ready" ]; then
      addr=$(sed -n 's/.*"listen": *"\([^"]*\)".*/\1/p' "$tmp/ready")
      [ -n "$addr" ] && return 0
    fi
    kill -0 "$server_pid" 2>/dev/null || fail "server exited at start"
    sleep 0.1
  done
  fail "server not ready within 20 s"
}
# cli EXPECTED_EXIT ARGS...: runs relaymq-cli against the server as guest.
cli() {
  local expected=$1; shift
  set +e
  "$cli_bin" --addr "$addr" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  local code=$?
  set -e
  [ "$code" = "$expected" ] || fail "relaymq-cli $* exited $code, expected $expected: $(cat "$tmp/err")"
  pass
}

start
cli 0 declare vhost shop
cli 0 user add clerk clerk-pw --tags management
cli 0 --vhost shop permission set clerk --configure '^shop\.' --write '^shop\.' --read '.*'
cli 0 --vhost shop declare exchange shop.parking --type fanout --durable
cli 0 --vhost shop declare exchange shop.in --type topic --durable --arg alternate-exchange=shop.parking
cli 0 --vhost shop declare exchange shop.by-header --type headers --durable
cli 0 --vhost shop declare queue shop.orders --durable --arg x-max-length=1000 --arg x-overflow=reject-publish
cli 0 --vhost shop declare queue shop.parked --durable --arg x-message-ttl=60000
cli 0 --vhost shop declare queue scratch
cli 0 --vhost shop bind shop.orders shop.in --key 'order.*'
cli 0 --vhost shop bind shop.parked shop.parking
cli 0 --vhost shop bind shop.orders shop.by-header --arg x-match=all --arg kind=order
cli 0 --vhost shop bind-exchange shop.parking shop.in --key 'audit.#'
cli 0 --vhost shop policy set shop-ttl '^shop\.' '{"message-ttl":600000,"max-length":5000}' --priority 2 --apply-to queues
cli 0 export definitions "$tmp/before.json"
grep -q '"shop-ttl"' "$tmp/before.json" || fail "export lacks the policy shop-ttl"; pass
# It holds password hashes: readable by its owner only.
[ "$(stat -c %a "$tmp/before.json")" = 600 ] || fail "export file mode is $(stat -c %a "$tmp/before.json"), expected 600"; pass
grep -q '"shop.orders"' "$tmp/before.json" || fail "export lacks shop.orders"; pass
# A transient queue is exported too (as RabbitMQ exports it), as transient.
python3 -c 'import json,sys; q=[q for q in json.load(open(sys.argv[1]))["queues"] if q["name"]=="scratch"]; sys.exit(0 if q and q[0]["durable"] is False else 1)' "$tmp/before.json" \
  || fail "the transient queue scratch is not exported as transient"; pass
stop_server

rm -rf "$tmp/data"
start
cli 0 import definitions "$tmp/before.json"
grep -q 'not honoured: none' "$tmp/out" || fail "import summary: $(cat "$tmp/out")"; pass
cli 0 export definitions -
cp "$tmp/out" "$tmp/after.json"
diff -u "$tmp/before.json" "$tmp/after.json" >&2 || fail "the export after import differs"
pass
# Importing again changes nothing.
cli 0 import definitions "$tmp/before.json"
created=$(grep '^created:' "$tmp/out")
case "$created" in *" "[1-9]*) fail "second import created something: $created" ;; esac; pass
# The imported user logs in with its password; a bad file and an unknown id fail.
cli 0 --user clerk --password clerk-pw --vhost shop list queues
grep -q 'shop.orders' "$tmp/out" || fail "clerk does not see shop.orders"; pass
# The imported policy applies to the imported queues.
cli 0 --vhost shop list queues --json
grep -q '"policy": *"shop-ttl"' "$tmp/out" || fail "shop-ttl does not apply after the import: $(cat "$tmp/out")"; pass
printf '{"queues": [{"name": "q", "vhost": "/", "arguments": {"x-max-length": "many"}}]}' >"$tmp/bad.json"
cli 1 import definitions "$tmp/bad.json"
grep -q "queues\[0\] (vhost '/', name 'q')" "$tmp/err" || fail "error does not name the element: $(cat "$tmp/err")"; pass
# close connection: a waiting consumer is closed with 320 and the reason.
"$cli_bin" --addr "$addr" --vhost shop consume shop.orders --timeout 30 >"$tmp/consumer.out" 2>"$tmp/consumer.err" &
consumer_pid=$!
id=
for _ in $(seq 100); do
  cli 0 list connections --json
  id=$(python3 -c 'import json,sys; rows=json.load(open(sys.argv[1])); print(next((r["id"] for r in rows if r["vhost"]=="shop"), ""))' "$tmp/out")
  [ -n "$id" ] && break
  sleep 0.1
done
[ -n "$id" ] || fail "the consumer's connection is not listed"
cli 0 close connection "$id" --reason "smoke test"
set +e; wait "$consumer_pid"; code=$?; set -e
[ "$code" != 0 ] || fail "the closed consumer exited 0"
grep -q 'smoke test' "$tmp/consumer.err" || fail "consumer did not get the reason: $(cat "$tmp/consumer.err")"; pass
cli 1 close connection 999999
cli 2 import definitions "$tmp/missing.json"
stop_server

echo "definitions-smoke: $checks checks, 0 failed"
