"""A Celery application for tests/interop/celery_quorum.py: quorum queues by default, as
Celery recommends for RabbitMQ, so countdowns and retries go through Celery's native
delayed delivery. Every task appends a line to the file named by RELAYMQ_CELERY_OUT."""

import os
import time

from celery import Celery

port = os.environ["RELAYMQ_CELERY_PORT"]
OUT = os.environ["RELAYMQ_CELERY_OUT"]

app = Celery("relaymq_test", broker=f"amqp://guest:guest@127.0.0.1:{port}//")
app.conf.update(
    task_default_queue_type="quorum",
    # Native delayed delivery routes through topic exchanges (Celery's requirement).
    task_default_exchange_type="topic",
    broker_transport_options={"confirm_publish": True},
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    task_acks_late=True,
)


def record(line):
    with open(OUT, "a", encoding="utf-8") as f:
        f.write(f"{time.time():.3f} {line}\n")


@app.task
def add(x, y):
    record(f"add {x + y}")


@app.task(bind=True, max_retries=3)
def flaky(self, key):
    # Fails the first time it runs, then succeeds: a retry with a countdown.
    if self.request.retries == 0:
        record(f"flaky {key} failed")
        raise self.retry(countdown=1)
    record(f"flaky {key} ok after {self.request.retries} retry")


@app.task
def later(key):
    record(f"later {key}")
