#!/usr/bin/env bash
# The whole test suite, on a fresh Debian or Ubuntu machine that has only the
# distribution's Python: installs what the tests need, then runs `cargo test --profile ci`
# (Cargo.toml: release optimisation with debug assertions and overflow checks on, so the
# core's invariant checks run; its build goes to target/ci/).
# The tests start their own servers on 127.0.0.1 only.
#
# What it installs, when missing:
# - Python clients (pika for the AMQP interop tests; pyrabbit2 and amqpstorm, whose
#   amqpstorm.management drives the management HTTP API; selenium, which drives the web
#   UI in headless chromium; all pinned in
#   tests/requirements.txt, which needs Python 3.11 or later) into a virtual environment
#   of the project, target/test-venv: never into the system's Python, whose pip Debian
#   refuses (PEP 668, "externally-managed-environment"). It lives under target/ so git
#   ignores it and `cargo clean` removes it; the next run makes it again (a few seconds).
#   It is remade when tests/requirements.txt changes. Its bin/ goes first on PATH, so
#   every `python3` the tests and scripts/*.sh run is the venv's.
# - Debian packages, with apt-get as root or through sudo: build-essential (a C compiler
#   and make, for jemalloc, SQLite and ring), python3-venv (the venv module with
#   ensurepip; Debian and Ubuntu ship it apart from python3), python3 itself if absent,
#   amqp-tools, the Perl modules nagios-plugins-rabbitmq's checks use
#   (libmonitoring-plugin-perl, libwww-perl, libjson-perl, liburi-perl; libraries that
#   start no service), and chromium with chromium-driver for the web UI's browser tests
#   (headless, driven by selenium from the venv; no service).
# - The management HTTP API's command-line clients, taken out of Debian's packages
#   without installing them (`apt-get download`, which needs no root, then `dpkg-deb -x`
#   in a temporary directory), into target/test-tools, once (kept while there):
#   rabbitmqadmin v1, the Python script in rabbitmq-server (RabbitMQ itself is neither
#   installed nor started: no test needs one), as target/test-tools/bin/rabbitmqadmin;
#   nagios-plugins-rabbitmq's check_rabbitmq_* Perl scripts, in
#   target/test-tools/nagios-plugins-rabbitmq/. apt-get download runs `apt-get update`
#   (as root) first only when the package lists are missing or out of date.
# It fails loudly when something cannot be installed, and when cargo is older than
# Cargo.toml's rust-version (install Rust with rustup).
#
# It exports RELAYMQ_TEST_REQUIRE_CLIENTS=1: a test that needs one of these clients then
# fails when it is missing instead of skipping itself (as a plain `cargo test` does,
# saying so); and RELAYMQ_RABBITMQADMIN (the rabbitmqadmin script) and
# RELAYMQ_NAGIOS_PLUGINS_DIR (the directory of the check_rabbitmq_* scripts) for the
# tests (tests/common/clients.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv=$root/target/test-venv
requirements=$root/tests/requirements.txt

die() { echo "error: $*" >&2; exit 1; }
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else die "not root and no sudo: cannot run $*"; fi
}
apt_updated=
apt_update() {
  if [ -z "$apt_updated" ]; then
    as_root apt-get update -q || die "apt-get update failed"
    apt_updated=1
  fi
}
apt_install() {
  command -v apt-get >/dev/null || die "$* is missing and there is no apt-get here: install $* yourself"
  echo "installing $* (apt-get)"
  apt_update
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" \
    || die "apt-get install $* failed"
}
# Downloads Debian's package $1 (apt-get download: nothing is installed, no root needed)
# and unpacks its files into the new directory $2, for a tool the tests take out of it.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
deb_unpack() {
  local package=$1 into=$2 download=$scratch/download
  if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    die "the tests need a file of Debian's $package and there is no apt-get or dpkg-deb here"
  fi
  # As root, apt fetches as the user _apt, who cannot write to our private directory;
  # fetching as root instead is what apt then does anyway, minus its warning.
  local options=()
  [ "$(id -u)" = 0 ] && options=(-o APT::Sandbox::User=root)
  rm -rf "$download" && mkdir -p "$download"
  echo "downloading Debian's $package (apt-get download; it is not installed)"
  if ! (cd "$download" && apt-get download -q "${options[@]}" "$package"); then
    # No package lists yet (a fresh container), or old ones naming a file the mirror no
    # longer has: update them once and try again.
    apt_update
    (cd "$download" && apt-get download -q "${options[@]}" "$package") \
      || die "apt-get download $package failed"
  fi
  rm -rf "$into"
  dpkg-deb -x "$download/$package"_*.deb "$into" || die "dpkg-deb -x could not unpack $package"
  rm -rf "$download"
}

