#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what the AMQP interop tests need
# (Python's pika from PyPI, Debian's amqp-tools), then runs `cargo test --release`.
# The tests start their own servers on 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "error: cargo is not installed" >&2; exit 1; }
command -v python3 >/dev/null || { echo "error: python3 is not installed" >&2; exit 1; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! python3 -c 'import pika' 2>/dev/null; then
  echo "installing pika (PyPI)"
  python3 -m pip install --quiet pika
fi
python3 -c 'import pika; print("pika", pika.__version__)'

if ! command -v amqp-publish >/dev/null; then
  echo "installing amqp-tools (Debian)"
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q amqp-tools
fi
for tool in amqp-publish amqp-consume amqp-get amqp-declare-queue; do
  command -v "$tool" >/dev/null || { echo "error: $tool did not install (amqp-tools)" >&2; exit 1; }
done

cargo --version
cargo test --release
