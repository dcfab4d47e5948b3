"""Delayed delivery as code written for RabbitMQ's delayed-message plugin uses it (the
plugin's README examples): an `x-delayed-message` exchange with `x-delayed-type`, messages
with an `x-delay` header in ms delivered once it has passed, in due order, with `x-delay`
negated; no, zero or a negative delay delivers at once; a mandatory delayed publish is
returned at once (NO_ROUTE) and still delivered later; confirms; a topic delayed type; the
plugin's refusals. Then RabbitMQ 4.3's delayed retry on a quorum queue: a rejected message
comes back after min(min x delivery count, max)."""

import time

import pika

from interop import channel_refused, check, check_eq, connect, fail, pump_until, start

# Slack allowed past a due time on a loaded test machine, in s.
LATE = 0.5

port = start(60)
conn = connect(port, "delayed_message.py")
ch = conn.channel()
ch.confirm_delivery()


def refused(what, code, text, action):
    """Runs `action` on a fresh channel, which must be closed with `code` and `text`."""
    channel_refused(conn, what, code, text, action)


# --- The plugin's refusals -----------------------------------------------------------------
refused("no x-delayed-type", 406,
        "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing "
        "exchange type",
        lambda c: c.exchange_declare("bad", "x-delayed-message"))
refused("an unknown x-delayed-type", 406, "PRECONDITION_FAILED - unknown exchange type 'nope'",
        lambda c: c.exchange_declare("bad", "x-delayed-message",
                                     arguments={"x-delayed-type": "nope"}))
refused("an unknown type", 406, "PRECONDITION_FAILED - unknown exchange type 'x-nope'",
        lambda c: c.exchange_declare("bad", "x-nope"))
refused("x-delayed-message as its own type", 406,
        "PRECONDITION_FAILED - Invalid argument, 'x-delayed-message' can't be used for "
        "'x-delayed-type'",
        lambda c: c.exchange_declare("bad", "x-delayed-message",
                                     arguments={"x-delayed-type": "x-delayed-message"}))

# --- Delays, due order, the negated header ---------------------------------------------------
ch.exchange_declare("delayed", "x-delayed-message", durable=True,
                    arguments={"x-delayed-type": "direct"})
ch.queue_declare("delayed-q", durable=True)
ch.queue_bind("delayed-q", "delayed", "k")

got = []


def on_message(_c, method, props, body):
    got.append((time.monotonic(), body.decode(), (props.headers or {}).get("x-delay")))


ch.basic_consume("delayed-q", on_message, auto_ack=True)
t0 = time.monotonic()
for delay in [900, 300, 600]:
    ch.basic_publish("delayed", "k", f"d{delay}".encode(),
                     pika.BasicProperties(headers={"x-delay": delay}, delivery_mode=2))
# Published after the delayed ones, delivered before them.
ch.basic_publish("delayed", "k", b"none")
ch.basic_publish("delayed", "k", b"zero", pika.BasicProperties(headers={"x-delay": 0}))
ch.basic_publish("delayed", "k", b"negative", pika.BasicProperties(headers={"x-delay": -50}))
check(pump_until(conn, lambda: len(got) >= 3, 0.25), f"undelayed messages at once: {got}")
check_eq(sorted(b for _, b, _ in got), ["negative", "none", "zero"], "at once")
check(pump_until(conn, lambda: len(got) >= 6, 3.0), f"delayed messages arrived: {got}")
delayed = got[3:]
check_eq([b for _, b, _ in delayed], ["d300", "d600", "d900"], "due order")
for at, body, header in delayed:
    delay = int(body[1:])
    elapsed = at - t0
    check(elapsed >= delay / 1000 - 0.005, f"{body} arrived after {elapsed:.3f} s: early")
    check(elapsed <= delay / 1000 + LATE, f"{body} arrived after {elapsed:.3f} s: late")
    check_eq(header, -delay, f"{body}'s x-delay")

# --- mandatory: returned at once (the plugin cannot know the queues of the due time) -------
# (A channel without confirms: pika's confirming channel raises on a return.)
returned = []
plain = conn.channel()
plain.add_on_return_callback(lambda _c, method, _p, body: returned.append((method.reply_code,
                                                                           body)))
