# Shared by the shell tests in scripts/ (smoke.sh, install-smoke.sh, config-smoke.sh,
# metrics-smoke.sh, definitions-smoke.sh); sourced, not run. After `smoke_init NAME`:
#   $tmp          a temporary directory, removed on exit with any server still running
#   $server_pid   the server to kill -9 on exit (set it when you start one)
#   fail MESSAGE  prints "NAME: FAIL: MESSAGE" and the tail of $tmp/server.log, exits 1
#   pass          counts a passed check in $checks
#   stop_server   SIGTERM, wait up to 10 s, expect exit 0 (a check)
# A script that needs more on exit defines smoke_cleanup_extra before smoke_init.

smoke_init() {
  smoke_name=$1
  tmp=$(mktemp -d)
  server_pid=
  checks=0
  trap smoke_cleanup EXIT
}

smoke_cleanup() {
  if declare -F smoke_cleanup_extra >/dev/null; then smoke_cleanup_extra || true; fi
  if [ -n "${server_pid:-}" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -9 "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}

fail() {
  echo "$smoke_name: FAIL: $*" >&2
  if [ -f "$tmp/server.log" ]; then
    echo "--- server log:" >&2
    tail -n 30 "$tmp/server.log" >&2 || true
  fi
  exit 1
}

pass() { checks=$((checks + 1)); }

stop_server() {
  kill -TERM "$server_pid"
  for _ in $(seq 1 200); do
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.05
  done
  kill -0 "$server_pid" 2>/dev/null && fail "server still running 10 s after SIGTERM"
  set +e; wait "$server_pid"; local code=$?; set -e
  server_pid=
  [ "$code" = 0 ] || fail "server exited $code after SIGTERM"
  pass
}
