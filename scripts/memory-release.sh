#!/usr/bin/env bash
# Measures whether the server hands freed memory back: fills one queue with MIB MiB of
# 4 KiB messages, then empties it three ways (purge, consume to the end, delete) and
# samples the server's RSS every 0.5 s for 10 s after each. Prints, per way, the RSS
# before the fill, when full, and when it first came back within 64 MiB of the start.
# Usage: scripts/memory-release.sh [MIB]   (default 1024). The figures of
# docs/security.md §6, "Resident memory and when it falls".
# Loopback only; builds release binaries; bounded (every wait has a limit).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mib=${1:-1024}
body_bytes=4096
msgs=$(( mib * 1024 * 1024 / body_bytes ))
(cd "$root" && cargo build --quiet --release --bin relaymq-server --bin relaymq-cli)
server=$root/target/release/relaymq-server
cli=$root/target/release/relaymq-cli
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
"$server" --listen 127.0.0.1:0 --amqp-listen off --metrics-listen off --http-listen off --data-dir "$tmp/data" \
  --ready-file "$tmp/ready" --log-level warn --memory-high-watermark 1.0 &
pid=$!
for _ in $(seq 1 200); do [ -s "$tmp/ready" ] && break; sleep 0.05; done
addr=$(sed -E 's/.*"listen" *: *"([^"]+)".*/\1/' "$tmp/ready")
export RELAYMQ_ADDR=$addr
rss_mib() { awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$pid/status"; }

# One line of BODY_BYTES - 1 bytes: with its newline, one message of BODY_BYTES.
line=$(head -c $(( body_bytes - 1 )) /dev/zero | tr '\0' x)
fill() {
  "$cli" declare queue release.q >/dev/null
  awk -v n="$msgs" -v l="$line" 'BEGIN { for (i = 0; i < n; i++) print l }' |
    "$cli" publish "" release.q --lines
}

# Samples RSS for 10 s; prints the time it first was within 64 MiB of $1, and the last.
settle() {
  local base=$1 first=none
  for i in $(seq 0 20); do
    local now
    now=$(rss_mib)
    if [ "$first" = none ] && [ "$now" -le $(( base + 64 )) ]; then
      first="$(( i * 5 / 10 )).$(( i * 5 % 10 )) s"
    fi
    sleep 0.5
  done
  echo "back within 64 MiB after: $first; RSS after 10 s: $(rss_mib) MiB"
}

"$cli" status >/dev/null
start=$(rss_mib)
echo "server RSS at start: $start MiB; filling $mib MiB of $body_bytes-byte messages each time"
for way in purge consume delete; do
  before=$(rss_mib)
  fill
  echo "$way: RSS $before MiB before the fill, $(rss_mib) MiB full"
  case $way in
    purge) "$cli" purge queue release.q >/dev/null ;;
    consume) "$cli" consume release.q --count "$msgs" --no-ack --timeout 600 >/dev/null ;;
    delete) "$cli" delete queue release.q >/dev/null ;;
  esac
  echo "  $(settle "$start")"
  [ "$way" = delete ] || "$cli" delete queue release.q >/dev/null
done
