"""RabbitMQ tutorial 4, "Routing": a direct exchange, queues bound with several binding
keys, a message going to every queue with a matching binding and to no other."""

from interop import check_eq, collect, connect, ok, start

port = start()
conn = connect(port, "receive_logs_direct.py")
ch = conn.channel()
ch.exchange_declare(exchange="direct_logs", exchange_type="direct")

bindings = {"errors_only": ["error"], "everything": ["info", "warning", "error"]}
queues = {}
for name, severities in bindings.items():
    queues[name] = ch.queue_declare(queue="", exclusive=True).method.queue
    for severity in severities:
        ch.queue_bind(exchange="direct_logs", queue=queues[name], routing_key=severity)

emitter = connect(port, "emit_log_direct.py")
ech = emitter.channel()
sent = [("info", "i1"), ("error", "e1"), ("warning", "w1"), ("debug", "dropped"),
        ("error", "e2"), ("info", "i2")]
for severity, body in sent:
    ech.basic_publish(exchange="direct_logs", routing_key=severity, body=body)
emitter.close()

check_eq(collect(conn, ch, queues["errors_only"], 2), ["e1", "e2"], "queue bound to error")
check_eq(collect(conn, ch, queues["everything"], 5), ["i1", "e1", "w1", "e2", "i2"],
         "queue bound to info, warning, error")

# Unbinding stops the routing.
ch.queue_unbind(exchange="direct_logs", queue=queues["everything"], routing_key="info")
ch.basic_publish(exchange="direct_logs", routing_key="info", body="i3")
ch.basic_publish(exchange="direct_logs", routing_key="error", body="e3")
check_eq(collect(conn, ch, queues["everything"], 1), ["e3"], "after unbinding info")
conn.close()
ok("routing")
