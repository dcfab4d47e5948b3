"""RelayMQ's management HTTP API driven by Python clients written for RabbitMQ, unmodified:
pyrabbit2 and amqpstorm.management, each listing, creating, publishing to, getting from
and deleting objects. Usage: management_clients.py PORT CLIENT (pyrabbit2|amqpstorm).
Prints one line per step and exits 0 when every step did what RabbitMQ does."""

import sys


def check(what, ok):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        sys.exit(1)


def pyrabbit2(port):
    from pyrabbit2.api import Client

    c = Client(f"127.0.0.1:{port}", "guest", "guest")
    check("is_alive", c.is_alive("%2F"))
    overview = c.get_overview()
    check("get_overview has rabbitmq_version", "rabbitmq_version" in overview)
    check("get_nodes", len(c.get_nodes()) == 1)
    c.create_vhost("py-vhost")
    check("create_vhost / get_vhost_names", "py-vhost" in c.get_vhost_names())
    c.set_vhost_permissions("py-vhost", "guest", ".*", ".*", ".*")
    c.create_exchange("py-vhost", "py.events", "topic", durable=True)
    check("create_exchange / get_exchanges", any(x["name"] == "py.events" for x in c.get_exchanges("py-vhost")))
    c.create_queue("py-vhost", "py.orders", durable=True)
    check("create_queue / get_queues", [q["name"] for q in c.get_queues("py-vhost")] == ["py.orders"])
    c.create_binding("py-vhost", "py.events", "py.orders", "order.#")
    bindings = c.get_queue_bindings("py-vhost", "py.orders")
    check("create_binding / get_queue_bindings", any(b["source"] == "py.events" for b in bindings))
    routed = c.publish("py-vhost", "py.events", "order.created", "hello from pyrabbit2")
    check("publish routed", routed)
    messages = c.get_messages("py-vhost", "py.orders", count=1, requeue=False)
    check("get_messages payload", messages[0]["payload"] == "hello from pyrabbit2")
    check("get_queue_depth after get", c.get_queue_depth("py-vhost", "py.orders") == 0)
    check("get_users", any(u["name"] == "guest" for u in c.get_users()))
    c.create_user("py-user", "py-secret", tags=["management"])
    check("create_user", any(u["name"] == "py-user" for u in c.get_users()))
    c.delete_user("py-user")
    c.delete_queue("py-vhost", "py.orders")
    check("delete_queue", c.get_queues("py-vhost") == [])
    c.delete_exchange("py-vhost", "py.events")
    c.delete_vhost("py-vhost")
    check("delete_vhost", "py-vhost" not in c.get_vhost_names())


def amqpstorm(port):
    from amqpstorm.management import ManagementApi

    api = ManagementApi(f"http://127.0.0.1:{port}", "guest", "guest")
    check("aliveness_test", api.aliveness_test("/")["status"] == "ok")
    check("overview", "rabbitmq_version" in api.overview())
    check("whoami", api.whoami()["name"] == "guest")
    check("nodes", len(api.nodes()) == 1)
    api.virtual_host.create("storm")
    check("virtual_host.list", any(v["name"] == "storm" for v in api.virtual_host.list()))
    api.user.set_permission("guest", "storm", ".*", ".*", ".*")
    api.exchange.declare("storm.x", "direct", virtual_host="storm", durable=True)
    check("exchange.list", any(x["name"] == "storm.x" for x in api.exchange.list(virtual_host="storm")))
    api.queue.declare("storm.q", virtual_host="storm", durable=True)
    check("queue.get", api.queue.get("storm.q", virtual_host="storm")["name"] == "storm.q")
    api.queue.bind("storm.q", "storm.x", "key", virtual_host="storm")
    check("queue.bindings", any(b["source"] == "storm.x" for b in api.queue.bindings("storm.q", virtual_host="storm")))
    api.basic.publish("hello from amqpstorm", "key", exchange="storm.x", virtual_host="storm")
    got = api.basic.get("storm.q", virtual_host="storm", requeue=False, to_dict=True)
    check("basic.get", got[0]["payload"] == "hello from amqpstorm")
    check("queue.list paged", [q["name"] for q in api.queue.list(virtual_host="storm")] == ["storm.q"])
    check("connection.list", isinstance(api.connection.list(), list))
    check("channel.list", isinstance(api.channel.list(), list))
    api.queue.purge("storm.q", virtual_host="storm")
    api.queue.delete("storm.q", virtual_host="storm")
    check("queue.delete", api.queue.list(virtual_host="storm") == [])
    api.exchange.delete("storm.x", virtual_host="storm")
    api.virtual_host.delete("storm")
    check("virtual_host.delete", all(v["name"] != "storm" for v in api.virtual_host.list()))


if __name__ == "__main__":
    port, client = int(sys.argv[1]), sys.argv[2]
    {"pyrabbit2": pyrabbit2, "amqpstorm": amqpstorm}[client](port)
    print("all ok")
