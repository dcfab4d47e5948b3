#!/usr/bin/env bash
# The whole test suite, on a fresh Debian or Ubuntu machine that has only the
# distribution's Python: installs what the tests need, then runs `cargo test --profile ci`
# (Cargo.toml: release optimisation with debug assertions and overflow checks on, so the
# core's invariant checks run; its build goes to target/ci/).
# The tests start their own servers on 127.0.0.1 only.
#
# What it installs, when missing:
# - Python tools (pika for the AMQP interop tests, and whatever else
#   tests/requirements.txt lists) into a virtual environment of the project,
#   target/test-venv: never into the system's Python, whose pip Debian refuses
#   (PEP 668, "externally-managed-environment"). It lives under target/ so git ignores it
#   and `cargo clean` removes it; the next run makes it again (a few seconds). It is remade
#   when tests/requirements.txt changes. Its bin/ goes first on PATH, so every `python3`
#   the tests and scripts/*.sh run is the venv's.
# - Debian packages, with apt-get as root or through sudo: build-essential (a C compiler
#   and make, for jemalloc, SQLite and ring), python3-venv (the venv module with
#   ensurepip; Debian and Ubuntu ship it apart from python3), python3 itself if absent,
#   and amqp-tools. It fails loudly when one cannot be installed, and when cargo is older
#   than Cargo.toml's rust-version (install Rust with rustup).
#
# It exports RELAYMQ_TEST_REQUIRE_CLIENTS=1: a test that needs pika or amqp-tools then
# fails when they are missing instead of skipping itself (as a plain `cargo test` does,
# saying so).
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
apt_install() {
  command -v apt-get >/dev/null || die "$* is missing and there is no apt-get here: install $* yourself"
  echo "installing $* (apt-get)"
  if [ -z "$apt_updated" ]; then
    as_root apt-get update -q || die "apt-get update failed"
    apt_updated=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" \
    || die "apt-get install $* failed"
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
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check -r "$requirements" \
    || die "pip could not install $requirements into $venv"
  cp "$requirements" "$venv/requirements.installed"
fi
export VIRTUAL_ENV=$venv
export PATH="$venv/bin:$PATH"
hash -r
[ "$(command -v python3)" = "$venv/bin/python3" ] \
  || die "python3 on PATH is $(command -v python3), not $venv/bin/python3"
python3 -c 'import sys, pika; print("python", sys.version.split()[0], sys.executable, "- pika", pika.__version__)' \
  || die "pika does not import in $venv"

# ---- Debian's amqp-tools ----------------------------------------------------------------
if ! command -v amqp-publish >/dev/null; then
  apt_install amqp-tools
fi
for tool in amqp-publish amqp-consume amqp-get amqp-declare-queue amqp-delete-queue; do
  command -v "$tool" >/dev/null || die "$tool did not install (amqp-tools)"
done

# ---- the suite ---------------------------------------------------------------------------
export RELAYMQ_TEST_REQUIRE_CLIENTS=1
cargo --version
cargo test --profile ci