got.clear()
plain.basic_publish("delayed", "k", b"mandatory",
                    pika.BasicProperties(headers={"x-delay": 200}), mandatory=True)
pump_until(conn, lambda: returned, 1.0)
check_eq(returned, [(312, b"mandatory")], "a mandatory delayed publish is returned")
check(pump_until(conn, lambda: got, 2.0), "the returned delayed message is still delivered")
check_eq(got[0][1], "mandatory", "delivered later")

# --- Another delayed type: topic, and a string delay ----------------------------------------
ch.exchange_declare("delayed-topic", "x-delayed-message",
                    arguments={"x-delayed-type": "topic"})
ch.queue_declare("topic-q", exclusive=True)
ch.queue_bind("topic-q", "delayed-topic", "logs.*")
ch.basic_publish("delayed-topic", "logs.error", b"t",
                 pika.BasicProperties(headers={"x-delay": "150"}))
ch.basic_publish("delayed-topic", "other.error", b"unrouted",
                 pika.BasicProperties(headers={"x-delay": 100}))
check_eq(ch.queue_declare("topic-q", passive=True).method.message_count, 0, "held")
deadline = time.monotonic() + 3.0
while ch.queue_declare("topic-q", passive=True).method.message_count < 1:
    check(time.monotonic() < deadline, "the topic delayed message arrived")
    time.sleep(0.02)
time.sleep(0.2)
check_eq(ch.queue_declare("topic-q", passive=True).method.message_count, 1,
         "routed by the topic bindings at its due time")

# --- Delayed retry on a quorum queue (RabbitMQ 4.3) -----------------------------------------
ch.queue_declare("retry-q", durable=True, arguments={
    "x-queue-type": "quorum", "x-delayed-retry-type": "failed",
    "x-delayed-retry-min": 200, "x-delayed-retry-max": 500})
# A redeclare with other retry settings is inequivalent (RabbitMQ 4.3 compares the quorum
# queue type's arguments).
refused("another x-delayed-retry-min", 406,
        "PRECONDITION_FAILED - inequivalent arg 'x-delayed-retry-min' for queue 'retry-q' in "
        "vhost '/': received the value '300' of type 'signedint' but current is the value '200' "
        "of type 'signedint'",
        lambda c: c.queue_declare("retry-q", durable=True, arguments={
            "x-queue-type": "quorum", "x-delayed-retry-type": "failed",
            "x-delayed-retry-min": 300, "x-delayed-retry-max": 500}))
ch.basic_publish("", "retry-q", b"job")
seen = []


def on_job(c, method, props, _body):
    seen.append((time.monotonic(), method.redelivered,
                 (props.headers or {}).get("x-delivery-count")))
    if len(seen) < 4:
        c.basic_reject(method.delivery_tag, requeue=True)
    else:
        c.basic_ack(method.delivery_tag)


ch.basic_consume("retry-q", on_job)
check(pump_until(conn, lambda: len(seen) >= 4, 4.0), f"four deliveries: {seen}")
waits = [b[0] - a[0] for a, b in zip(seen, seen[1:])]
# min(200 x count, 500): 200, 400, 500 ms.
for got_wait, want in zip(waits, [0.2, 0.4, 0.5]):
    check(got_wait >= want - 0.005, f"retry waits {waits}: one shorter than {want}")
    check(got_wait <= want + LATE, f"retry waits {waits}: one much longer than {want}")
check_eq([s[2] for s in seen], [None, 1, 2, 3], "x-delivery-count")

# `failed` only: a nack (handed back, not failed) comes back at once.
ch.queue_declare("retry-nack-q", durable=True, arguments={
    "x-queue-type": "quorum", "x-delayed-retry-type": "failed",
    "x-delayed-retry-min": 2000})
ch.basic_publish("", "retry-nack-q", b"job")
nacked = []


def on_nacked(c, method, _props, _body):
    nacked.append(time.monotonic())
    if len(nacked) == 1:
        c.basic_nack(method.delivery_tag, requeue=True)
    else:
        c.basic_ack(method.delivery_tag)


ch.basic_consume("retry-nack-q", on_nacked)
check(pump_until(conn, lambda: len(nacked) >= 2, 1.5), "a nacked message comes back at once")

conn.close()

print("delayed_message.py: ok")
