"""Celery on RelayMQ with quorum queues (task_default_queue_type = "quorum"): a worker
declares its queues and Celery's native delayed-delivery topology (quorum queues with
TTL, dead-lettering at-least-once, reject-publish, topic exchanges), then runs a plain
task, a task with a countdown (not before its time) and a task retried with a countdown.
Usage: celery_quorum.py <amqp-port> <work-dir>."""

import os
import subprocess
import sys
import time

from interop import check, fail, ok, start

port = start(120, args=1)
work = sys.argv[2]
out = os.path.join(work, "celery.out")
env = dict(os.environ, RELAYMQ_CELERY_PORT=str(port), RELAYMQ_CELERY_OUT=out,
           PYTHONPATH=os.path.dirname(os.path.abspath(__file__)))
log = open(os.path.join(work, "worker.log"), "w", encoding="utf-8")
worker = subprocess.Popen(
    [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "--pool", "solo",
     "--without-heartbeat", "--without-gossip", "--without-mingle", "--loglevel", "INFO"],
    env=env, stdout=log, stderr=subprocess.STDOUT)


def lines():
    try:
        with open(out, encoding="utf-8") as f:
            return [l.split(" ", 1) for l in f.read().splitlines()]
    except FileNotFoundError:
        return []


def wait_for(pred, what, limit=60):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            fail(f"the worker exited ({worker.returncode}) waiting for {what}; see {log.name}")
        if pred():
            return
        time.sleep(0.1)
    fail(f"{what} did not happen within {limit} s; got {lines()!r}; see {log.name}")


try:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    os.environ.update(RELAYMQ_CELERY_PORT=str(port), RELAYMQ_CELERY_OUT=out)
    import celery_app

    # The worker declares the quorum queue and the delayed-delivery topology when it
    # starts; wait for it to take a first task.
    celery_app.add.delay(1, 2)
    wait_for(lambda: any(t == "add 3" for _, t in lines()), "the first task")
    ok("a worker on quorum queues runs a task")

    sent = time.time()
    celery_app.later.apply_async(args=["cd"], countdown=2)
    wait_for(lambda: any(t == "later cd" for _, t in lines()), "the countdown task")
    ran = float(next(ts for ts, t in lines() if t == "later cd"))
    # Correctness, not speed: a countdown task must not run before its time.
    check(ran >= sent + 2 - 0.05, f"countdown task ran {ran - sent:.3f} s after sending")
    ok(f"countdown=2 ran after {ran - sent:.2f} s")

    celery_app.flaky.delay("r")
    wait_for(lambda: any(t.startswith("flaky r ok") for _, t in lines()), "the retried task")
    texts = [t for _, t in lines()]
    check(texts.count("flaky r failed") == 1, f"failed exactly once: {texts!r}")
    ok("a task retried with a countdown succeeds")
    log.flush()
    with open(log.name, encoding="utf-8") as f:
        worker_log = f.read()
    for bad in ["Failed to setup delayed delivery", "Failed to declare", "not supported with native"]:
        check(bad not in worker_log, f"the worker logged {bad!r}; see {log.name}")
    ok("native delayed delivery set up without a warning")
finally:
    worker.terminate()
    try:
        worker.wait(10)
    except subprocess.TimeoutExpired:
        worker.kill()
    log.close()
