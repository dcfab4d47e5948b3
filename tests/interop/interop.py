"""Shared helpers for the pika interop scenarios (tests/it/amqp_interop.rs runs them).

Each scenario is `python3 tests/interop/<name>.py <amqp-port>`. It exits 0 when every
check holds, and otherwise prints `FAIL: ...` to stderr and exits 1. A watchdog ends a
scenario that runs longer than its bound, so nothing can hang.
"""

import os
import signal
import sys
import time

import pika

HOST = "127.0.0.1"
# Longest wait for something that must arrive.
WAIT = 5.0
# How long to watch for something that must not arrive.
QUIET = 0.5


def fail(text):
    # RELAYMQ_INTEROP_KEEP_GOING=1: report and go on, to list every difference of another
    # broker (a RabbitMQ run recorded as a fixture) rather than stop at the first.
    print(f"FAIL: {text}", file=sys.stderr, flush=True)
    if os.environ.get("RELAYMQ_INTEROP_KEEP_GOING") != "1":
        sys.exit(1)


def check(cond, text):
    if not cond:
        fail(text)


def check_eq(got, want, what):
    if got != want:
        fail(f"{what}: got {got!r}, want {want!r}")


def start(limit_s=30, args=0):
    """Parses the port (and `args` more arguments) from argv and arms a watchdog of
    `limit_s` seconds."""
    if len(sys.argv) != 2 + args:
        print(f"usage: {sys.argv[0]} <amqp-port>" + " <arg>" * args, file=sys.stderr)
        sys.exit(2)

    def on_alarm(_sig, _frame):
        print(f"FAIL: {sys.argv[0]} did not finish within {limit_s} s", file=sys.stderr,
              flush=True)
        os._exit(3)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(limit_s)
    return int(sys.argv[1])


def connect(port, name="interop"):
    params = pika.ConnectionParameters(
        host=HOST,
        port=port,
        credentials=pika.PlainCredentials("guest", "guest"),
        socket_timeout=WAIT,
        stack_timeout=WAIT * 2,
        blocked_connection_timeout=WAIT * 2,
        client_properties={"connection_name": name},
    )
    return pika.BlockingConnection(params)


def pump_until(connection, done, timeout=WAIT):
    """Processes I/O on `connection` until `done()` is true or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while not done():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        connection.process_data_events(time_limit=min(left, 0.1))
    return True


def pump_for(connection, seconds=QUIET):
    """Processes I/O on `connection` for `seconds` (to see nothing more arrives)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.05)


def collect(connection, channel, queue, n, auto_ack=True, timeout=WAIT):
    """Consumes `n` bodies (decoded) from `queue`, in arrival order, then cancels."""
    got = []

    def on_message(ch, method, _props, body):
        got.append(body.decode())
        if not auto_ack:
            ch.basic_ack(method.delivery_tag)

    tag = channel.basic_consume(queue, on_message, auto_ack=auto_ack)
    if not pump_until(connection, lambda: len(got) >= n, timeout):
        fail(f"expected {n} messages from {queue!r} within {timeout} s, got {got!r}")
    # Anything beyond n would be a bug too: look briefly.
    pump_for(connection)
    channel.basic_cancel(tag)
    check_eq(len(got), n, f"messages consumed from {queue!r} ({got!r})")
    return got


def ok(name):
    print(f"{name}: ok", flush=True)


def channel_refused(conn, what, code, text, action):
    """Runs `action` on a fresh channel of `conn`, which must be closed with `code` and
    `text` (pika's "CODE_NAME - text" form)."""
    c = conn.channel()
    try:
        action(c)
        fail(f"{what} was accepted")
    except pika.exceptions.ChannelClosedByBroker as e:
        check_eq((e.reply_code, e.reply_text), (code, text), what)
