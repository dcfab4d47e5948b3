#!/usr/bin/env bash
# Installs RelayMQ as a systemd service (docs/operations.md, "Installing as a systemd
# service"):
#
#   /usr/local/bin/relaymq-server, /usr/local/bin/relaymq-cli     0755
#   /etc/systemd/system/relaymq.service                           0644  (scripts/relaymq.service)
#   /etc/relaymq/                                                 0750 root:relaymq
#   /etc/relaymq/relaymq.toml     0640 root:relaymq, from scripts/relaymq.toml, never overwritten
#   /var/lib/relaymq/             0750 relaymq:relaymq            (the data directory)
#   the system user and group `relaymq` (no login shell, home /var/lib/relaymq)
#
# then `systemctl daemon-reload` when systemd runs and the prefix is /. Re-running it is
# safe: binaries and unit are replaced when they differ, the config is kept, modes fixed.
#
# Usage: scripts/install.sh [--prefix DIR] [--from DIR] [--no-user] [--uninstall]
#   --prefix DIR  install under DIR instead of / (a staging root, like DESTDIR: the files
#                 land in DIR/usr/local/bin, DIR/etc/..., DIR/var/lib/relaymq, but the unit
#                 keeps naming the real paths /usr/local/bin/..., /etc/relaymq/..., since
#                 the tree is meant to be copied to / or packaged). No user is created and
#                 systemd is not told; owners are set only where the relaymq user/group
#                 already exist and we are root. Needs no root.
#   --from DIR    take relaymq-server and relaymq-cli from DIR. Default: $RELAYMQ_BIN_SERVER
#                 and $RELAYMQ_BIN_CLI when set, else target/release (or
#                 $CARGO_TARGET_DIR/release), built with `cargo build --release` if missing.
#   --no-user     do not create the relaymq user and group (they come from elsewhere, e.g.
#                 LDAP or configuration management); owners are still set when they exist.
#   --uninstall   stop and disable the service (prefix / only), remove the binaries and the
#                 unit; keep the config, the data directory and the user (prints how to
#                 remove those by hand).
#
# Exit codes: 0 done, 1 failed (the message says what), 2 bad usage.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
prog=install.sh

prefix=/
from=
no_user=false
uninstall=false

usage() { sed -n '2,/^# Exit codes/p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "$prog: error: $*" >&2; exit 1; }
bad_usage() { echo "$prog: $*" >&2; echo "usage: scripts/install.sh [--prefix DIR] [--from DIR] [--no-user] [--uninstall]" >&2; exit 2; }
say() { echo "$prog: $*"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || bad_usage "--prefix needs a directory"; prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    --from) [ $# -ge 2 ] || bad_usage "--from needs a directory"; from=$2; shift 2 ;;
    --from=*) from=${1#--from=}; shift ;;
    --no-user) no_user=true; shift ;;
    --uninstall) uninstall=true; shift ;;
    -h|--help) usage; exit 0 ;;
    *) bad_usage "unknown argument '$1'" ;;
  esac
done

