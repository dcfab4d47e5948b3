"""Publisher confirms: 1,000 persistent, mandatory publishes on a confirm channel, each
acked by the broker, while a consumer on another connection (prefetch 10, manual acks)
keeps receiving them all, in order, exactly once. A mandatory publish nobody can take
is returned (pika raises UnroutableError) and the channel stays usable."""

import time

import pika
from pika import BasicProperties, DeliveryMode

from interop import check_eq, connect, fail, ok, pump_until, start

N = 1000
port = start(60)

consumer = connect(port, "consumer")
cch = consumer.channel()
cch.queue_declare(queue="confirmed", durable=True)
cch.basic_qos(prefetch_count=10)
received = []


def on_message(ch, method, props, body):
    received.append((method.redelivered, props.delivery_mode, body.decode()))
    ch.basic_ack(delivery_tag=method.delivery_tag)


cch.basic_consume(queue="confirmed", on_message_callback=on_message)

publisher = connect(port, "publisher")
pch = publisher.channel()
pch.confirm_delivery()
props = BasicProperties(delivery_mode=DeliveryMode.Persistent, content_type="text/plain")
started = time.monotonic()
for i in range(N):
    # With confirms on, basic_publish waits for the broker's basic.ack and raises
    # NackError on a basic.nack and UnroutableError on a basic.return.
    try:
        pch.basic_publish(exchange="", routing_key="confirmed", body=f"m{i}", properties=props,
                          mandatory=True)
    except (pika.exceptions.NackError, pika.exceptions.UnroutableError) as e:
        fail(f"publish {i} was not confirmed: {e!r}")
    # Let the consumer run between publishes: it must keep up, not stall.
    consumer.process_data_events(time_limit=0)
published_s = time.monotonic() - started

if not pump_until(consumer, lambda: len(received) >= N, timeout=10):
    fail(f"the consumer received {len(received)} of {N} confirmed messages")
consumer.process_data_events(time_limit=0.3)
want = [(False, 2, f"m{i}") for i in range(N)]
if received != want:
    bad = next(i for i, (g, w) in enumerate(zip(received + [None] * N, want)) if g != w)
    fail(f"{len(received)} deliveries; first difference at {bad}: got "
         f"{received[bad] if bad < len(received) else None!r}, want {want[bad]!r}")

# Unroutable and mandatory: returned, then confirmed; the channel stays open.
try:
    pch.basic_publish(exchange="", routing_key="no-such-queue", body="lost", mandatory=True)
    fail("a mandatory publish to no queue was not returned")
except pika.exceptions.UnroutableError as e:
    check_eq([m.body for m in e.messages], [b"lost"], "returned messages")
pch.basic_publish(exchange="", routing_key="confirmed", body="after", mandatory=True)
if not pump_until(consumer, lambda: len(received) == N + 1):
    fail("no delivery after the returned publish")
check_eq(received[-1][2], "after", "last delivery")
check_eq(pch.queue_declare(queue="confirmed", durable=True, passive=True).method.message_count,
         0, "messages left")
publisher.close()
consumer.close()
ok(f"confirms ({N} confirmed publishes in {published_s:.2f} s)")
