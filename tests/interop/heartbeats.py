"""Heartbeats as pika uses them: a client asking for a 1-second heartbeat gets it, the
broker sends heartbeats on an idle connection, and the connection stays open past pika's
own liveness check (pika 1.x closes a connection that received nothing for
`heartbeat + 5` s), then still works."""

import time

import pika

from interop import HOST, check, check_eq, ok, pump_for, start

port = start(40)
params = pika.ConnectionParameters(host=HOST, port=port, heartbeat=1, socket_timeout=5,
                                   stack_timeout=10)
conn = pika.BlockingConnection(params)
check_eq(conn._impl.params.heartbeat, 1, "negotiated heartbeat (s)")
ch = conn.channel()
ch.queue_declare(queue="idle")
started = time.monotonic()
pump_for(conn, 7.0)  # no traffic but heartbeats
check(conn.is_open, "the connection closed while idle")
# pika's count of heartbeat frames from the broker (private, so read defensively).
received = getattr(conn._impl._heartbeat_checker, "_heartbeat_frames_received", None)
check(received is None or received >= 3, f"heartbeats received in 7 s: {received}")
ch.basic_publish(exchange="", routing_key="idle", body="awake")
method, _props, body = ch.basic_get(queue="idle", auto_ack=True)
check(method is not None, "basic.get after the idle period found nothing")
check_eq(body, b"awake", "body after the idle period")
conn.close()
ok(f"heartbeats (idle {time.monotonic() - started:.1f} s)")
