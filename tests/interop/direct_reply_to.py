"""Direct reply-to (RabbitMQ's `amq.rabbitmq.reply-to`) in pika's documented pattern: the
client consumes the pseudo-queue with auto_ack=True, with no queue declared, and publishes
requests with reply_to='amq.rabbitmq.reply-to'; the server sees a routable
`amq.rabbitmq.reply-to.…` name and its replies reach the client's consumer. Then each
misuse, with RabbitMQ's errors: consuming with acks, a second reply consumer, publishing
before consuming; and replies to a requester that is gone: returned when mandatory,
dropped otherwise, both confirmed."""

import uuid

import pika

from interop import check, check_eq, connect, fail, ok, pump_until, start

PSEUDO = "amq.rabbitmq.reply-to"
PREFIX = PSEUDO + "."

port = start()

# ---- the RPC, as pika's direct reply-to example does it ------------------------------

server = connect(port, "rpc_server")
sch = server.channel()
sch.queue_declare(queue="rpc_direct")
served = []


def on_request(ch, method, props, body):
    served.append(props.reply_to)
    ch.basic_publish(exchange="", routing_key=props.reply_to,
                     properties=pika.BasicProperties(correlation_id=props.correlation_id),
                     body=b"re:" + body)
    ch.basic_ack(delivery_tag=method.delivery_tag)


sch.basic_consume(queue="rpc_direct", on_message_callback=on_request)

client = connect(port, "rpc_client")
cch = client.channel()
replies = {}


def on_reply(_ch, method, props, body):
    check(props.correlation_id not in replies, f"duplicate reply {props.correlation_id}")
    replies[props.correlation_id] = (method.consumer_tag, method.routing_key, body)


tag = cch.basic_consume(PSEUDO, on_reply, auto_ack=True)
requests = {}
for i in range(5):
    corr_id = str(uuid.uuid4())
    requests[corr_id] = f"request {i}".encode()
    cch.basic_publish(exchange="", routing_key="rpc_direct", body=requests[corr_id],
                      properties=pika.BasicProperties(reply_to=PSEUDO,
                                                      correlation_id=corr_id))


def all_answered():
    server.process_data_events(time_limit=0)
    return len(replies) == len(requests)


if not pump_until(client, all_answered, timeout=10):
    fail(f"{len(replies)} of {len(requests)} direct replies arrived (served {served!r})")
reply_name = served[0]
check(reply_name.startswith(PREFIX), f"the server saw reply_to {reply_name!r}")
check_eq(set(served), {reply_name}, "one reply name for the requester's channel")
for corr_id, body in requests.items():
    check_eq(replies[corr_id], (tag, reply_name, b"re:" + body), f"reply to {body!r}")

# The responder may check the requester is still there: a passive declare of the name.
declared = sch.queue_declare(queue=reply_name, passive=True).method
check_eq((declared.message_count, declared.consumer_count), (0, 1), "declare of a live name")

# ---- misuse --------------------------------------------------------------------------

ch = client.channel()
try:
    ch.basic_consume(PSEUDO, on_reply, auto_ack=False)
    fail("consuming the pseudo-queue with acks was accepted")
except pika.exceptions.ChannelClosedByBroker as e:
    check_eq((e.reply_code, e.reply_text),
             (406, "PRECONDITION_FAILED - reply consumer cannot acknowledge"),
             "consume with acks")

ch = client.channel()
ch.basic_consume(PSEUDO, on_reply, auto_ack=True)
try:
    ch.basic_consume(PSEUDO, on_reply, auto_ack=True)
    fail("a second reply consumer on a channel was accepted")
except pika.exceptions.ChannelClosedByBroker as e:
    check_eq((e.reply_code, e.reply_text),
             (406, "PRECONDITION_FAILED - reply consumer already set"), "second consumer")

ch = client.channel()
ch.basic_publish(exchange="", routing_key="rpc_direct", body=b"nobody to answer",
                 properties=pika.BasicProperties(reply_to=PSEUDO))
