#!/usr/bin/env bash
# Smoke test of the real binaries: starts relaymq-server on a free loopback port in a
# temporary directory, drives relaymq-cli through declare / bind / publish / consume /
# nack / get / delete, checks every output and exit code, then stops the server with
# SIGTERM and checks it exits 0.
#
# Binaries: $RELAYMQ_BIN_SERVER and $RELAYMQ_BIN_CLI when set (the test suite sets them),
# else target/debug after `cargo build`. Bounded: every wait has a limit.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
server_bin=${RELAYMQ_BIN_SERVER:-}
cli_bin=${RELAYMQ_BIN_CLI:-}
if [ -z "$server_bin" ] || [ -z "$cli_bin" ]; then
  (cd "$root" && cargo build --quiet --bin relaymq-server --bin relaymq-cli)
  server_bin=$root/target/debug/relaymq-server
  cli_bin=$root/target/debug/relaymq-cli
fi

# shellcheck source=scripts/smoke-lib.sh
. "$root/scripts/smoke-lib.sh"
smoke_init smoke

# run NAME EXPECTED_EXIT -- ARGS...: runs the CLI, keeps stdout in $out, stderr in $err.
run() {
  local expected=$1; shift
  set +e
  "$cli_bin" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  local code=$?
  set -e
  out=$(cat "$tmp/out"); err=$(cat "$tmp/err")
  [ "$code" = "$expected" ] || fail "relaymq-cli $* exited $code, expected $expected (stderr: $err)"
  pass
}
# run_in INPUT EXPECTED_EXIT ARGS...: as run, with INPUT on standard input.
run_in() {
  local input=$1 expected=$2; shift 2
  set +e
  printf '%s' "$input" | "$cli_bin" "$@" >"$tmp/out" 2>"$tmp/err"
  local code=$?
  set -e
  out=$(cat "$tmp/out"); err=$(cat "$tmp/err")
  [ "$code" = "$expected" ] || fail "relaymq-cli $* exited $code, expected $expected (stderr: $err)"
  pass
}
expect_out() { [ "$out" = "$1" ] || fail "expected output [$1], got [$out]"; pass; }
expect_out_has() { case "$out" in *"$1"*) pass ;; *) fail "output lacks [$1]: [$out]" ;; esac; }
expect_err_has() { case "$err" in *"$1"*) pass ;; *) fail "stderr lacks [$1]: [$err]" ;; esac; }

# --- flags are checked before anything starts ------------------------------------------
set +e
"$server_bin" --log-level loud --listen 127.0.0.1:0 --data-dir "$tmp/never" >/dev/null 2>"$tmp/err"
code=$?
set -e
[ "$code" = 2 ] || fail "an invalid --log-level exited $code, expected 2"
grep -q "log-level" "$tmp/err" || fail "no message names --log-level: $(cat "$tmp/err")"
pass
run 0 --version;                                expect_out_has "relaymq-cli "

# --- start the server -------------------------------------------------------------------
start_server() {
  rm -f "$tmp/ready.json"
  "$server_bin" --listen 127.0.0.1:0 --amqp-listen 127.0.0.1:0 --metrics-listen off --http-listen off --data-dir "$tmp/data" --ready-file "$tmp/ready.json" \
    --log-level info 2>>"$tmp/server.log" &
  server_pid=$!
  for _ in $(seq 1 200); do
    [ -s "$tmp/ready.json" ] && break
    kill -0 "$server_pid" 2>/dev/null || fail "server exited during start-up"
    sleep 0.05
  done
  [ -s "$tmp/ready.json" ] || fail "server did not write its ready file within 10 s"
  addr=$(sed -E 's/.*"listen" *: *"([^"]+)".*/\1/' "$tmp/ready.json")
  case "$addr" in 127.0.0.1:[0-9]*) pass ;; *) fail "ready file has no address: $(cat "$tmp/ready.json")" ;; esac
  export RELAYMQ_ADDR=$addr
}
start_server

# --- declare and bind -----------------------------------------------------------------------
run 0 declare queue smoke.orders;               expect_out "smoke.orders"
run 0 declare queue smoke.orders;               expect_out "smoke.orders"   # idempotent
run 0 declare queue "";                         expect_out_has "amq.gen-"
run 0 declare exchange smoke.topic --type topic
run 0 bind smoke.orders smoke.topic --key 'orders.*'
run 0 list bindings;                            expect_out_has "smoke.topic"
run 1 declare queue smoke.orders --durable;     expect_err_has "PRECONDITION_FAILED (406)"
run 1 declare exchange amq.smoke --type direct; expect_err_has "ACCESS_REFUSED (403)"

# --- publish ---------------------------------------------------------------------------------
run 0 publish smoke.topic orders.new "first order" --confirm
run 0 publish smoke.topic orders.old "second order" --property content_type=text/plain --header n=7
run 5 publish smoke.topic other.key "nobody wants this" --mandatory
expect_err_has "NO_ROUTE (312)"
run 1 publish no.such.exchange key body;        expect_err_has "NOT_FOUND (404)"
run 0 list queues
expect_out_has "smoke.orders"
line=$(printf '%s\n' "$out" | grep 'smoke.orders')
case "$line" in *" 2 "*) pass ;; *) fail "queue row should show 2 ready messages: [$line]" ;; esac

# --- nack (get --requeue) keeps the message at the head, redelivered --------------------------
run 0 get smoke.orders --requeue;               expect_out "first order"
run 0 get smoke.orders --json
expect_out_has '"body":"first order"'
expect_out_has '"redelivered":true'
expect_out_has '"routing_key":"orders.new"'

