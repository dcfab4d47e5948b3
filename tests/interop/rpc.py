"""RabbitMQ tutorial 6, "RPC": a server consuming `rpc_queue` with prefetch 1, a client
with an exclusive callback queue; replies go to `reply_to` and carry the request's
`correlation_id`. Requests are pipelined and matched by correlation id."""

import uuid

import pika

from interop import check, check_eq, connect, fail, ok, pump_until, start

port = start()


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


# rpc_server.py
server = connect(port, "rpc_server.py")
sch = server.channel()
sch.queue_declare(queue="rpc_queue")
sch.basic_qos(prefetch_count=1)
served = []


def on_request(ch, method, props, body):
    n = int(body)
    served.append(n)
    ch.basic_publish(exchange="", routing_key=props.reply_to,
                     properties=pika.BasicProperties(correlation_id=props.correlation_id),
                     body=str(fib(n)))
    ch.basic_ack(delivery_tag=method.delivery_tag)


sch.basic_consume(queue="rpc_queue", on_message_callback=on_request)

# rpc_client.py
client = connect(port, "rpc_client.py")
cch = client.channel()
callback_queue = cch.queue_declare(queue="", exclusive=True).method.queue
responses = {}


def on_response(_ch, _method, props, body):
    check(props.correlation_id not in responses, f"duplicate reply {props.correlation_id}")
    responses[props.correlation_id] = int(body)


cch.basic_consume(queue=callback_queue, on_message_callback=on_response, auto_ack=True)

requests = {}
for n in [0, 1, 2, 10, 20, 30, 7]:
    corr_id = str(uuid.uuid4())
    requests[corr_id] = n
    cch.basic_publish(exchange="", routing_key="rpc_queue",
                      properties=pika.BasicProperties(reply_to=callback_queue,
                                                      correlation_id=corr_id),
                      body=str(n))


def all_answered():
    server.process_data_events(time_limit=0)
    return len(responses) == len(requests)


if not pump_until(client, all_answered, timeout=10):
    fail(f"{len(responses)} of {len(requests)} RPC replies arrived (served {served!r})")
for corr_id, n in requests.items():
    check_eq(responses[corr_id], fib(n), f"fib({n}) by correlation id {corr_id}")
check_eq(served, list(requests.values()), "requests served in publishing order")
client.close()
server.close()
ok("rpc")
