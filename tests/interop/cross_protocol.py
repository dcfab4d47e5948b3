"""The pika side of the cross-protocol tests in tests/it/amqp_interop.rs.

`cross_protocol.py <port> publish`: publishes one message with every property and a
headers table to the queue `from_pika` (declared here), for the native client to check.
`cross_protocol.py <port> get`: gets the message the native client published to
`to_pika` and checks it carries exactly the same properties and headers.
"""

import sys

import pika

from interop import check_eq, connect, fail, ok, start

port = start(args=1)
mode = sys.argv[2]

HEADERS = {
    "string": "text",
    "int": 42,
    "negative": -7,
    "big": 1 << 40,
    "yes": True,
    "no": False,
    "nested": {"inner": "value", "n": 1, "deeper": {"flag": True}},
    "array": [1, "two", True, {"k": "v"}, [3]],
}
PROPERTIES = dict(
    content_type="application/json",
    content_encoding="identity",
    headers=HEADERS,
    delivery_mode=2,
    priority=7,
    correlation_id="corr-1",
    reply_to="replies",
    expiration="60000",
    message_id="msg-1",
    timestamp=1700000000,
    type="example.event",
    user_id="guest",
    app_id="interop",
)
BODY = b'{"hello": "native"}'

conn = connect(port, f"cross_protocol {mode}")
ch = conn.channel()
if mode == "publish":
    ch.confirm_delivery()
    ch.queue_declare(queue="from_pika")
    ch.basic_publish(exchange="", routing_key="from_pika", body=BODY,
                     properties=pika.BasicProperties(**PROPERTIES), mandatory=True)
elif mode == "get":
    method, props, body = ch.basic_get(queue="to_pika", auto_ack=True)
    if method is None:
        fail("basic.get found no message in to_pika")
    check_eq((method.exchange, method.routing_key, method.redelivered),
             ("", "to_pika", False), "basic.get-ok")
    check_eq(body, BODY, "body")
    for name, want in PROPERTIES.items():
        check_eq(getattr(props, name), want, f"property {name}")
else:
    fail(f"unknown mode {mode!r}")
conn.close()
ok(f"cross_protocol {mode}")