# --- consume ----------------------------------------------------------------------------------
run 0 consume smoke.orders --count 1 --json
expect_out_has '"body":"second order"'
expect_out_has '"content_type":"text/plain"'
expect_out_has '"n":7'
run_in $'line one\nline two\nline three\n' 0 publish "" smoke.orders --lines --confirm
run 0 consume smoke.orders --count 3 --timeout 10
expect_out $'line one\nline two\nline three'
run 0 get smoke.orders;                         expect_out ""        # empty: prints nothing
run 4 consume smoke.orders --count 1 --timeout 1                     # nothing arrives: timeout
run_in $'\xff\xfe binary' 0 publish "" smoke.orders             # body from stdin, not UTF-8
run 0 get smoke.orders --json;                  expect_out_has '"body_base64":"//4gYmluYXJ5"'

# --- errors and exit codes ---------------------------------------------------------------------
run 1 get no.such.queue;                        expect_err_has "NOT_FOUND (404)"
run 2 frobnicate
run 2 declare queue smoke.orders --arg broken
run 3 --addr 127.0.0.1:1 status
run 3 --password wrong status;                  expect_err_has "ACCESS_REFUSED (403)"

# --- status, vhosts, delete ------------------------------------------------------------------
run 0 status;                                   expect_out_has "version"
run 0 declare vhost smoke-vhost
run 0 list vhosts;                              expect_out_has "smoke-vhost"
run 0 --vhost smoke-vhost declare queue inside; expect_out "inside"
run 0 --vhost smoke-vhost delete vhost smoke-vhost   # deleting the vhost in use: still exit 0
run 0 list vhosts
case "$out" in *smoke-vhost*) fail "vhost still listed after delete: $out" ;; *) pass ;; esac
run 1 delete vhost /;                           expect_err_has "PRECONDITION_FAILED (406)"
run 0 publish "" smoke.orders "to be purged"
run 0 purge queue smoke.orders;                 expect_out "1"
run 0 delete queue smoke.orders
run 0 list queues --json
case "$out" in *'"smoke.orders"'*) fail "queue still listed after delete: $out" ;; *) pass ;; esac
run 0 delete exchange smoke.topic

# --- message lifecycle: dead-lettering, TTL, priorities ---------------------------------------
run 0 declare queue smoke.dlq
run 0 declare queue smoke.work --arg x-dead-letter-exchange= --arg x-dead-letter-routing-key=smoke.dlq --arg x-max-priority=9
run 0 publish "" smoke.work "poison"
run 0 get smoke.work --reject;                  expect_out "poison"
run 0 get smoke.dlq --json
expect_out_has '"body":"poison"'
expect_out_has '"x-first-death-reason":"rejected"'
run 0 publish "" smoke.work "low" --property priority=1
run 0 publish "" smoke.work "short-lived" --property expiration=100
run 0 publish "" smoke.work "high" --property priority=9
sleep 0.5
run 0 get smoke.work --count 5;                 expect_out $'high\nlow'
run 0 get smoke.dlq --json
expect_out_has '"body":"short-lived"'
expect_out_has '"x-first-death-reason":"expired"'
run 1 declare queue smoke.bad --arg x-max-priority=300
expect_err_has "x-max-priority"
run 1 publish "" smoke.work "bad" --property expiration=soon --confirm
expect_err_has "invalid expiration 'soon'"
run 0 delete queue smoke.work
run 0 delete queue smoke.dlq

# --- durability: a clean restart, then a kill -9 --------------------------------------------
run 0 declare queue smoke.durable --durable;    expect_out "smoke.durable"
run 0 declare queue smoke.transient;            expect_out "smoke.transient"
run 0 publish "" smoke.durable "kept" --persistent --confirm
run 0 publish "" smoke.durable "not persistent" --confirm
run 0 publish "" smoke.transient "gone" --persistent --confirm
stop_server
grep -q "shutdown complete" "$tmp/server.log" || fail "server log lacks 'shutdown complete'"
pass
start_server
run 0 list queues
expect_out_has "smoke.durable"
case "$out" in *smoke.transient*) fail "a transient queue survived a restart: $out" ;; *) pass ;; esac
run 0 get smoke.durable --requeue;              expect_out "kept"
run 0 publish "" smoke.durable "also kept" --persistent --confirm
kill -9 "$server_pid"
wait "$server_pid" 2>/dev/null || true
server_pid=
start_server
run 0 get smoke.durable --count 5 --json
first=$(sed -n 1p <<<"$out"); second=$(sed -n 2p <<<"$out")
case "$first" in *'"body":"kept"'*'"redelivered":true'*) pass ;; *) fail "after kill -9: first message [$first]" ;; esac
case "$second" in *'"body":"also kept"'*'"redelivered":false'*) pass ;; *) fail "after kill -9: second message [$second]" ;; esac
[ "$(printf '%s\n' "$out" | wc -l)" = 2 ] || fail "after kill -9: expected exactly 2 messages: [$out]"
pass

# --- graceful stop, then the stopped data directory checks clean ---------------------------------
stop_server
set +e
"$server_bin" --check --data-dir "$tmp/data" >"$tmp/check.out" 2>&1
code=$?
set -e
[ "$code" = 0 ] || fail "--check of the stopped data directory exited $code: $(cat "$tmp/check.out")"
grep -q "smoke.durable" "$tmp/check.out" || fail "--check report does not list smoke.durable: $(cat "$tmp/check.out")"
pass

echo "smoke: $checks passed, 0 failed"
