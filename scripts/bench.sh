#!/usr/bin/env bash
# Runs the scenarios of the performance targets (docs/benchmarks.md, "Figures against the
# performance targets") with relaymq-bench, each against a FRESH relaymq-server
# (temporary data directory, fixed loopback ports), and appends one line per scenario,
# "NAME<TAB>JSON", to a results file; prints a human-readable summary at the end.
#
# Usage: scripts/bench.sh [--quick] [--only NAME[,NAME...]] [--rabbitmq amqp://...]
#                         [--results FILE] [--native-port P] [--amqp-port P] [--list]
#
#   --quick            tiny counts and 1-second runs (smoke test; figures meaningless)
#   --only NAMES       run only these scenarios (comma-separated; --list shows them)
#   --rabbitmq URI     also run `relaymq-bench compare` of RelayMQ's AMQP listener
#                      against this RabbitMQ (amqp://USER:PASS@HOST:PORT/)
#   --results FILE     where to append [default: target/bench-results.tsv]
#   --native-port P    the server's native listener, 127.0.0.1:P [default: 5790]
#   --amqp-port P      the server's AMQP 0-9-1 listener, 127.0.0.1:P [default: 5792]
#
# Binaries: $RELAYMQ_BIN_SERVER and $RELAYMQ_BIN_BENCH when set (the test suite sets
# them), else a release build (`cargo build --release`, honouring CARGO_TARGET_DIR).
# Loopback only. Bounded: every scenario runs under `timeout` (SCENARIO_TIMEOUT_S), every
# wait has a limit; the whole script takes about 8 minutes, under 20.
# A failed scenario is recorded
# as {"error": ..., "exit_code": N} and the others still run; the exit code is then 1.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
quick=0
only=
rabbitmq=
results=$root/target/bench-results.tsv
native_port=5790
amqp_port=5792
list=0

usage() { sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --only) only=${2:?--only needs names}; shift ;;
    --rabbitmq) rabbitmq=${2:?--rabbitmq needs a URI}; shift ;;
    --results) results=${2:?--results needs a file}; shift ;;
    --native-port) native_port=${2:?--native-port needs a port}; shift ;;
    --amqp-port) amqp_port=${2:?--amqp-port needs a port}; shift ;;
    --list) list=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

# Bounds, seconds.
SCENARIO_TIMEOUT_S=600       # one scenario, server start to stop (many-queues: ~4 min)
READY_TIMEOUT_S=30           # a server start (fresh directory: near instant)
STOP_TIMEOUT_S=15            # SIGTERM to exit, then SIGKILL

if [ "$quick" = 1 ]; then
  dur=1; queued=5000; idle_conns=50; idle_s=1; recovery_msgs=2000; topic_bindings=2000
  many_queues=300; many_msgs=1500
else
  dur=10; queued=10000000; idle_conns=10000; idle_s=10; recovery_msgs=1000000; topic_bindings=100000
  many_queues=100000; many_msgs=1000000
fi
native=relaymq://127.0.0.1:$native_port
amqp=amqp://guest:guest@127.0.0.1:$amqp_port/

# NAME|server (yes: a fresh server, no: none)|relaymq-bench arguments
# ("@SERVER_BIN@" stands for the server binary).
scenarios=(
  "null-relay|no|--null-relay --no-ack --duration $dur"
  "native-1-1-1-no-ack|yes|--uri $native --no-ack --duration $dur"
  "amqp-1-1-1-no-ack|yes|--uri $amqp --no-ack --duration $dur"
  "persistent-4p-confirm-256|yes|--uri $native --persistent --producers 4 --confirm 256 --duration $dur"
  "rate-10k|yes|--uri $native --rate 10000 --duration $dur"
  "rate-100k|yes|--uri $native --rate 100000 --duration $dur"
  "fanout-10q-10c|yes|--uri $native --exchange-type fanout --queues 10 --consumers 10 --duration $dur"
  "topic-1-binding|yes|--uri $native --exchange-type topic --no-ack --duration $dur"
  "topic-many-bindings|yes|--uri $native --exchange-type topic --bindings $topic_bindings --no-ack --duration $dur"
  "queued-10m|yes|--uri $native --consumers 0 --count $queued"
  "idle-connections|yes|idle --uri $native --connections $idle_conns --duration $idle_s"
  "recovery-1m|no|recovery --server @SERVER_BIN@ --count $recovery_msgs"
  "many-queues|no|recovery --server @SERVER_BIN@ --queues $many_queues --count $many_msgs --nofile 1024"
)
if [ -n "$rabbitmq" ]; then
  scenarios+=(
    "compare-1-1-1-no-ack|yes|compare $amqp $rabbitmq --no-ack --duration $dur"
    "compare-persistent|yes|compare $amqp $rabbitmq --persistent --producers 4 --confirm 256 --duration $dur"
  )
fi

if [ "$list" = 1 ]; then
  for s in "${scenarios[@]}"; do echo "${s%%|*}"; done
  exit 0
