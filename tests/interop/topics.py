"""RabbitMQ tutorial 5, "Topics": a topic exchange with the tutorial's bindings
(`*.orange.*`, `*.*.rabbit`, `lazy.#`) and its routing table, plus `#` and an exact key."""

from interop import check_eq, collect, connect, ok, start

port = start()
conn = connect(port, "receive_logs_topic.py")
ch = conn.channel()
ch.exchange_declare(exchange="topic_logs", exchange_type="topic")

bindings = {
    "Q1": ["*.orange.*"],
    "Q2": ["*.*.rabbit", "lazy.#"],
    "all": ["#"],
    "exact": ["kern.critical"],
}
queues = {}
for name, keys in bindings.items():
    queues[name] = ch.queue_declare(queue="", exclusive=True).method.queue
    for key in keys:
        ch.queue_bind(exchange="topic_logs", queue=queues[name], routing_key=key)

keys = [
    "quick.orange.rabbit",  # Q1, Q2
    "lazy.orange.elephant",  # Q1, Q2
    "quick.orange.fox",  # Q1
    "lazy.brown.fox",  # Q2
    "lazy.pink.rabbit",  # Q2 once (two matching bindings)
    "quick.brown.fox",  # nobody but #
    "orange",  # nobody but #
    "quick.orange.new.rabbit",  # nobody but #
    "lazy.orange.new.rabbit",  # Q2
    "kern.critical",  # exact
    "lazy",  # Q2 (# matches zero words)
]
emitter = connect(port, "emit_log_topic.py")
ech = emitter.channel()
for key in keys:
    ech.basic_publish(exchange="topic_logs", routing_key=key, body=key)
emitter.close()

want = {
    "Q1": ["quick.orange.rabbit", "lazy.orange.elephant", "quick.orange.fox"],
    "Q2": ["quick.orange.rabbit", "lazy.orange.elephant", "lazy.brown.fox", "lazy.pink.rabbit",
           "lazy.orange.new.rabbit", "lazy"],
    "all": keys,
    "exact": ["kern.critical"],
}
for name, bodies in want.items():
    check_eq(collect(conn, ch, queues[name], len(bodies)), bodies, f"queue {name} {bindings[name]}")
conn.close()
ok("topics")