try:
    # The publish has no answer; the next synchronous method meets the channel's close.
    ch.queue_declare(queue="rpc_direct", passive=True)
    fail("a publish with reply_to before consuming the pseudo-queue was accepted")
except pika.exceptions.ChannelClosedByBroker as e:
    check_eq((e.reply_code, e.reply_text),
             (406, "PRECONDITION_FAILED - fast reply consumer does not exist"),
             "publish before consuming")
check_eq(len(served), len(requests), "the refused request was not published")
check(client.is_open and cch.is_open, "the other channels stay open")

# ---- replies to a requester that is gone ---------------------------------------------

sch.basic_cancel(sch.consumer_tags[0])
server.process_data_events(time_limit=0)
responder = server.channel()
responder.confirm_delivery()

gone = client.channel()
gone_replies = []
gone_tag = gone.basic_consume(PSEUDO, lambda _c, _m, _p, body: gone_replies.append(body),
                              auto_ack=True)
gone.basic_publish(exchange="", routing_key="rpc_direct", body=b"ask",
                   properties=pika.BasicProperties(reply_to=PSEUDO))
# A synchronous method behind the publish on its channel: the request is routed by then.
gone.queue_declare(queue="rpc_direct", passive=True)
_, request, _ = sch.basic_get("rpc_direct", auto_ack=True)
check(request is not None, "the request of the requester that will go")
gone_name = request.reply_to
check(gone_name.startswith(PREFIX) and gone_name != reply_name, f"its name {gone_name!r}")

# Live: a mandatory reply is delivered, not returned.
responder.basic_publish(exchange="", routing_key=gone_name, body=b"live", mandatory=True)
if not pump_until(client, lambda: gone_replies):
    fail("no reply to the live requester")
check_eq(gone_replies, [b"live"], "reply while the consumer lives")

# Cancelled: returned when mandatory (after which the broker confirms it), dropped
# and confirmed otherwise.
gone.basic_cancel(gone_tag)
try:
    responder.basic_publish(exchange="", routing_key=gone_name, body=b"late",
                            mandatory=True)
    fail("a mandatory reply to a cancelled requester was not returned")
except pika.exceptions.UnroutableError as e:
    check_eq(len(e.messages), 1, "returned messages")
    check_eq(e.messages[0].method.reply_code, 312, "return code")
    check_eq(e.messages[0].method.routing_key, gone_name, "returned to the name")
responder.basic_publish(exchange="", routing_key=gone_name, body=b"late, not mandatory")
try:
    responder.queue_declare(queue=gone_name, passive=True)
    fail("a cancelled reply name still declares")
except pika.exceptions.ChannelClosedByBroker as e:
    check_eq((e.reply_code, e.reply_text),
             (404, f"NOT_FOUND - no queue '{gone_name}' in vhost '/'"), "declare of it")

# Closed channel: the same.
gone2 = client.channel()
gone2.basic_consume(PSEUDO, lambda _c, _m, _p, body: gone_replies.append(body), auto_ack=True)
gone2.basic_publish(exchange="", routing_key="rpc_direct", body=b"ask again",
                    properties=pika.BasicProperties(reply_to=PSEUDO))
gone2.queue_declare(queue="rpc_direct", passive=True)
_, request, _ = sch.basic_get("rpc_direct", auto_ack=True)
check(request is not None and request.reply_to.startswith(PREFIX), "the second request")
gone2.close()
responder = server.channel()
responder.confirm_delivery()
try:
    responder.basic_publish(exchange="", routing_key=request.reply_to, body=b"closed",
                            mandatory=True)
    fail("a mandatory reply to a closed channel was not returned")
except pika.exceptions.UnroutableError:
    pass
responder.basic_publish(exchange="", routing_key=request.reply_to, body=b"closed, dropped")
client.process_data_events(time_limit=0)
check_eq(gone_replies, [b"live"], "nothing reached the requesters after they went")
client.close()
server.close()
ok("direct_reply_to")
