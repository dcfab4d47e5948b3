#!/usr/bin/env bash
# Measures the server's memory: RSS per idle connection and per queued 16-byte message.
# Usage: scripts/memory.sh [CONNECTIONS] [MESSAGES]   (defaults 1000 and 1000000)
# Loopback only; builds release binaries; bounded (every wait has a limit).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
conns=${1:-1000}
msgs=${2:-1000000}
(cd "$root" && cargo build --quiet --release --bin relaymq-server --bin relaymq-cli)
server=$root/target/release/relaymq-server
cli=$root/target/release/relaymq-cli
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
"$server" --listen 127.0.0.1:0 --metrics-listen off --http-listen off --data-dir "$tmp/data" --ready-file "$tmp/ready" --log-level warn &
pid=$!
for _ in $(seq 1 200); do [ -s "$tmp/ready" ] && break; sleep 0.05; done
addr=$(sed -E 's/.*"listen" *: *"([^"]+)".*/\1/' "$tmp/ready")
export RELAYMQ_ADDR=$addr
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$pid/status"; }

"$cli" status >/dev/null
base=$(rss_kib)
# Idle connections: header + connection.open (guest/guest, vhost /), held while the
# server's RSS is read (printed by the helper, in KiB).
with_conns=$(python3 - "$addr" "$conns" "$pid" <<'PY'
import socket, struct, sys, time
host, port = sys.argv[1].rsplit(":", 1)
n, pid = int(sys.argv[2]), sys.argv[3]
def sstr(s):
    b = s.encode()
    return bytes([len(b)]) + b
payload = (struct.pack(">HI", 1, 1) + sstr("guest") + struct.pack(">I", 5) + b"guest"
           + sstr("/") + struct.pack(">IHH", 0, 0, 0) + sstr("memory.sh"))
frame = struct.pack(">IBBH", len(payload), 1, 0, 0) + payload
socks = []
for _ in range(n):
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(b"RMQP\x00\x01\x00\x00" + frame)
    s.recv(4096)
    socks.append(s)
time.sleep(1)
print([l.split()[1] for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS")][0])
PY
)
sleep 1
"$cli" declare queue memory.q >/dev/null
before_msgs=$(rss_kib)
# 16-byte bodies: "m" + 15 digits.
seq -f 'm%015g' 1 "$msgs" | "$cli" publish "" memory.q --lines --confirm
ready=$("$cli" list queues --json | grep -o '"messages_ready":[0-9]*' | head -1 | cut -d: -f2)
after_msgs=$(rss_kib)
echo "idle connections: $conns; server RSS $base KiB -> $with_conns KiB: $(( (with_conns - base) * 1024 / conns )) bytes per idle connection"
echo "queued messages: $ready of 16 bytes; server RSS $before_msgs KiB -> $after_msgs KiB: $(( (after_msgs - before_msgs) * 1024 / msgs )) bytes per queued message"
