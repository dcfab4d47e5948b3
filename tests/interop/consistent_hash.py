"""The consistent-hash exchange (`x-consistent-hash`, RabbitMQ's plugin
rabbitmq_consistent_hash_exchange) as its README's Python examples use it: queues bound
with weights as binding keys, messages spread over them by routing key, by a header
(`hash-header`) or by a property (`hash-property`), and the plugin's refusals of bad
weights and bad arguments."""

import random
import time

import pika

from interop import channel_refused, check, check_eq, connect, fail, ok, start

# Messages spread by routing key.
N = 30000
# Largest relative difference allowed between a queue's share and its weight's share.
TOLERANCE = 0.05
# Longest wait for the published messages to be counted in their queues.
ROUTED_WAIT = 20.0

port = start(50)
conn = connect(port, "consistent_hash.py")
ch = conn.channel()


def ready(queue):
    return ch.queue_declare(queue=queue, passive=True).method.message_count


def wait_routed(queues, n):
    """The queues' ready counts once they add up to `n` (bounded wait)."""
    deadline = time.monotonic() + ROUTED_WAIT
    while True:
        counts = [ready(q) for q in queues]
        if sum(counts) >= n or time.monotonic() > deadline:
            return counts
        time.sleep(0.05)


def refused(what, code, text, action):
    """Runs `action` on a fresh channel, which must be closed with `code` and `text`."""
    channel_refused(conn, what, code, text, action)


# --- By routing key: weights 1, 2, 3 -------------------------------------------------------
ch.exchange_declare(exchange="chx", exchange_type="x-consistent-hash")
weights = {"chx-1": 1, "chx-2": 2, "chx-3": 3}
for q, w in weights.items():
    ch.queue_declare(queue=q)
    ch.queue_bind(exchange="chx", queue=q, routing_key=str(w))

rng = random.Random(20240611)
for _ in range(N):
    ch.basic_publish(exchange="chx", routing_key=f"{rng.getrandbits(64):x}", body=b"")
counts = wait_routed(list(weights), N)
check_eq(sum(counts), N, f"messages routed ({counts})")
total_weight = sum(weights.values())
for count, (q, w) in zip(counts, weights.items()):
    expected = N * w / total_weight
    off = abs(count - expected) / expected
    check(off < TOLERANCE, f"{q} (weight {w}) got {count} of {N}, {off:.1%} off its share")
print(f"spread of {N} routing keys over weights 1, 2, 3: {counts}")

# --- By header ----------------------------------------------------------------------------
ch.exchange_declare(exchange="chx-h", exchange_type="x-consistent-hash",
                    arguments={"hash-header": "hash-on"})
header_queues = ["chx-h-1", "chx-h-2", "chx-h-3"]
for q in header_queues:
    ch.queue_declare(queue=q)
    ch.queue_bind(exchange="chx-h", queue=q, routing_key="1")
values = [str(i) for i in range(40)]
for round_ in range(5):
    for v in values:
        ch.basic_publish(exchange="chx-h", routing_key="", body=v.encode(),
                         properties=pika.BasicProperties(headers={"hash-on": v}))
wait_routed(header_queues, len(values) * 5)
owner = {}
for q in header_queues:
    while True:
        method, props, body = ch.basic_get(queue=q, auto_ack=True)
        if method is None:
            break
        v = props.headers["hash-on"]
        check(owner.setdefault(v, q) == q, f"header value {v} reached {owner[v]} and {q}")
check_eq(sorted(owner, key=int), values, "header values received")
check(len(set(owner.values())) > 1, f"one queue got every header value: {owner}")

# --- By property --------------------------------------------------------------------------
ch.exchange_declare(exchange="chx-p", exchange_type="x-consistent-hash",
                    arguments={"hash-property": "message_id"})
property_queues = ["chx-p-1", "chx-p-2"]
for q in property_queues:
    ch.queue_declare(queue=q)
    ch.queue_bind(exchange="chx-p", queue=q, routing_key="1")
for round_ in range(3):
    for v in values:
        ch.basic_publish(exchange="chx-p", routing_key=f"rk-{round_}", body=b"",
                         properties=pika.BasicProperties(message_id=f"id-{v}"))
wait_routed(property_queues, len(values) * 3)
owner = {}
for q in property_queues:
    while True:
        method, props, body = ch.basic_get(queue=q, auto_ack=True)
        if method is None:
            break
        check(owner.setdefault(props.message_id, q) == q,
              f"{props.message_id} reached {owner[props.message_id]} and {q}")
check_eq(len(owner), len(values), "message ids received")
check(len(set(owner.values())) > 1, f"one queue got every message id: {owner}")

# --- Refusals, with the plugin's texts ----------------------------------------------------
for key, text in [
    ("abc", 'PRECONDITION_FAILED - The binding key must be an integer: <<"abc">>'),
    ("0", "PRECONDITION_FAILED - The binding key must be greater than 0"),
    ("-5", "PRECONDITION_FAILED - The binding key must be greater than 0"),
    ("10001", "PRECONDITION_FAILED - The binding key must not exceed 10000"),
]:
    refused(f"queue.bind with weight {key!r}", 406, text,
            lambda c, key=key: c.queue_bind(exchange="chx", queue="chx-1", routing_key=key))
refused("hash-header with hash-property", 406,
        "PRECONDITION_FAILED - hash-header and hash-property are mutually exclusive",
        lambda c: c.exchange_declare(exchange="chx-both", exchange_type="x-consistent-hash",
                                     arguments={"hash-header": "h",
                                                "hash-property": "message_id"}))
refused("hash-property app_id", 406, "PRECONDITION_FAILED - Unsupported property: app_id",
        lambda c: c.exchange_declare(exchange="chx-app", exchange_type="x-consistent-hash",
                                     arguments={"hash-property": "app_id"}))

conn.close()
ok("consistent_hash")