fi
if [ -n "$only" ]; then
  for name in ${only//,/ }; do
    found=0
    for s in "${scenarios[@]}"; do [ "${s%%|*}" = "$name" ] && found=1; done
    if [ "$found" = 0 ]; then
      echo "bench.sh: no scenario '$name' (try --list)" >&2
      exit 2
    fi
  done
fi

server_bin=${RELAYMQ_BIN_SERVER:-}
bench_bin=${RELAYMQ_BIN_BENCH:-}
if [ -z "$server_bin" ] || [ -z "$bench_bin" ]; then
  (cd "$root" && cargo build --quiet --release --bin relaymq-server --bin relaymq-bench) || exit 1
  target=${CARGO_TARGET_DIR:-$root/target}
  server_bin=$target/release/relaymq-server
  bench_bin=$target/release/relaymq-bench
fi

tmp=$(mktemp -d)
server_pid=
stop_server() {
  [ -n "$server_pid" ] || return 0
  kill -TERM "$server_pid" 2>/dev/null
  for _ in $(seq 1 $((STOP_TIMEOUT_S * 10))); do
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$server_pid" 2>/dev/null
  wait "$server_pid" 2>/dev/null
  server_pid=
}
cleanup() { stop_server; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_server: a fresh server on the fixed ports; fails (with its log) when it does not
# write its ready file, e.g. a port in use: the bench then never talks to another server.
start_server() {
  rm -rf "$tmp/data" "$tmp/ready"
  "$server_bin" --data-dir "$tmp/data" --listen "127.0.0.1:$native_port" \
    --amqp-listen "127.0.0.1:$amqp_port" --metrics-listen off --http-listen off --ready-file "$tmp/ready" --fsync always \
    --log-level warn >"$tmp/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 $((READY_TIMEOUT_S * 20))); do
    [ -s "$tmp/ready" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "server did not start: $(tail -n 3 "$tmp/server.log" | tr '\n' ' ')" >"$tmp/start.err"
  stop_server
  return 1
}

json_string() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1" 2>/dev/null || echo '"?"'; }

mkdir -p "$(dirname "$results")"
run_id=$(date -u +%Y-%m-%dT%H:%M:%SZ)
failed=0
ran=()
for s in "${scenarios[@]}"; do
  name=${s%%|*}
  rest=${s#*|}
  needs_server=${rest%%|*}
  args=${rest#*|}
  args=${args//@SERVER_BIN@/$server_bin}
  if [ -n "$only" ] && ! [[ ",$only," == *",$name,"* ]]; then
    continue
  fi
  echo "== $name: relaymq-bench $args --json" >&2
  line=
  if [ "$needs_server" = yes ] && ! start_server; then
    line="{\"error\":$(json_string "$(cat "$tmp/start.err")"),\"exit_code\":null}"
  else
    # shellcheck disable=SC2086 # the arguments are words on purpose
    out=$(timeout --kill-after=5 "$SCENARIO_TIMEOUT_S" "$bench_bin" $args --json 2>"$tmp/bench.err")
    code=$?
    stop_server
    json=$(printf '%s\n' "$out" | grep '^{' | tail -n 1)
    if [ "$code" = 0 ] && [ -n "$json" ]; then
      line=$json
    else
      err=$(tail -n 3 "$tmp/bench.err" | tr '\n' ' ')
      [ "$code" = 124 ] && err="timed out after $SCENARIO_TIMEOUT_S s; $err"
      line="{\"error\":$(json_string "$err"),\"exit_code\":$code,\"partial\":${json:-null}}"
    fi
  fi
  case $line in '{"error"'*) failed=$((failed + 1)); echo "   FAILED: $line" >&2 ;; esac
  printf '%s\t%s\n' "$name" "$line" >>"$results"
  ran+=("$name")
  printf '%s\t%s\n' "$name" "$line" >>"$tmp/this-run.tsv"
done

echo
echo "bench.sh $run_id: ${#ran[@]} scenarios, $failed failed; appended to $results"
if [ -s "$tmp/this-run.tsv" ]; then
  python3 - "$tmp/this-run.tsv" <<'PY' || cat "$tmp/this-run.tsv"
import json, sys
rows = {}
for line in open(sys.argv[1]):
    name, _, text = line.rstrip("\n").partition("\t")
    rows[name] = json.loads(text)
def mib(b):
    return "-" if b is None else f"{b / 2**20:.1f} MiB"
for name, v in rows.items():
    if "error" in v:
        print(f"{name:28} FAILED (exit {v.get('exit_code')}): {v['error'][:100]}")
    elif "runs" in v:
        print(f"{name:28} compare: {json.dumps(v)[:160]}")
    elif "rss_per_connection_bytes" in v:
        per = v["rss_per_connection_bytes"]
        print(f"{name:28} {v['connections']} connections, "
              f"{'-' if per is None else f'{per / 1024:.1f} KiB'} server RSS each "
              f"({mib(v['server_rss_before_bytes'])} -> {mib(v['server_rss_after_bytes'])})")
    elif "restart_to_first_get_ms" in v:
        queues = v.get("queues", 1)
        head = (f"{queues} durable queues declared in {v['declare_seconds']:.1f} s, "
                if queues > 1 else "")
        print(f"{name:28} {head}{v['messages']} persistent messages: serving again after "
              f"{v['restart_to_first_get_ms']:.0f} ms (connect {v['restart_to_connect_ms']:.0f} ms), "
              f"{v['messages_after_restart']} recovered, server RSS "
              f"{mib(v.get('server_rss_before_kill_bytes'))} before the kill, "
              f"{mib(v.get('server_rss_after_restart_bytes'))} after")
    else:
        lat = v.get("latency_us", {})
        print(f"{name:28} published {v['published_per_s']:>10,.0f}/s  "
              f"delivered {v['delivered_per_s']:>10,.0f}/s  "
              f"p99 {lat.get('p99', 0):>10,.0f} µs  server RSS {mib(v.get('server_rss_bytes'))}"
              + ("  (null relay)" if v.get("null_relay") else ""))
one, many = rows.get("topic-1-binding"), rows.get("topic-many-bindings")
if one and many and "error" not in one and "error" not in many and one["published_per_s"]:
    print(f"{'topic ratio':28} many bindings publish at "
          f"{100 * many['published_per_s'] / one['published_per_s']:.0f}% of the 1-binding rate")
PY
fi
[ "$failed" = 0 ]
