"""A consumer cancelled by queue deletion: the broker sends basic.cancel (the
consumer_cancel_notify capability pika announces), pika calls the on-cancel callback,
the consumer is gone from the channel, and the channel stays usable; a delete on the
consumer's own channel is answered before the cancel; unbinding what is not bound
succeeds."""

import pika

from interop import check, check_eq, connect, fail, ok, pump_for, pump_until, start

port = start()
conn = connect(port, "consumer")
ch = conn.channel()
ch.queue_declare(queue="doomed")
ch.queue_declare(queue="survivor")
cancels = []
ch.add_on_cancel_callback(lambda frame: cancels.append(frame.method.consumer_tag))
got = []
tag = ch.basic_consume(queue="doomed", auto_ack=True,
                       on_message_callback=lambda _c, _m, _p, body: got.append(body))
other_tag = ch.basic_consume(queue="survivor", auto_ack=True,
                             on_message_callback=lambda _c, _m, _p, body: got.append(body))

admin = connect(port, "admin")
ach = admin.channel()
ach.basic_publish(exchange="", routing_key="doomed", body="before")
if not pump_until(conn, lambda: got):
    fail("no delivery before the deletion")
check_eq(got, [b"before"], "delivery before the deletion")
ach.queue_delete(queue="doomed")

if not pump_until(conn, lambda: cancels):
    fail("no basic.cancel from the broker after the queue was deleted")
pump_for(conn)
check_eq(cancels, [tag], "consumer tags cancelled by the broker")
check(tag not in ch.consumer_tags, f"pika still lists {tag} after the broker's cancel")
check(ch.is_open and conn.is_open, "channel and connection stay open")

# The other consumer on the same channel is untouched, and the channel still works.
ach.basic_publish(exchange="", routing_key="survivor", body="still here")
if not pump_until(conn, lambda: len(got) == 2):
    fail("the other consumer stopped receiving after the cancel")
check_eq(got[1], b"still here", "delivery to the other consumer")
ch.basic_cancel(other_tag)
check_eq(ch.queue_declare(queue="survivor", passive=True).method.consumer_count, 0,
         "consumers on survivor after basic.cancel")

# Unbinding what is not bound answers unbind-ok, as RabbitMQ does (cleanup code such as
# aio-pika's RPC close relies on it).
ch.queue_unbind(queue="survivor", exchange="amq.direct", routing_key="never-bound")
ch.queue_unbind(queue="no-such-queue", exchange="amq.direct", routing_key="k")
ch.exchange_unbind(destination="amq.fanout", source="amq.direct", routing_key="k")
check(ch.is_open, "channel open after unbinding what was not bound")

# Deleted on the consumer's own channel: queue.delete-ok answers the delete, then the
# broker's basic.cancel follows (RabbitMQ's order).
own_tag = ch.basic_consume(queue="survivor", auto_ack=True,
                           on_message_callback=lambda _c, _m, _p, body: got.append(body))
check_eq(ch.queue_delete(queue="survivor").method.message_count, 0, "delete-ok count")
if not pump_until(conn, lambda: own_tag in cancels):
    fail("no basic.cancel after deleting the consumed queue on its own channel")
check(ch.is_open, "channel open after deleting its own consumer's queue")

try:
    ch.queue_declare(queue="doomed", passive=True)
    fail("the deleted queue still exists")
except pika.exceptions.ChannelClosedByBroker as e:
    check_eq(e.reply_code, 404, "reply code of a passive declare of the deleted queue")
admin.close()
conn.close()
ok("cancel_on_delete")
