#!/usr/bin/env bash
# Smoke test of scripts/install.sh, the systemd unit and the sample config. Installs into a temporary prefix and checks every file, mode and content; runs the
# installed server on the installed data directory; re-runs the installer (idempotent, an
# edited config is kept, a tampered unit restored); `systemd-analyze verify` (and
# `security --offline`) on the installed unit when systemd-analyze exists; uninstalls (data
# and config stay) and checks the error paths. Needs neither root nor a running systemd:
# the real-system parts (user creation, daemon-reload, systemctl start) are skipped with a
# note.
#
# Binaries: $RELAYMQ_BIN_SERVER and $RELAYMQ_BIN_CLI when set (tests/heavy/shell_scripts.rs sets
# them), else target/release (built by install.sh when missing). Only 127.0.0.1; every wait
# is bounded; the temporary directory and the server are removed on exit.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
installer=$root/scripts/install.sh
unit_src=$root/scripts/relaymq.service
conf_src=$root/scripts/relaymq.toml
server_bin=${RELAYMQ_BIN_SERVER:-}
cli_bin=${RELAYMQ_BIN_CLI:-}
if [ -z "$server_bin" ] || [ -z "$cli_bin" ]; then
  target=${CARGO_TARGET_DIR:-$root/target}
  if [ ! -x "$target/release/relaymq-server" ] || [ ! -x "$target/release/relaymq-cli" ]; then
    (cd "$root" && cargo build --release --quiet --bin relaymq-server --bin relaymq-cli)
  fi
  server_bin=$target/release/relaymq-server
  cli_bin=$target/release/relaymq-cli
fi
export RELAYMQ_BIN_SERVER=$server_bin RELAYMQ_BIN_CLI=$cli_bin

# shellcheck source=scripts/smoke-lib.sh
. "$root/scripts/smoke-lib.sh"
smoke_init install-smoke
chmod 0755 "$tmp"
prefix=$tmp/root
skips=0
skip() { skips=$((skips + 1)); echo "install-smoke: skipped: $*"; }

