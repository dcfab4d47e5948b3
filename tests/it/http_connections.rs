//! The management API's connections, channels and consumers (docs/http-api.md §3),
//! against RabbitMQ's recorded replies, with who-sees-what by tag, closing a connection
//! with `X-Reason`, and the cluster and plugin families a one-node broker answers empty.

use crate::common::golden::{assert_same_shape_with, Shape, USER_DATA};
use crate::common::http::{request, Api};
use crate::common::{wait_until, TestServer};
use relaymq::amqp_client::{ConnectOptions, Connection};
use relaymq::broker::access::Credential;
use relaymq::client::{ConsumeOptions, QueueDeclareOptions};
use serde_json::json;
use std::time::Duration;

/// An AMQP connection named `name` with one channel (prefetch 10) consuming `queue`.
fn consumer(
    server: &TestServer,
    user: &str,
    password: &str,
    name: &str,
    queue: &str,
) -> Connection {
    let amqp = server.handle.amqp_addr().expect("AMQP listener");
    let mut opts = ConnectOptions::new(amqp.to_string());
    opts.user = user.into();
    opts.password = password.into();
    opts.connection_name = name.into();
    let mut c = Connection::connect(&opts).expect("AMQP connection");
    c.queue_declare(queue, QueueDeclareOptions::default())
        .expect("declare");
    c.basic_qos(10, false).expect("qos");
    c.basic_consume(queue, ConsumeOptions::default())
        .expect("consume");
    c
}

