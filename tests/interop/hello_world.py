"""RabbitMQ tutorial 1, "Hello World!": send.py and receive.py on two connections."""

from interop import check_eq, connect, fail, ok, pump_until, start

port = start()

# send.py
sender = connect(port, "send.py")
ch = sender.channel()
ch.queue_declare(queue="hello")
ch.basic_publish(exchange="", routing_key="hello", body="Hello World!")
sender.close()

# receive.py
receiver = connect(port, "receive.py")
ch = receiver.channel()
declared = ch.queue_declare(queue="hello")
check_eq(declared.method.message_count, 1, "message_count of queue.declare-ok")
got = []


def callback(_ch, method, _properties, body):
    got.append((method.exchange, method.routing_key, method.redelivered, body))


ch.basic_consume(queue="hello", on_message_callback=callback, auto_ack=True)
if not pump_until(receiver, lambda: got):
    fail("receive.py got nothing")
check_eq(got, [("", "hello", False, b"Hello World!")], "delivery")
receiver.close()
ok("hello_world")