# inst EXPECTED_EXIT ARGS...: runs install.sh, keeps its stdout+stderr in $out.
inst() {
  local expected=$1; shift
  set +e
  out=$(bash "$installer" "$@" 2>&1 </dev/null)
  local code=$?
  set -e
  [ "$code" = "$expected" ] || fail "install.sh $* exited $code, expected $expected:
$out"
  pass
}
out_has() { case "$out" in *"$1"*) pass ;; *) fail "install.sh output lacks [$1]:
$out" ;; esac; }
# file_is PATH MODE: a regular file with that mode.
file_is() {
  [ -f "$1" ] || fail "$1 is missing"
  local m; m=$(stat -c %a "$1")
  [ "$m" = "$2" ] || fail "$1 has mode $m, expected $2"
  pass
}
dir_is() {
  [ -d "$1" ] || fail "directory $1 is missing"
  local m; m=$(stat -c %a "$1")
  [ "$m" = "$2" ] || fail "$1 has mode $m, expected $2"
  pass
}
same() { cmp -s "$1" "$2" || fail "$2 differs from $1"; pass; }
# unit_has LINE: the installed unit has exactly this line.
unit_has() { grep -qxF "$1" "$unit" || fail "the unit lacks the line [$1]"; pass; }
# unit_value KEY: the value of the last KEY= line of the unit.
unit_value() { sed -n "s/^$1=//p" "$unit" | tail -1; }
# help_default FLAG: the [default: X] of FLAG in relaymq-server --help ("" if none).
# (A here-string, not a pipe: awk exits at its match, and under pipefail the writer's
# SIGPIPE would fail the script.)
help_default() {
  awk -v f="--$1" '
    /^  -/ { if (on) exit; if ($1 == f) on = 1 }
    on && /\[default: / { sub(/.*\[default: /, ""); sub(/\].*/, ""); print; exit }' <<<"$help"
}
# tree: every path under the prefix with type, mode and size (the idempotence snapshot).
tree() { (cd "$prefix" && find . -printf '%p %y %m %s\n' | sort); }

bin=$prefix/usr/local/bin
unit=$prefix/etc/systemd/system/relaymq.service
conf_dir=$prefix/etc/relaymq
conf=$conf_dir/relaymq.toml
data=$prefix/var/lib/relaymq
help=$("$server_bin" --help)

# --- usage errors: nothing is installed ------------------------------------------------------
inst 2 --frobnicate;                 out_has "unknown argument '--frobnicate'"
inst 2 --prefix;                     out_has "--prefix needs a directory"
inst 1 --prefix "$prefix" --from "$tmp/no-such-dir"; out_has "--from $tmp/no-such-dir: not a directory"
mkdir "$tmp/empty"
inst 1 --prefix "$prefix" --from "$tmp/empty";       out_has "relaymq-server: not an executable file"
[ ! -e "$bin/relaymq-server" ] || fail "a failed install left $bin/relaymq-server"
pass
inst 0 --help;                       out_has "--uninstall"
# Installing into / without root is refused before anything happens.
if [ "$(id -u)" != 0 ]; then
  inst 1 --from "$(dirname "$server_bin")"; out_has "needs root"
elif command -v setpriv >/dev/null && getent passwd nobody >/dev/null; then
  # A copy nobody can read wherever the checkout is (it stops before needing the rest).
  mkdir -p "$tmp/as-nobody/scripts"
  cp "$installer" "$tmp/as-nobody/scripts/install.sh"
  chmod -R a+rX "$tmp/as-nobody"
  set +e
  out=$(cd / && setpriv --reuid "$(id -u nobody)" --regid "$(id -g nobody)" --clear-groups \
    env RELAYMQ_BIN_SERVER=/nonexistent RELAYMQ_BIN_CLI=/nonexistent \
    bash "$tmp/as-nobody/scripts/install.sh" 2>&1 </dev/null)
  code=$?
  set -e
  [ "$code" = 1 ] || fail "install.sh into / as nobody exited $code, expected 1: $out"
  out_has "needs root"
else
  skip "the non-root refusal (root here, and no setpriv/nobody to drop to)"
fi

# --- install into the prefix ----------------------------------------------------------------------
inst 0 --prefix "$prefix"
out_has "installed $bin/relaymq-server (mode 0755)"
out_has "installed $bin/relaymq-cli (mode 0755)"
out_has "installed $unit (mode 0644)"
out_has "installed $conf (mode 0640"
out_has "created $data (mode 0750"
out_has "not creating the user/group relaymq"
file_is "$bin/relaymq-server" 755;  same "$server_bin" "$bin/relaymq-server"
file_is "$bin/relaymq-cli" 755;     same "$cli_bin" "$bin/relaymq-cli"
file_is "$unit" 644;                same "$unit_src" "$unit"
dir_is "$conf_dir" 750
file_is "$conf" 640;                same "$conf_src" "$conf"
dir_is "$data" 750
[ -z "$(ls -A "$data")" ] || fail "the new data directory is not empty"
pass
grep -q "^relaymq-server " <<<"$("$bin/relaymq-server" --version)" || fail "the installed server does not run"
pass
grep -q "^relaymq-cli " <<<"$("$bin/relaymq-cli" --version)" || fail "the installed CLI does not run"
pass
# Owners: only where the account exists and we are root (the real-system install).
if [ "$(id -u)" = 0 ] && getent passwd relaymq >/dev/null && getent group relaymq >/dev/null; then
  [ "$(stat -c %U:%G "$data")" = relaymq:relaymq ] || fail "$data is not owned by relaymq:relaymq"
  [ "$(stat -c %G "$conf")" = relaymq ] || fail "$conf is not in group relaymq"
  pass
else
  skip "owner checks (no relaymq user here or not root: the installer leaves owners alone then)"
fi

# --- the unit names what the installer installed ------------------------------------------------
unit_has "Type=notify"
unit_has "User=relaymq"
unit_has "Group=relaymq"
unit_has "ExecStart=/usr/local/bin/relaymq-server --config /etc/relaymq/relaymq.toml"
unit_has 'ExecReload=/bin/kill -HUP $MAINPID'
unit_has "Restart=on-failure"
unit_has "KillSignal=SIGTERM"
unit_has "StateDirectory=relaymq"
unit_has "StateDirectoryMode=0750"
unit_has "UMask=0027"
for line in NoNewPrivileges=yes CapabilityBoundingSet= ProtectSystem=strict ProtectHome=yes \
  PrivateTmp=yes PrivateDevices=yes ProtectKernelTunables=yes ProtectKernelModules=yes \
  ProtectKernelLogs=yes ProtectControlGroups=yes ProtectClock=yes ProtectHostname=yes \
  "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX" RestrictNamespaces=yes \
  RestrictRealtime=yes RestrictSUIDSGID=yes LockPersonality=yes MemoryDenyWriteExecute=yes \
  SystemCallArchitectures=native SystemCallFilter=@system-service; do
  unit_has "$line"
done
# What the unit names exists in the prefix: the binary, the config (the unit keeps the real
# paths; the prefix is a staging root).
exec_start=$(unit_value ExecStart)
set -- $exec_start
[ -x "$prefix$1" ] || fail "ExecStart names $1, not installed at $prefix$1"
[ "$2" = --config ] && [ -f "$prefix$3" ] || fail "ExecStart's --config $3 is not installed at $prefix$3"
pass
# The state directory is the sample config's data-dir.
grep -qx 'data-dir = "/var/lib/relaymq"' "$conf" || fail "the config's data-dir is not /var/lib/relaymq"
[ -d "$prefix/var/lib/$(unit_value StateDirectory)" ] || fail "StateDirectory is not the installed data directory"
pass
# TimeoutStopSec covers the server's shutdown flush (--shutdown-timeout) plus a final sync.
stop_s=$(unit_value TimeoutStopSec); stop_s=${stop_s%s}
flush_s=$(help_default shutdown-timeout)
[ -n "$flush_s" ] || fail "no --shutdown-timeout default in relaymq-server --help"
[ "$stop_s" -ge $((flush_s + 30)) ] || fail "TimeoutStopSec=$stop_s s is not above --shutdown-timeout ($flush_s s) + 30 s of final sync"
pass
# LimitNOFILE covers the default --max-connections, the pending handshakes and 2 descriptors
# for each of at least 10,000 durable queues at rest.
nofile=$(unit_value LimitNOFILE)
conns=$(help_default max-connections)
[ -n "$conns" ] || fail "no --max-connections default in relaymq-server --help"
[ "$nofile" -ge $((conns + 1024 + 2 * 10000 + 64)) ] || fail "LimitNOFILE=$nofile is too small for $conns connections and 10,000 durable queues"
[ "$nofile" -le "$(cat /proc/sys/fs/nr_open 2>/dev/null || echo 1048576)" ] || fail "LimitNOFILE=$nofile is above fs.nr_open: systemd would refuse it"
pass

# --- the sample config ----------------------------------------------------------------------------
# Valid TOML with exactly the six set keys; every key, set or commented, is a server flag.
if python3 -c 'import tomllib' 2>/dev/null; then
  python3 - "$conf" <<'PY' || fail "the installed config is not the expected TOML (above)"
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    c = tomllib.load(f)
want = {"data-dir": "/var/lib/relaymq", "listen": "127.0.0.1:5673", "amqp-listen": "127.0.0.1:5672",
        "metrics-listen": "127.0.0.1:15692", "http-listen": "127.0.0.1:15672", "log-level": "info"}
if c != want:
    sys.exit(f"keys set: {c}, expected {want}")
PY
  pass
else
  skip "TOML parse of the sample (python3 without tomllib, i.e. below 3.11)"
fi
# Here-strings, not `printf | grep -q`: grep -q exits at its first match, and with
# pipefail a printf still writing the rest of --help (over one 4 KiB write) then fails.
keys=$(sed -nE 's/^#? ?([a-z][a-z0-9-]*) = .*/\1/p' "$conf")
[ "$(printf '%s\n' "$keys" | wc -l)" -ge 30 ] || fail "the sample config documents only $(printf '%s\n' "$keys" | wc -l) keys"
for key in $keys; do
  grep -qE -- "^ +--$key( |$)" <<<"$help" \
    || fail "the sample config's key '$key' is not a relaymq-server flag"
  [ "$(printf '%s\n' "$keys" | grep -cx -- "$key")" = 1 ] || fail "key '$key' appears twice in the sample"
done
pass
# Every flag of --help (but --check, --help, --version, --config, --print-config and the alias
# --channel-max) has its key in the sample.
for flag in $(printf '%s\n' "$help" | sed -nE 's/^ +--([a-z][a-z0-9-]*).*/\1/p'); do
  case "$flag" in check|help|version|config|print-config|channel-max) continue ;; esac
  grep -qx -- "$flag" <<<"$keys" || fail "flag --$flag has no key in the sample config"
