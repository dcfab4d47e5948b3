"""Single active consumer and consumer priorities, driven by pika, on classic and quorum
queues: one consumer gets everything while the others wait; a cancel hands over at once
and leaves the old consumer's unacked messages with it; a closed channel requeues them to
the next; on a quorum queue a higher-priority consumer takes over once the active one is
idle; basic.get on such a quorum queue is 405; without single active consumer, the
highest `x-priority` with room gets the messages, round-robin within a priority."""

from pika.exceptions import ChannelClosedByBroker

from interop import check, check_eq, connect, fail, ok, pump_for, pump_until, start

port = start(60)
conn = connect(port, "sac")
ch = conn.channel()


def consumer(channel, queue, got, tag, priority=None, ack=False):
    args = {"x-priority": priority} if priority is not None else None

    def on_message(c, method, _props, body):
        got.append((tag, body.decode(), method.delivery_tag))
        if ack:
            c.basic_ack(method.delivery_tag)

    return channel.basic_consume(queue, on_message, consumer_tag=tag, arguments=args)


def publish(queue, *bodies):
    for b in bodies:
        ch.basic_publish("", queue, b.encode())


for kind in ["classic", "quorum"]:
    q = f"sac-{kind}"
    ch.queue_declare(queue=q, durable=True,
                     arguments={"x-queue-type": kind, "x-single-active-consumer": True})
    a_ch, b_ch = conn.channel(), conn.channel()
    got = []
    consumer(a_ch, q, got, "a")
    consumer(b_ch, q, got, "b")
    publish(q, "1", "2", "3")
    pump_until(conn, lambda: len(got) >= 3)
    pump_for(conn)
    check_eq([(t, b) for t, b, _ in got], [("a", "1"), ("a", "2"), ("a", "3")],
             f"{kind}: only the first consumer gets messages")
    # A cancel hands over at once; a's unacked messages stay with a.
    a_ch.basic_cancel("a")
    publish(q, "4")
    pump_until(conn, lambda: len(got) >= 4)
    check_eq(got[3][:2], ("b", "4"), f"{kind}: b takes over after a's cancel")
    pump_for(conn)
    check_eq(len(got), 4, f"{kind}: a's unacked messages are not requeued by its cancel")
    # Closing a's channel requeues them, to b.
    a_ch.close()
    pump_until(conn, lambda: len(got) >= 7)
    check_eq(sorted(b for t, b, _ in got[4:] if t == "b"), ["1", "2", "3"],
             f"{kind}: a's channel closed, its messages go to b")
    if kind == "quorum":
        try:
            ch.basic_get(q)
        except ChannelClosedByBroker as e:
            check_eq(e.reply_code, 405, "basic.get on a SAC quorum queue")
            check_eq(e.reply_text,
                     f"RESOURCE_LOCKED - cannot obtain access to locked queue '{q}' in vhost "
                     "'/'. basic.get operations are not supported by quorum queues with "
                     "single active consumer", "basic.get text")
            ch = conn.channel()
        else:
            fail("basic.get on a SAC quorum queue succeeded")
    b_ch.close()
    ok(f"single active consumer on a {kind} queue")

# Quorum: a higher priority takes over once the active consumer has nothing unacked.
q = "sac-prio"
ch.queue_declare(queue=q, durable=True,
                 arguments={"x-queue-type": "quorum", "x-single-active-consumer": True})
low_ch, high_ch = conn.channel(), conn.channel()
got = []
consumer(low_ch, q, got, "low", priority=1)
publish(q, "1")
pump_until(conn, lambda: len(got) >= 1)
consumer(high_ch, q, got, "high", priority=5)
publish(q, "2")
pump_for(conn)
check_eq([(t, b) for t, b, _ in got], [("low", "1")],
         "nobody gets more while the active one has an unacked message")
low_ch.basic_ack(got[0][2])
pump_until(conn, lambda: len(got) >= 2)
check_eq(got[1][:2], ("high", "2"), "the higher priority takes over once low is idle")
low_ch.close()
high_ch.close()
ok("quorum: a higher-priority consumer takes over")

# Consumer priorities without single active consumer.
for kind in ["classic", "quorum"]:
    q = f"prio-{kind}"
    ch.queue_declare(queue=q, durable=True, arguments={"x-queue-type": kind})
    c1, c2, c3 = conn.channel(), conn.channel(), conn.channel()
    c1.basic_qos(prefetch_count=10)
    c2.basic_qos(prefetch_count=2)
    c3.basic_qos(prefetch_count=2)
    got = []
    consumer(c1, q, got, "low", priority=0)
    consumer(c2, q, got, "hi-a", priority=10)
    consumer(c3, q, got, "hi-b", priority=10)
    publish(q, *[str(i) for i in range(5)])
    pump_until(conn, lambda: len(got) >= 5)
    pump_for(conn)
    # pika runs each channel's callbacks in turn, so compare what each consumer got.
    by_tag = {t: [b for t2, b, _ in got if t2 == t] for t in ["low", "hi-a", "hi-b"]}
    check_eq(by_tag, {"hi-a": ["0", "2"], "hi-b": ["1", "3"], "low": ["4"]},
             f"{kind}: round-robin within the highest priority, low once they are full")
    for c in (c1, c2, c3):
        c.close()
    ok(f"consumer priorities on a {kind} queue")

try:
    ch.basic_consume("prio-classic", lambda *a: None, arguments={"x-priority": "high"})
except ChannelClosedByBroker as e:
    check_eq(e.reply_code, 406, "x-priority not an integer")
    check_eq(e.reply_text,
             "PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'prio-classic' in "
             "vhost '/': \"expected integer, got longstr\"", "x-priority text")
else:
    fail("a string x-priority was accepted")
ok("x-priority validation")
conn.close()