command -v cargo >/dev/null || die "cargo is not installed (https://rustup.rs)"
[ -f "$requirements" ] || die "$requirements is missing"

# ---- the build's needs --------------------------------------------------------------------
# Cargo.toml's rust-version: a distribution's older cargo (Debian 12 ships 1.63) cannot
# build it; rustup's stable can.
rust_min=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml)
rust_now=$(cargo --version | awk '{print $2}')
if [ -n "$rust_min" ] && [ "$(printf '%s\n%s\n' "$rust_min" "$rust_now" | sort -V | head -n 1)" != "$rust_min" ]; then
  die "cargo $rust_now is older than this project's rust-version $rust_min: install Rust with rustup (https://rustup.rs)"
fi
# A C compiler and make: jemalloc (the server's allocator) is built with configure and
# make, and SQLite and ring are compiled C. Debian: build-essential.
if ! command -v cc >/dev/null || ! command -v make >/dev/null; then
  apt_install build-essential
fi

# ---- the Python virtual environment -----------------------------------------------------
venv_current() {
  [ -x "$venv/bin/python3" ] \
    && "$venv/bin/python3" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' 2>/dev/null \
    && cmp -s "$requirements" "$venv/requirements.installed"
}
make_venv() { rm -rf "$venv" && mkdir -p "$(dirname "$venv")" && python3 -m venv "$venv"; }

if ! venv_current; then
  command -v python3 >/dev/null || apt_install python3 python3-venv
  echo "making the Python virtual environment $venv ($(python3 --version 2>&1), $(command -v python3))"
  if ! make_venv; then
    # Debian and Ubuntu leave ensurepip out of python3: it is in python3-venv.
    apt_install python3-venv
    make_venv || die "python3 -m venv $venv failed even with python3-venv installed"
  fi
  "$venv/bin/python3" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "$("$venv/bin/python3" --version 2>&1) is too old: amqpstorm (tests/requirements.txt) needs Python 3.11 or later (Debian 12, Ubuntu 24.04)"
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check -r "$requirements" \
    || die "pip could not install $requirements into $venv"
  cp "$requirements" "$venv/requirements.installed"
fi
export VIRTUAL_ENV=$venv
export PATH="$venv/bin:$PATH"
hash -r
[ "$(command -v python3)" = "$venv/bin/python3" ] \
  || die "python3 on PATH is $(command -v python3), not $venv/bin/python3"
python3 - <<'PY' || die "the Python clients of $requirements do not import in $venv"
import sys
from importlib.metadata import version
import amqpstorm.management, pika, pyrabbit2, selenium
print("python", sys.version.split()[0], sys.executable, "-",
      ", ".join(f"{name} {version(name)}" for name in ("pika", "pyrabbit2", "amqpstorm", "selenium")))
PY

# ---- Debian's amqp-tools ----------------------------------------------------------------
if ! command -v amqp-publish >/dev/null; then
  apt_install amqp-tools
fi
for tool in amqp-publish amqp-consume amqp-get amqp-declare-queue amqp-delete-queue; do
  command -v "$tool" >/dev/null || die "$tool did not install (amqp-tools)"
done

# ---- Debian's chromium and chromium-driver (the web UI's browser tests) -----------------
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  apt_install chromium chromium-driver
fi
/usr/bin/chromedriver --version >/dev/null 2>&1 || die "/usr/bin/chromedriver does not run"