done
pass
# The commented defaults are the server's (--help's [default: X]), sizes compared in bytes.
to_bytes() {
  local v=$1
  case "$v" in
    *KiB) echo $(( ${v%KiB} * 1024 )) ;;
    *MiB) echo $(( ${v%MiB} * 1024 * 1024 )) ;;
    *GiB) echo $(( ${v%GiB} * 1024 * 1024 * 1024 )) ;;
    *) echo "$v" ;;
  esac
}
while IFS= read -r line; do
  key=$(printf '%s' "$line" | sed -E 's/^# ([a-z0-9-]+) = .*/\1/')
  value=$(printf '%s' "$line" | sed -E 's/^# [a-z0-9-]+ = "?([^"]*)"?$/\1/')
  default=$(help_default "$key")
  case "$default" in ""|*" "*) continue ;; esac   # none, or prose ("number of CPUs")
  [ "$(to_bytes "$value")" = "$(to_bytes "$default")" ] \
    || fail "the sample says '$key = $value' but the server's default is $default"
  pass
done < <(grep -E '^# [a-z][a-z0-9-]* = ' "$conf")

# The installed server reads the installed config.
if grep -q -- '--config' <<<"$help" && grep -q -- '--print-config' <<<"$help"; then
  set +e
  out=$("$bin/relaymq-server" --config "$conf" --print-config 2>&1); code=$?
  set -e
  [ "$code" = 0 ] || fail "relaymq-server --config <installed config> --print-config exited $code: $out"
  case "$out" in *"/var/lib/relaymq"*) pass ;; *) fail "--print-config does not show data-dir /var/lib/relaymq: $out" ;; esac
  # Every documented default uncommented (but the TLS settings, which need TLS files that do not exist here) parses too.
  sed -E 's/^# ([a-z][a-z0-9-]* = )/\1/' "$conf" | grep -vE '^tls-|^amqp-tls-|^https-listen' > "$tmp/all.toml"
  set +e
  out=$("$bin/relaymq-server" --config "$tmp/all.toml" --print-config 2>&1); code=$?
  set -e
  [ "$code" = 0 ] || fail "the sample config with every default uncommented does not parse ($code): $out"
  pass
