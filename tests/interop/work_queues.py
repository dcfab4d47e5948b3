"""RabbitMQ tutorial 2, "Work Queues": a durable task queue, persistent messages, manual
acks and prefetch 1 (fair dispatch); an unacked message is redelivered after a nack or
when its worker's connection goes away."""

from pika import BasicProperties, DeliveryMode

from interop import (check, check_eq, connect, fail, ok, pump_for, pump_until, start)

port = start()
QUEUE = "task_queue"

# new_task.py
producer = connect(port, "new_task.py")
pch = producer.channel()
pch.queue_declare(queue=QUEUE, durable=True)
persistent = BasicProperties(delivery_mode=DeliveryMode.Persistent)
for i in range(4):
    pch.basic_publish(exchange="", routing_key=QUEUE, body=f"task {i}", properties=persistent)

# worker.py with prefetch 1 and no ack: exactly one message, the first.
worker = connect(port, "worker.py")
wch = worker.channel()
wch.queue_declare(queue=QUEUE, durable=True)
wch.basic_qos(prefetch_count=1)
got = []


def on_task(_ch, method, properties, body):
    got.append((method.delivery_tag, method.redelivered, properties.delivery_mode, body.decode()))


wch.basic_consume(queue=QUEUE, on_message_callback=on_task)
if not pump_until(worker, lambda: got):
    fail("the worker got no task")
pump_for(worker)
check_eq(len(got), 1, f"deliveries with prefetch 1 and no ack ({got!r})")
tag, redelivered, mode, body = got[0]
check_eq((redelivered, mode, body), (False, 2, "task 0"), "first delivery")

# A nack with requeue puts it back at the head: it comes again, redelivered.
wch.basic_nack(delivery_tag=tag, requeue=True)
if not pump_until(worker, lambda: len(got) == 2):
    fail("the nacked task was not redelivered")
pump_for(worker)
check_eq(len(got), 2, f"deliveries after one nack ({got!r})")
tag, redelivered, _, body = got[1]
check_eq((redelivered, body), (True, "task 0"), "delivery after nack(requeue=True)")

# Each ack lets exactly one more through, in queue order.
for want in ["task 1", "task 2"]:
    wch.basic_ack(delivery_tag=got[-1][0])
    n = len(got)
    if not pump_until(worker, lambda: len(got) > n):
        fail(f"no delivery after ack (expected {want!r})")
    pump_for(worker, 0.2)
    check_eq(len(got), n + 1, f"deliveries after an ack ({got!r})")
    check_eq((got[-1][1], got[-1][3]), (False, want), "next delivery")

# A worker dying with an unacked task: the task goes to the other worker, redelivered.
second = connect(port, "worker.py #2")
sch = second.channel()
sch.basic_qos(prefetch_count=1)
got2 = []


def on_task2(ch, method, _properties, body):
    got2.append((method.redelivered, body.decode()))
    ch.basic_ack(delivery_tag=method.delivery_tag)


sch.basic_consume(queue=QUEUE, on_message_callback=on_task2)
# "task 3" is the only ready one and the first worker is full: it goes to the second.
if not pump_until(second, lambda: got2):
    fail("the second worker got nothing")
check_eq(got2, [(False, "task 3")], "second worker's first task")
worker.close()  # "task 2" was never acked
if not pump_until(second, lambda: len(got2) == 2):
    fail(f"the dead worker's task was not redelivered to the other worker ({got2!r})")
check_eq(got2[1], (True, "task 2"), "redelivered task")
pump_for(second)
check_eq(len(got2), 2, f"second worker's deliveries ({got2!r})")
check_eq(pch.queue_declare(queue=QUEUE, durable=True, passive=True).method.message_count, 0,
         "tasks left in the queue")
check(second.is_open and producer.is_open, "connections still open")
second.close()
producer.close()
ok("work_queues")