# ---- the management API's command-line clients, taken out of Debian's packages ----------
# Neither package is installed: rabbitmq-server would install (and start) RabbitMQ itself.
# apt-get download fetches the .deb, and only the scripts are kept, in target/test-tools.
tools=$root/target/test-tools

# rabbitmqadmin v1, the Python script of RabbitMQ's management plugin (standard library
# only). The plugin's copy starts `#!/usr/bin/env python3`, so it runs with the venv's
# python3 (Debian's /usr/bin/rabbitmqadmin is the same script naming /usr/bin/python3).
rabbitmqadmin=$tools/bin/rabbitmqadmin
if [ ! -f "$rabbitmqadmin" ]; then
  deb_unpack rabbitmq-server "$scratch/rabbitmq-server"
  found=$(find "$scratch/rabbitmq-server" -type f -path '*/rabbitmq_management-*/priv/www/cli/rabbitmqadmin' | head -n 1)
  [ -n "$found" ] || found=$scratch/rabbitmq-server/usr/bin/rabbitmqadmin
  [ -f "$found" ] || die "Debian's rabbitmq-server package has no rabbitmqadmin"
  mkdir -p "$tools/bin"
  install -m 755 "$found" "$rabbitmqadmin.partial" || die "could not copy rabbitmqadmin to $tools/bin"
  mv "$rabbitmqadmin.partial" "$rabbitmqadmin"
  rm -rf "$scratch/rabbitmq-server"
fi
version=$("$rabbitmqadmin" --version 2>&1) || die "$rabbitmqadmin --version does not run: $version"
[[ $version == "rabbitmqadmin "* ]] || die "$rabbitmqadmin --version printed: $version"
echo "$version: $rabbitmqadmin"

# nagios-plugins-rabbitmq: Perl checks (check_rabbitmq_*) on Monitoring::Plugin, LWP, JSON
# and URI, whose Debian packages start no service and are installed when missing.
nagios=$tools/nagios-plugins-rabbitmq
nagios_checks=(check_rabbitmq_aliveness check_rabbitmq_overview check_rabbitmq_queue
  check_rabbitmq_connections check_rabbitmq_server)
nagios_present() {
  local check
  for check in "${nagios_checks[@]}"; do [ -x "$nagios/$check" ] || return 1; done
}
if ! nagios_present; then
  deb_unpack nagios-plugins-rabbitmq "$scratch/nagios-plugins-rabbitmq"
  rm -rf "$nagios" && mkdir -p "$nagios"
  cp "$scratch"/nagios-plugins-rabbitmq/usr/bin/check_rabbitmq_* "$nagios/" \
    || die "Debian's nagios-plugins-rabbitmq package has no check_rabbitmq_* scripts"
  rm -rf "$scratch/nagios-plugins-rabbitmq"
  nagios_present || die "a check of ${nagios_checks[*]} is missing from nagios-plugins-rabbitmq"
fi
if ! perl -MMonitoring::Plugin -MLWP::UserAgent -MURI::Escape -MJSON -e 1 2>/dev/null; then
  apt_install libmonitoring-plugin-perl libwww-perl libjson-perl liburi-perl
fi
# Monitoring::Plugin prints the help and exits 3 (UNKNOWN); a module that does not load
# exits 2.
for check in "${nagios_checks[@]}"; do
  status=0
  help=$("$nagios/$check" --help 2>&1) || status=$?
  if [ "$status" != 3 ] || [[ $help != *Usage:* ]]; then
    die "$nagios/$check --help exited $status, not 3 with its usage: $help"
  fi
done
echo "nagios-plugins-rabbitmq: ${nagios_checks[*]} in $nagios"

# ---- the suite ---------------------------------------------------------------------------
export RELAYMQ_TEST_REQUIRE_CLIENTS=1
export RELAYMQ_RABBITMQADMIN=$rabbitmqadmin
export RELAYMQ_NAGIOS_PLUGINS_DIR=$nagios
cargo --version
cargo test --profile ci