else
  skip "--config/--print-config checks (this relaymq-server has no --config yet)"
fi

# --- the installed server runs on the installed data directory ------------------------------------
rm -f "$tmp/ready.json"
"$bin/relaymq-server" --data-dir "$data" --listen 127.0.0.1:0 --amqp-listen off --metrics-listen off --http-listen off \
  --ready-file "$tmp/ready.json" --log-level warn 2>"$tmp/server.log" &
server_pid=$!
for _ in $(seq 1 200); do
  [ -s "$tmp/ready.json" ] && break
  kill -0 "$server_pid" 2>/dev/null || fail "the installed server exited at start: $(cat "$tmp/server.log")"
  sleep 0.05
done
[ -s "$tmp/ready.json" ] || fail "the installed server did not write its ready file within 10 s"
RELAYMQ_ADDR=$(sed -E 's/.*"listen" *: *"([^"]+)".*/\1/' "$tmp/ready.json")
export RELAYMQ_ADDR
"$bin/relaymq-cli" declare queue install.kept --durable >/dev/null
"$bin/relaymq-cli" publish "" install.kept "survives uninstall" --persistent --confirm
stop_server
[ -f "$data/meta.db" ] || fail "no meta.db in the installed data directory"
pass

# --- re-run: idempotent, the config is never overwritten, the unit is restored ---------------------
echo '# edited by the operator' >> "$conf"
cp "$conf" "$tmp/conf.edited"
before=$(tree)
inst 0 --prefix "$prefix"
out_has "unchanged $bin/relaymq-server"
out_has "unchanged $bin/relaymq-cli"
out_has "unchanged $unit"
out_has "kept existing $conf"
after=$(tree)
[ "$before" = "$after" ] || fail "a re-run changed the installed tree:
$(diff <(printf '%s\n' "$before") <(printf '%s\n' "$after") || true)"
pass
same "$tmp/conf.edited" "$conf"
# Modes drifted by hand are put back; a tampered unit is replaced (local changes belong in
# drop-ins), the config still not.
chmod 0777 "$data" "$bin/relaymq-cli"
chmod 0644 "$conf"
echo "Environment=TAMPERED=1" >> "$unit"
inst 0 --prefix "$prefix"
out_has "updated $unit"
out_has "unchanged $bin/relaymq-cli (mode put back to 0755)"
same "$unit_src" "$unit"
dir_is "$data" 750
file_is "$bin/relaymq-cli" 755
# The config may hold default-pass: its mode is put back too, its content kept.
file_is "$conf" 640
same "$tmp/conf.edited" "$conf"

