"""Resource alarms with pika: on a server started above its memory watermark, a
confirmed publish is blocked; pika's blocked callback fires with RabbitMQ's reason, and
once the test raises the watermark the unblocked callback fires and the publish is
confirmed. Prints one line per event for the Rust side to check."""

import sys

import pika

port = int(sys.argv[1])
params = pika.ConnectionParameters(
    "127.0.0.1", port, blocked_connection_timeout=30, heartbeat=0
)
conn = pika.BlockingConnection(params)
events = []
conn.add_on_connection_blocked_callback(
    lambda _c, m: events.append(f"blocked: {m.method.reason}")
)
conn.add_on_connection_unblocked_callback(lambda _c, _m: events.append("unblocked"))
ch = conn.channel()
ch.queue_declare(queue="pika-alarm-q")
ch.confirm_delivery()
print("publishing", flush=True)
ch.basic_publish(exchange="", routing_key="pika-alarm-q", body=b"held")
conn.process_data_events(time_limit=0.2)
for e in events:
    print(e, flush=True)
print("confirmed", flush=True)
conn.close()
