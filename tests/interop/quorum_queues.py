"""Quorum queues as RabbitMQ 4.x has them, driven by pika: the declaration kombu and Celery
send succeeds and is idempotent; what RabbitMQ refuses is refused with its reply code and
text; the poison-message count of RabbitMQ 4.3 (basic.reject and a closed channel count,
basic.nack does not) with `x-delivery-count` and the default limit of 20; 32 priorities;
global QoS and conditional deletes answered 540; `stream` refused."""

import pika
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from interop import check, check_eq, connect, fail, ok, start

port = start(60)
conn = connect(port, "quorum")
ch = conn.channel()

QUORUM = {"x-queue-type": "quorum"}


def refused(args, code, text, **flags):
    """Declares `q-refused` with `args` and `flags`; checks the channel closes with
    `code` and `text`; returns a fresh channel."""
    global ch
    name = flags.pop("queue", "q-refused")
    try:
        ch.queue_declare(queue=name, arguments=args, **flags)
    except ChannelClosedByBroker as e:
        check_eq(e.reply_code, code, f"reply code for {args} {flags}")
        check_eq(e.reply_text, text, f"reply text for {args} {flags}")
    else:
        fail(f"declaring {args} {flags} succeeded")
    ch = conn.channel()


# --- the declarations kombu/Celery send -------------------------------------------------
KOMBU = {"x-queue-type": "quorum", "x-delivery-limit": 5,
         "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish",
         "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "parked"}
ch.queue_declare(queue="parked", durable=True)
ch.queue_declare(queue="tasks", durable=True, arguments=KOMBU)
again = ch.queue_declare(queue="tasks", durable=True, arguments=KOMBU)
check_eq(again.method.queue, "tasks", "redeclare")
ok("kombu's quorum declaration, twice")

# --- what RabbitMQ refuses ---------------------------------------------------------------
V = "in vhost '/'"
refused(QUORUM, 406, f"PRECONDITION_FAILED - invalid property 'non-durable' for queue 'q-refused' {V}")
refused(QUORUM, 406, f"PRECONDITION_FAILED - invalid property 'auto-delete' for queue 'q-refused' {V}",
        durable=True, auto_delete=True)
refused(QUORUM, 406,
        f"PRECONDITION_FAILED - invalid property 'exclusive-owner' for queue 'q-refused' {V}",
        durable=True, exclusive=True)
refused(QUORUM, 406,
        "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_quorum_queue",
        durable=True, queue="")
refused(dict(QUORUM, **{"x-max-priority": 5}), 406,
        f"PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'q-refused' {V} "
        "of queue type rabbit_quorum_queue", durable=True)
refused(dict(QUORUM, **{"x-dead-letter-strategy": "twice"}), 406,
        f"PRECONDITION_FAILED - invalid arg 'x-dead-letter-strategy' for queue 'q-refused' {V}: "
        "invalid_dlx_strategy", durable=True)
refused({"x-queue-type": "stream"}, 406,
        f"PRECONDITION_FAILED - invalid arg 'x-queue-type' for queue 'q-refused' {V}: "
        "\"stream queues are not supported by this version of RelayMQ: declare a classic or "
        "quorum queue\"", durable=True)
refused({"x-queue-type": "lazy"}, 406,
        f"PRECONDITION_FAILED - invalid arg 'x-queue-type' for queue 'q-refused' {V}: "
        "\"unsupported queue type 'lazy'\"", durable=True)
# Redeclaring a quorum queue as classic is an inequivalent type.
ch.queue_declare(queue="typed", durable=True, arguments=QUORUM)
refused({"x-queue-type": "classic"}, 406,
        f"PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'typed' {V}: "
        "received the value 'classic' of type 'longstr' but current is the value 'quorum' "
        "of type 'longstr'", durable=True, queue="typed")
ok("refusals with RabbitMQ's texts")

# --- poison messages: reject counts, nack does not ----------------------------------------
ch.queue_declare(queue="poison", durable=True,
                 arguments={"x-queue-type": "quorum", "x-delivery-limit": 2,
                            "x-dead-letter-exchange": "",
                            "x-dead-letter-routing-key": "parked"})
ch.basic_publish("", "poison", b"bad")


def take(queue="poison"):
    method, props, body = ch.basic_get(queue)
    check(method is not None, f"a message in {queue}")
    return method, (props.headers or {}).get("x-delivery-count")


m, count = take()
check_eq(count, None, "first delivery: no x-delivery-count")
ch.basic_nack(m.delivery_tag, requeue=True)
m, count = take()
check_eq(count, None, "a nack is not a failed delivery")
check(m.redelivered, "redelivered after the nack")
ch.basic_reject(m.delivery_tag, requeue=True)
m, count = take()
check_eq(count, 1, "x-delivery-count after one reject")
ch.basic_reject(m.delivery_tag, requeue=True)
m, count = take()
check_eq(count, 2, "x-delivery-count after two rejects")
ch.basic_reject(m.delivery_tag, requeue=True)
method, _, _ = ch.basic_get("poison")
check(method is None, "past the limit of 2 the message left the queue")
method, props, body = ch.basic_get("parked", auto_ack=True)
check(method is not None and body == b"bad", "dead-lettered to parked")
check_eq(props.headers["x-death"][0]["reason"], "delivery_limit", "x-death reason")
ok("delivery limit: reject counts, nack does not")

# A closed channel counts as a failed delivery.
ch.queue_declare(queue="crashy", durable=True, arguments=QUORUM)
ch.basic_publish("", "crashy", b"m")
other = conn.channel()
method, _, _ = other.basic_get("crashy")
check(method is not None, "got the message on the other channel")
other.close()
m, count = take("crashy")
check_eq(count, 1, "x-delivery-count after the channel that held it closed")
check(m.redelivered, "redelivered")
ch.basic_ack(m.delivery_tag)

# The default limit is 20 failed deliveries.
ch.queue_declare(queue="default-limit", durable=True, arguments=QUORUM)
ch.basic_publish("", "default-limit", b"m")
for i in range(20):
    m, count = take("default-limit")
    check_eq(count, i or None, f"count before reject {i + 1}")
    ch.basic_reject(m.delivery_tag, requeue=True)
m, count = take("default-limit")
check_eq(count, 20, "x-delivery-count 20 is still delivered")
ch.basic_reject(m.delivery_tag, requeue=True)
method, _, _ = ch.basic_get("default-limit")
check(method is None, "the 21st failed delivery drops it (no dead-letter exchange)")
ok("default delivery limit 20")

# --- priorities: 32 levels, no property counts as 4 --------------------------------------
ch.queue_declare(queue="prio", durable=True, arguments=QUORUM)
for body, prio in [("p2", 2), ("none", None), ("p31", 31), ("p99", 99), ("p5", 5)]:
    ch.basic_publish("", "prio", body.encode(), pika.BasicProperties(priority=prio))
order = []
while True:
    method, _, body = ch.basic_get("prio", auto_ack=True)
    if method is None:
        break
    order.append(body.decode())
check_eq(order, ["p31", "p99", "p5", "none", "p2"], "quorum priority order")
ok("priorities")

# --- 540s: global QoS, conditional delete -------------------------------------------------
ch.basic_qos(prefetch_count=5, global_qos=True)
try:
    ch.basic_consume("tasks", lambda *a: None)
except ConnectionClosedByBroker as e:
    check_eq(e.reply_code, 540, "global qos reply code")
    check_eq(e.reply_text,
             "NOT_IMPLEMENTED - queue 'tasks' in vhost '/' does not support global qos",
             "global qos text")
else:
    fail("consuming a quorum queue under global qos succeeded")
conn = connect(port, "quorum-2")
ch = conn.channel()
try:
    ch.queue_delete("tasks", if_unused=True)
except ConnectionClosedByBroker as e:
    check_eq(e.reply_code, 540, "if-unused delete reply code")
    check_eq(e.reply_text,
             "NOT_IMPLEMENTED - cannot delete queue 'tasks' in vhost '/'. queue.delete "
             "operations with if-unused flag set are not supported by quorum queues",
             "if-unused delete text")
else:
    fail("if-unused delete of a quorum queue succeeded")
conn = connect(port, "quorum-3")
ch = conn.channel()
check_eq(ch.queue_delete("tasks").method.message_count, 0, "plain delete")
ok("540 for global qos and conditional deletes")
conn.close()
