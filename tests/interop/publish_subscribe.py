"""RabbitMQ tutorial 3, "Publish/Subscribe": a fanout exchange; every subscriber's
exclusive, server-named queue gets every message, in publishing order."""

import pika

from interop import check, check_eq, collect, connect, fail, ok, start

port = start()

subscribers = []
for name in ["receive_logs.py #1", "receive_logs.py #2"]:
    conn = connect(port, name)
    ch = conn.channel()
    ch.exchange_declare(exchange="logs", exchange_type="fanout")
    result = ch.queue_declare(queue="", exclusive=True)
    queue = result.method.queue
    check(queue.startswith("amq.gen-"), f"server-named queue {queue!r} starts with amq.gen-")
    ch.queue_bind(exchange="logs", queue=queue)
    subscribers.append((conn, ch, queue))
check(subscribers[0][2] != subscribers[1][2], "two distinct server-named queues")

emitter = connect(port, "emit_log.py")
ech = emitter.channel()
ech.exchange_declare(exchange="logs", exchange_type="fanout")
logs = [f"info: log {i}" for i in range(10)]
for line in logs:
    # The routing key is ignored by a fanout exchange.
    ech.basic_publish(exchange="logs", routing_key="ignored", body=line)
emitter.close()

for conn, ch, queue in subscribers:
    check_eq(collect(conn, ch, queue, len(logs)), logs, f"logs received on {queue}")
    conn.close()

# The exclusive queues went with their connections: a fanout to nobody is dropped.
emitter = connect(port, "emit_log.py")
ech = emitter.channel()
ech.basic_publish(exchange="logs", routing_key="", body="to nobody")
try:
    ech.queue_declare(queue=subscribers[0][2], passive=True)
    fail("an exclusive queue outlived its connection")
except pika.exceptions.ChannelClosedByBroker as e:
    check_eq(e.reply_code, 404, f"reply code of a passive declare of a gone queue ({e!r})")
emitter.close()
ok("publish_subscribe")