fn names(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .expect("a list")
        .iter()
        .map(|i| i["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn connections_channels_and_consumers_have_rabbitmqs_shape() {
    let server = TestServer::with_api();
    let _c = consumer(&server, "guest", "guest", "fixture consumer", "orders.work");
    let api = server.api();
    let connections = api.get_ok("/connections");
    let shape = Shape {
        opaque: USER_DATA,
        optional: &[],
        empty_arrays_ok: false,
    };
    assert_same_shape_with("connections", &connections, &shape);
    let conn = &connections[0];
    assert_eq!(conn["user_provided_name"], "fixture consumer");
    assert_eq!(conn["protocol"], "AMQP 0-9-1");
    assert_eq!(conn["channels"], 1);
    // The client's start-ok properties, as it sent them.
    assert_eq!(conn["client_properties"]["product"], "relaymq", "{conn}");
    assert_eq!(
        conn["client_properties"]["connection_name"],
        "fixture consumer"
    );
    assert!(
        conn["client_properties"]["capabilities"].is_object(),
        "{conn}"
    );
    assert!(conn["channel_max"].as_u64().unwrap() > 0, "{conn}");
    let name = conn["name"].as_str().unwrap().to_string();
    assert!(name.contains(" -> "), "{name}");
    let encoded: String = name.replace(' ', "%20").replace('>', "%3E");
    assert_eq!(api.get_ok(&format!("/connections/{encoded}"))["name"], name);
    let channels = api.get_ok("/channels");
    let optional = ["idle_since"];
    assert_same_shape_with(
        "channels",
        &channels,
        &Shape {
            opaque: USER_DATA,
            optional: &optional,
            empty_arrays_ok: false,
        },
    );
    assert_eq!(channels[0]["name"], format!("{name} (1)"));
    assert_eq!(
        (
            channels[0]["consumer_count"].clone(),
            channels[0]["prefetch_count"].clone()
        ),
        (json!(1), json!(10))
    );
    assert_eq!(
        names(&api.get_ok(&format!("/connections/{encoded}/channels"))),
        [format!("{name} (1)")]
    );
    assert_eq!(names(&api.get_ok("/vhosts/%2F/channels")).len(), 1);
    assert_eq!(
        names(&api.get_ok("/vhosts/%2F/connections")),
        vec![name.clone()]
    );
    let consumers = api.get_ok("/consumers");
    assert_same_shape_with("consumers", &consumers, &shape);
    assert_eq!(
        consumers[0]["queue"],
        json!({"name": "orders.work", "vhost": "/"})
    );
    assert_eq!(consumers[0]["prefetch_count"], 10);
    let details = &consumers[0]["channel_details"];
    assert_eq!(details["user"], "guest", "{details}");
    assert_eq!(details["peer_port"], conn["peer_port"], "{details}");
    assert_eq!(details["connection_name"], name);
    assert_eq!(api.get_ok("/consumers/%2F").as_array().unwrap().len(), 1);
    assert_eq!(api.get("/consumers/nowhere").status, 404);
    assert_eq!(api.get("/connections/nobody").status, 404);
}

#[test]
fn users_see_their_own_connections_and_only_administrators_close_others() {
    let server = TestServer::with_api();
    let broker = server.handle.broker();
    for (name, tags) in [
        ("app", vec!["management".to_string()]),
        ("watcher", vec!["monitoring".to_string()]),
    ] {
        broker
            .add_user(name, &Credential::Password(format!("{name}-secret")), tags)
            .unwrap();
        broker
            .set_permission(
                name,
                "/",
                relaymq::auth::permission::PermissionDef {
                    configure: ".*".into(),
                    write: ".*".into(),
                    read: ".*".into(),
                },
            )
            .unwrap();
    }
    let _guest = consumer(&server, "guest", "guest", "guest's", "q1");
    let _app = consumer(&server, "app", "app-secret", "app's", "q2");
    let addr = server.http_addr();
    let app = Api::as_user(addr, "app", "app-secret");
    let watcher = Api::as_user(addr, "watcher", "watcher-secret");
    let mine = app.get_ok("/connections");
    assert_eq!(mine.as_array().unwrap().len(), 1);
    assert_eq!(mine[0]["user"], "app");
    assert_eq!(app.get_ok("/channels").as_array().unwrap().len(), 1);
    assert_eq!(watcher.get_ok("/connections").as_array().unwrap().len(), 2);
    // A monitor may look but not close another user's connection; an administrator may.
    let guests = server.api().get_ok("/connections/username/guest");
    let name = guests[0]["name"]
        .as_str()
        .unwrap()
        .replace(' ', "%20")
        .replace('>', "%3E");
    let r = watcher.delete(&format!("/connections/{name}"));
    assert_eq!(
        (r.status, r.json()["error"].clone()),
        (401, json!("not_authorised"))
    );
    let r = app.get(&format!("/connections/{name}"));
    assert_eq!(r.status, 401);
    let r = request(
        addr,
        "DELETE",
        &format!("/api/connections/{name}"),
        Some(("guest", "guest")),
        None,
        &[("X-Reason", "maintenance window")],
    );
    assert_eq!(r.status, 204, "{}", r.text());
    wait_until(Duration::from_secs(10), "the connection closes", || {
        server
            .api()
            .get_ok("/connections/username/guest")
            .as_array()
            .unwrap()
            .is_empty()
    });
    // Its own connections, by user name: a management user may close them.
    assert_eq!(app.delete("/connections/username/app").status, 204);
    wait_until(Duration::from_secs(10), "app's connection closes", || {
        server
            .api()
            .get_ok("/connections")
            .as_array()
            .unwrap()
            .is_empty()
    });
}

#[test]
fn cluster_and_plugin_families_answer_as_a_one_node_broker() {
    let server = TestServer::with_api();
    let api = server.api();
    for path in [
        "/feature-flags",
        "/deprecated-features",
        "/deprecated-features/used",
        "/federation-links",
        "/federation-links/%2F",
        "/shovels",
        "/shovels/%2F",
        "/stream/connections",
        "/stream/consumers/%2F",
        "/stream/publishers",
    ] {
        assert_eq!(api.get_ok(path), json!([]), "{path}");
    }
    assert_eq!(api.get("/shovels/nowhere").status, 404);
    assert_eq!(api.get("/shovels/vhost/%2F/none").status, 404);
    let node = api.get_ok("/nodes")[0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(api.get_ok(&format!("/auth/attempts/{node}")), json!([]));
    // The version needs no credentials, as RabbitMQ's.
    let r = request(server.http_addr(), "GET", "/api/version", None, None, &[]);
    assert_eq!(
        (r.status, r.json()),
        (200, api.get_ok("/overview")["rabbitmq_version"].clone())
    );
}

#[test]
fn exchanges_channels_connections_and_the_node_count_their_messages() {
    use relaymq::client::{ConsumerEvent, ExchangeDeclareOptions};
    use relaymq::types::{BasicProperties, FieldTable};
    let server = TestServer::with_api();
    let api = server.api();
    let before = api.get_ok("/overview")["churn_rates"].clone();

    // A publisher in confirm mode: 20 messages to a fanout exchange bound to two queues,
    // then one unroutable mandatory and one unroutable plain publish.
    let publisher = crate::common::connect(&server);
    let ch = publisher.open_channel().unwrap();
    ch.exchange_declare("stats.fan", "fanout", ExchangeDeclareOptions::default())
        .unwrap();
    ch.exchange_declare("stats.nowhere", "direct", ExchangeDeclareOptions::default())
        .unwrap();
    for q in ["stats.a", "stats.b"] {
        ch.queue_declare(q, QueueDeclareOptions::default()).unwrap();
        ch.queue_bind(q, "stats.fan", "", FieldTable::default())
            .unwrap();
    }
    ch.confirm_select().unwrap();
    let props = BasicProperties::default();
    for _ in 0..20 {
        ch.basic_publish("stats.fan", "", false, &props, b"m")
            .unwrap();
    }
    ch.basic_publish("stats.nowhere", "k", true, &props, b"r")
        .unwrap();
    ch.basic_publish("stats.nowhere", "k", false, &props, b"d")
        .unwrap();
    assert!(ch.wait_for_confirms(Duration::from_secs(10)).unwrap());

    // A consumer taking 5 with acks, then gets: 2 with acks, 1 without, then empties.
    let taker = crate::common::connect(&server);
    let tc = taker.open_channel().unwrap();
    tc.basic_qos(5, false).unwrap();
    let consumer = tc
        .basic_consume("stats.a", ConsumeOptions::default())
        .unwrap();
    let mut last = 0;
    for _ in 0..5 {
        match consumer.recv_timeout(Duration::from_secs(10)).unwrap() {
            ConsumerEvent::Delivery(d) => last = d.delivery_tag,
            other => panic!("expected a delivery, got {other:?}"),
        }
    }
    // Its prefetch is full and 15 wait: the queue cannot deliver (utilisation 0); the
    // queue and the channel list the consumer.
    let qa = api.get_ok("/queues/%2F/stats.a");
    assert_eq!(qa["consumer_utilisation"], 0.0, "{qa}");
    let details = qa["consumer_details"].as_array().unwrap().clone();
    assert_eq!(details.len(), 1, "{qa}");
    assert_eq!(details[0]["consumer_tag"], consumer.tag());
    assert_eq!(details[0]["prefetch_count"], 5);
    let channel_name = details[0]["channel_details"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let encoded = channel_name.replace(' ', "%20").replace('>', "%3E");
    let channel = api.get_ok(&format!("/channels/{encoded}"));
    assert_eq!(
        channel["consumer_details"][0]["consumer_tag"],
        consumer.tag(),
        "{channel}"
    );
    tc.basic_ack(last, true).unwrap();
    consumer.cancel().unwrap();
    for _ in 0..2 {
        let m = tc.basic_get("stats.b", false).unwrap().expect("a message");
        tc.basic_ack(m.delivery_tag, false).unwrap();
    }
    assert!(tc.basic_get("stats.b", true).unwrap().is_some());
    tc.queue_purge("stats.b").unwrap();
    assert!(tc.basic_get("stats.b", true).unwrap().is_none());

    // Exchanges: in once per publish, out once per queue reached.
    let fan = api.get_ok("/exchanges/%2F/stats.fan");
    assert_eq!(fan["message_stats"]["publish_in"], 20, "{fan}");
    assert_eq!(fan["message_stats"]["publish_out"], 40, "{fan}");
    let nowhere = api.get_ok("/exchanges/%2F/stats.nowhere");
    assert_eq!(nowhere["message_stats"]["publish_in"], 2);
    assert_eq!(nowhere["message_stats"]["publish_out"], 0);

    // Channels.
    let connections = api.get_ok("/connections");
    let by_traffic: Vec<(String, u64, u64)> = connections
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["recv_oct"].as_u64().unwrap(),
                c["send_oct"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(by_traffic.len(), 2, "{connections}");
    assert!(
        by_traffic.iter().all(|(_, r, s)| *r > 0 && *s > 0),
        "every connection has sent and received bytes: {by_traffic:?}"
    );
    assert!(connections[0]["channel_max"].as_u64().unwrap() > 0);
    let rows = api.get_ok("/channels");
    let stats_of = |pick: &dyn Fn(&serde_json::Value) -> bool| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|c| pick(c))
            .unwrap_or_else(|| panic!("no such channel in {rows}"))
            .clone()
    };
    let pub_row = stats_of(&|c| c["confirm"] == true);
    let m = &pub_row["message_stats"];
    assert_eq!(
        (
            &m["publish"],
            &m["confirm"],
            &m["return_unroutable"],
            &m["drop_unroutable"]
        ),
        (&json!(22), &json!(22), &json!(1), &json!(1)),
        "{pub_row}"
    );
    assert!(m["publish_details"]["rate"].is_number());
    let take_row = stats_of(&|c| c["confirm"] == false);
    let m = &take_row["message_stats"];
    assert_eq!(
        (&m["get"], &m["get_no_ack"], &m["get_empty"], &m["ack"]),
        (&json!(2), &json!(1), &json!(1), &json!(7)),
        "{take_row}"
    );
    // Pushed: the 5 acked and what prefetch let through before the cancel (unacked).
    let deliver = m["deliver"].as_u64().unwrap();
    let unacked = take_row["messages_unacknowledged"].as_u64().unwrap();
    assert_eq!(deliver, 5 + unacked, "{take_row}");
    assert_eq!(m["deliver_get"].as_u64().unwrap(), deliver + 3);

    // The vhost and the overview count what was published (22), not what queues took
    // in (40), and the vhost its connections' bytes.
    let vhost = api.get_ok("/vhosts/%2F");
    assert_eq!(vhost["message_stats"]["publish"], 22, "{vhost}");
    assert_eq!(vhost["message_stats"]["ack"], 7, "{vhost}");
    assert!(vhost["recv_oct"].as_u64().unwrap() > 0, "{vhost}");
    assert_eq!(
        api.get_ok("/overview")["message_stats"]["publish"],
        22,
        "the overview counts publishes"
    );

    // The node's churn: 2 connections, 2 channels and 2 queues more than before.
    let churn = api.get_ok("/overview")["churn_rates"].clone();
    let grew = |k: &str| churn[k].as_u64().unwrap() - before[k].as_u64().unwrap();
    assert_eq!(grew("connection_created"), 2, "{churn}");
    assert_eq!(grew("channel_created"), 2, "{churn}");
    assert_eq!(grew("queue_created"), 2, "{churn}");
    assert!(grew("queue_declared") >= 2, "{churn}");
    assert!(churn["queue_deleted_details"]["rate"].is_number());
    drop(taker);
    wait_until(Duration::from_secs(10), "the channel close counted", || {
        let c = api.get_ok("/overview")["churn_rates"].clone();
        c["channel_closed"].as_u64().unwrap() > before["channel_closed"].as_u64().unwrap()
            && c["connection_closed"].as_u64().unwrap()
                > before["connection_closed"].as_u64().unwrap()
    });
}