[ -n "$prefix" ] || bad_usage "--prefix needs a directory"
case "$prefix" in /*) ;; *) prefix=$PWD/$prefix ;; esac
# dest: the prefix without a trailing slash ("" for the real system), prepended to paths.
dest=${prefix%/}
while [ "${dest%/}" != "$dest" ]; do dest=${dest%/}; done
real_system=false
[ -z "$dest" ] && real_system=true

is_root=false
[ "$(id -u)" = 0 ] && is_root=true
if $real_system && ! $is_root; then
  die "installing into / needs root: run 'sudo scripts/install.sh', or install into a staging root with --prefix DIR"
fi

# systemd is the init system (sd_booted(3)'s test) and we manage the real system.
systemd_running=false
if $real_system && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
  systemd_running=true
fi

bin_dir=$dest/usr/local/bin
unit_path=$dest/etc/systemd/system/relaymq.service
conf_dir=$dest/etc/relaymq
conf_path=$conf_dir/relaymq.toml
data_dir=$dest/var/lib/relaymq
user=relaymq
group=relaymq

have_user() { getent passwd "$user" >/dev/null 2>&1; }
have_group() { getent group "$group" >/dev/null 2>&1; }

# --- uninstall ------------------------------------------------------------------------------
if $uninstall; then
  if $systemd_running && systemctl list-unit-files relaymq.service >/dev/null 2>&1 \
    && [ -e "$unit_path" ]; then
    systemctl disable --now relaymq.service >/dev/null 2>&1 || true
    say "stopped and disabled relaymq.service"
  fi
  for f in "$bin_dir/relaymq-server" "$bin_dir/relaymq-cli" "$unit_path"; do
    if [ -e "$f" ] || [ -L "$f" ]; then
      rm -f "$f"
      say "removed $f"
    else
      say "not present: $f"
    fi
  done
  if $systemd_running; then
    systemctl daemon-reload
    say "ran systemctl daemon-reload"
  fi
  say "kept the config $conf_path and the data directory $data_dir"
  if $real_system && have_user; then
    say "kept the user and group $user (remove with: userdel $user; groupdel $group 2>/dev/null)"
  fi
  say "to remove everything: rm -r $conf_dir $data_dir"
  exit 0
fi

# --- the files to install ------------------------------------------------------------------------
unit_src=$root/scripts/relaymq.service
conf_src=$root/scripts/relaymq.toml
[ -r "$unit_src" ] || die "missing $unit_src (run this script from a RelayMQ checkout)"
[ -r "$conf_src" ] || die "missing $conf_src (run this script from a RelayMQ checkout)"

if [ -n "$from" ]; then
  [ -d "$from" ] || die "--from $from: not a directory"
  server_src=$from/relaymq-server
  cli_src=$from/relaymq-cli
elif [ -n "${RELAYMQ_BIN_SERVER:-}" ] || [ -n "${RELAYMQ_BIN_CLI:-}" ]; then
  server_src=${RELAYMQ_BIN_SERVER:-}
  cli_src=${RELAYMQ_BIN_CLI:-}
  [ -n "$server_src" ] || die "RELAYMQ_BIN_CLI is set but RELAYMQ_BIN_SERVER is not: set both, or use --from DIR"
  [ -n "$cli_src" ] || die "RELAYMQ_BIN_SERVER is set but RELAYMQ_BIN_CLI is not: set both, or use --from DIR"
else
  target=${CARGO_TARGET_DIR:-$root/target}
  case "$target" in /*) ;; *) target=$root/$target ;; esac
  server_src=$target/release/relaymq-server
  cli_src=$target/release/relaymq-cli
  if [ ! -x "$server_src" ] || [ ! -x "$cli_src" ]; then
    command -v cargo >/dev/null \
      || die "$server_src or $cli_src is missing and cargo is not on PATH: build first with 'cargo build --release' (as your user), then re-run, or pass --from DIR"
    say "building the release binaries (cargo build --release)"
    (cd "$root" && cargo build --release --quiet --bin relaymq-server --bin relaymq-cli) \
      || die "cargo build --release failed"
  fi
fi
for b in "$server_src" "$cli_src"; do
  [ -f "$b" ] && [ -x "$b" ] || die "$b: not an executable file"
done

# --- user and group --------------------------------------------------------------------------------
if $real_system && ! $no_user; then
  if have_group; then
    say "group $group exists"
  else
    groupadd --system "$group" || die "groupadd --system $group failed"
    say "created system group $group"
  fi
  if have_user; then
    say "user $user exists"
  else
    nologin=$(command -v nologin || true)
    for c in /usr/sbin/nologin /sbin/nologin /bin/false; do
      [ -n "$nologin" ] && break
      [ -x "$c" ] && nologin=$c
    done
    useradd --system --gid "$group" --home-dir /var/lib/relaymq --no-create-home \
      --shell "${nologin:-/bin/false}" --comment "RelayMQ message broker" "$user" \
      || die "useradd --system $user failed"
    say "created system user $user (shell ${nologin:-/bin/false}, home /var/lib/relaymq)"
  fi
elif $real_system; then
  say "--no-user: not creating the user/group $user"
  have_user || say "warning: user $user does not exist; the unit's User=$user needs it"
else
  say "prefix $prefix: not creating the user/group $user (done at install time on the real system)"
fi

# Owners are set when we are root and the account exists; otherwise the files keep ours.
owner_user=; owner_group=
if $is_root; then
  if have_user; then owner_user=$user; fi
  if have_group; then owner_group=$group; fi
fi
if [ -z "$owner_group" ]; then
  say "note: not root or no group $group here: owners are left as $(id -un):$(id -gn)"
fi

# install_file SRC DEST MODE: copies when missing or different, says which.
install_file() {
  local src=$1 dst=$2 mode=$3
  if [ -f "$dst" ] && cmp -s "$src" "$dst"; then
    if [ "$(stat -c %a "$dst")" = "${mode#0}" ]; then
      say "unchanged $dst"
    else
      chmod "$mode" "$dst"
      say "unchanged $dst (mode put back to $mode)"
    fi
  else
    local verb=installed
    [ -e "$dst" ] && verb=updated
    # install(1) writes a new file and renames it: a running relaymq-server keeps its inode.
    install -m "$mode" "$src" "$dst"
    say "$verb $dst (mode $mode)"
  fi
}

# make_dir DIR MODE [OWNER] [GROUP]: creates DIR or fixes its mode and owners.
make_dir() {
  local dir=$1 mode=$2 o=${3:-} g=${4:-} verb=exists
  [ -d "$dir" ] || { mkdir -p "$dir"; verb=created; }
  chmod "$mode" "$dir"
  if [ -n "$o" ]; then chown "$o" "$dir"; fi
  if [ -n "$g" ]; then chgrp "$g" "$dir"; fi
  say "$verb $dir (mode $mode${o:+, owner $o}${g:+, group $g})"
}

# --- binaries, unit, directories, config -----------------------------------------------------------
mkdir -p "$bin_dir" "$(dirname "$unit_path")"
install_file "$server_src" "$bin_dir/relaymq-server" 0755
install_file "$cli_src" "$bin_dir/relaymq-cli" 0755
install_file "$unit_src" "$unit_path" 0644

make_dir "$conf_dir" 0750 "" "$owner_group"
if [ -e "$conf_path" ]; then
  # Never overwritten, but its mode and group are put back: it may hold default-pass.
  chmod 0640 "$conf_path"
  if [ -n "$owner_group" ]; then chgrp "$owner_group" "$conf_path"; fi
  say "kept existing $conf_path (never overwritten; mode 0640${owner_group:+, group $owner_group}; the sample is $conf_src)"
else
  install -m 0640 "$conf_src" "$conf_path"
  if [ -n "$owner_group" ]; then chgrp "$owner_group" "$conf_path"; fi
  say "installed $conf_path (mode 0640${owner_group:+, group $owner_group}) from $conf_src"
fi

mkdir -p "$(dirname "$data_dir")"
make_dir "$data_dir" 0750 "$owner_user" "$owner_group"

# --- systemd ----------------------------------------------------------------------------------
if $systemd_running; then
  systemctl daemon-reload || die "systemctl daemon-reload failed"
  say "ran systemctl daemon-reload"
  if systemctl is-active --quiet relaymq.service; then
    say "relaymq.service is running: 'systemctl restart relaymq' to use the new binaries"
  fi
  say "next: edit $conf_path, then 'systemctl enable --now relaymq'"
elif $real_system; then
  say "systemd is not running here: no daemon-reload; start by hand with: sudo -u $user /usr/local/bin/relaymq-server --config /etc/relaymq/relaymq.toml"
else
  say "staged under $prefix (the unit names the real paths: copy the tree to / to use it)"
fi
say "done"