# --- systemd-analyze -------------------------------------------------------------------------------
if command -v systemd-analyze >/dev/null; then
  # verify checks that ExecStart's binary exists: verify a copy whose ExecStart points into the
  # prefix (everything else as installed).
  mkdir "$tmp/verify"
  sed "s#^ExecStart=/usr/local/bin/#ExecStart=$bin/#" "$unit" > "$tmp/verify/relaymq.service"
  set +e
  out=$(systemd-analyze verify "$tmp/verify/relaymq.service" 2>&1); code=$?
  set -e
  [ "$code" = 0 ] || fail "systemd-analyze verify exited $code: $out"
  sd_version=$(systemd-analyze --version | sed -nE '1s/^systemd ([0-9]+).*/\1/p')
  if [ "${sd_version:-0}" -ge 247 ]; then
    [ -z "$out" ] || fail "systemd-analyze verify warns: $out"
    echo "install-smoke: systemd-analyze verify: clean ($(systemd-analyze --version | head -1))"
    pass
  else
    # ProtectProc= came with systemd 247; older ones ignore it with a warning.
    skip "a warning-free verify (systemd ${sd_version:-?} < 247 knows not every key): $out"
  fi
  # The exposure score; systemd before 250 has no --offline.
  set +e
  out=$(systemd-analyze security --offline=true "$tmp/verify/relaymq.service" 2>&1); code=$?
  set -e
  score=$(printf '%s\n' "$out" | sed -nE 's/.*Overall exposure level for relaymq.service: ([0-9.]+).*/\1/p')
  if [ -n "$score" ]; then
    echo "install-smoke: systemd-analyze security: exposure $score (0 = locked down, 10 = exposed)"
    awk -v s="$score" 'BEGIN { exit !(s < 5.0) }' || fail "exposure $score is not below 5.0 (MEDIUM): hardening lost?"
    pass
  else
    skip "systemd-analyze security --offline (not supported here: $(printf '%s' "$out" | head -1))"
  fi
else
  skip "systemd-analyze verify (systemd-analyze is not installed)"
fi

if [ "$(ps -p 1 -o comm= 2>/dev/null)" = systemd ] && [ "$(id -u)" = 0 ]; then
  skip "a real systemctl start (systemd is PID 1, but the test never touches the real system)"
else
  skip "a real systemctl start (systemd is not PID 1 here, or not root)"
fi

# --- uninstall keeps data and config ----------------------------------------------------------------
inst 0 --prefix "$prefix" --uninstall
out_has "removed $bin/relaymq-server"
out_has "removed $bin/relaymq-cli"
out_has "removed $unit"
out_has "kept the config $conf and the data directory $data"
for f in "$bin/relaymq-server" "$bin/relaymq-cli" "$unit"; do
  [ ! -e "$f" ] || fail "$f is still there after --uninstall"
done
pass
same "$tmp/conf.edited" "$conf"
[ -f "$data/meta.db" ] && [ -n "$(ls -A "$data/queues" 2>/dev/null)" ] || fail "--uninstall lost the data directory"
pass
inst 0 --prefix "$prefix" --uninstall
out_has "not present: $bin/relaymq-server"
# Reinstalling finds the old config and data, and the server recovers the message.
inst 0 --prefix "$prefix" --from "$(dirname "$server_bin")"
out_has "kept existing $conf"
same "$tmp/conf.edited" "$conf"
rm -f "$tmp/ready.json"
"$bin/relaymq-server" --data-dir "$data" --listen 127.0.0.1:0 --amqp-listen off --metrics-listen off --http-listen off \
  --ready-file "$tmp/ready.json" --log-level warn 2>>"$tmp/server.log" &
server_pid=$!
for _ in $(seq 1 200); do
  [ -s "$tmp/ready.json" ] && break
  kill -0 "$server_pid" 2>/dev/null || fail "the reinstalled server exited at start: $(cat "$tmp/server.log")"
  sleep 0.05
done
[ -s "$tmp/ready.json" ] || fail "the reinstalled server did not write its ready file within 10 s"
RELAYMQ_ADDR=$(sed -E 's/.*"listen" *: *"([^"]+)".*/\1/' "$tmp/ready.json")
got=$("$bin/relaymq-cli" get install.kept)
[ "$got" = "survives uninstall" ] || fail "after uninstall + install the message is [$got]"
pass
stop_server
pass

echo "install-smoke: $checks passed, 0 failed, $skips skipped"
