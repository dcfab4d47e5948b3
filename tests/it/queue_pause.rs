//! Pausing a queue (docs/lifecycle.md, "Pausing a queue"): its consumers stay attached and
//! get nothing until it is resumed, `basic.get` still answers, the HTTP API shows `state:
//! paused`, a durable queue stays paused across a restart, and only a user with `configure`
//! on the queue may pause or resume it.

use crate::common;
use common::http::Api;
use common::{connect, ServerProcess, TestServer};
use relaymq::client::{
    Channel, ClientError, ConnectOptions, Connection, ConsumeOptions, Consumer, ConsumerEvent,
    QueueDeclareOptions,
};
use relaymq::types::BasicProperties;
use serde_json::{json, Value};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

/// How long a test waits to be sure nothing is delivered.
const QUIET: Duration = Duration::from_millis(400);

fn publish(ch: &Channel, queue: &str, body: &str, persistent: bool) {
    let props = BasicProperties {
        delivery_mode: persistent.then_some(2),
        ..BasicProperties::default()
    };
    ch.basic_publish("", queue, false, &props, body.as_bytes())
        .expect("publish");
}

fn body_of(consumer: &Consumer) -> String {
    match consumer.recv_timeout(WAIT).expect("a delivery") {
        ConsumerEvent::Delivery(d) => String::from_utf8(d.body).unwrap(),
        other => panic!("{other:?}"),
    }
}

fn assert_quiet(consumer: &Consumer) {
    match consumer.recv_timeout(QUIET) {
        Err(ClientError::Timeout) => {}
        other => panic!("a paused queue delivered: {other:?}"),
    }
}

fn action(api: &Api, q: &str, action: &str) -> u16 {
    api.post(
        &format!("/queues/%2F/{q}/actions"),
        &json!({ "action": action }),
    )
    .status
}

fn queue_row(api: &Api, q: &str) -> Value {
    api.get_ok(&format!("/queues/%2F/{q}"))
}

fn wait_ready(api: &Api, q: &str, n: u64) {
    common::wait_until(WAIT, "messages ready", || {
        queue_row(api, q)["messages_ready"].as_u64() == Some(n)
    });
}

#[test]
fn a_paused_queue_keeps_its_consumers_delivers_nothing_and_answers_gets() {
    let server = TestServer::with_api();
    let api = server.api();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", QueueDeclareOptions::default())
        .unwrap();
    let consumer = ch.basic_consume("q", ConsumeOptions::default()).unwrap();
    publish(&ch, "q", "before", false);
    assert_eq!(body_of(&consumer), "before");

    assert_eq!(action(&api, "q", "pause"), 204);
    assert_eq!(action(&api, "q", "pause"), 204, "pausing twice is fine");
    let row = queue_row(&api, "q");
    assert_eq!(
        (row["state"].clone(), row["paused"].clone()),
        (json!("paused"), json!(true))
    );
    assert_eq!(row["consumers"], json!(1), "the consumer stays attached");
    let listed = api.get_ok("/queues?sort=state&columns=name,state,paused");
    assert_eq!(
        listed,
        json!([{"name": "q", "state": "paused", "paused": true}])
    );

    for body in ["one", "two", "three"] {
        publish(&ch, "q", body, false);
    }
    wait_ready(&api, "q", 3);
    assert_quiet(&consumer);
    // Messages wait and no consumer may take them: the queue's consumers are not used.
    assert_eq!(queue_row(&api, "q")["consumer_utilisation"], json!(0.0));
    // A consumer joining a paused queue gets nothing either.
    let ch2 = conn.open_channel().unwrap();
    let late = ch2.basic_consume("q", ConsumeOptions::default()).unwrap();
    assert_quiet(&late);
    // An operator fetching by hand is what a pause is for.
    let got = ch2.basic_get("q", true).unwrap().expect("a message");
    assert_eq!(got.body, b"one");
    wait_ready(&api, "q", 2);

    // RabbitMQ's other actions are still refused as RabbitMQ refuses them.
    let sync = api.post("/queues/%2F/q/actions", &json!({"action": "sync"}));
    assert_eq!(sync.status, 400);
    assert_eq!(sync.json()["reason"], json!(["unknown", "sync"]));

    ch.queue_resume("q").unwrap();
    ch.queue_resume("q").unwrap();
    let mut bodies = vec![body_of(&consumer), body_of(&late)];
    bodies.sort();
    assert_eq!(bodies, ["three", "two"], "resume dispatches at once");
    let row = queue_row(&api, "q");
    assert_eq!(
        (row["state"].clone(), row["paused"].clone()),
        (json!("running"), json!(false))
    );
    assert_eq!(
        action(&api, "q", "resume"),
        204,
        "resuming a running queue is fine"
    );
}

#[test]
fn pausing_needs_configure_permission_on_the_queue() {
    let server = TestServer::with_api();
    let api = server.api();
    let conn = connect(&server);
    conn.open_channel()
        .unwrap()
        .queue_declare("q", QueueDeclareOptions::default())
        .unwrap();
    let r = api.put(
        "/users/reader",
        &json!({"password": "pw", "tags": "management"}),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let r = api.put(
        "/permissions/%2F/reader",
        &json!({"configure": "^$", "write": ".*", "read": ".*"}),
    );
    assert_eq!(r.status, 201, "{}", r.text());

    let reader = Api::as_user(server.http_addr(), "reader", "pw");
    assert_eq!(action(&reader, "q", "pause"), 401);
    assert_eq!(action(&reader, "absent", "pause"), 404);
    let mut options = ConnectOptions::new(server.addr_string());
    options.user = "reader".into();
    options.password = "pw".into();
    let native = Connection::connect_with(options).unwrap();
    let e = native
        .open_channel()
        .unwrap()
        .queue_pause("q")
        .expect_err("refused");
    assert_eq!(e.reply_code(), Some(403), "{e}");
    assert_eq!(queue_row(&api, "q")["state"], json!("running"));
}

/// Runs `relaymq-cli` against `server` as guest and checks it succeeded.
fn cli(server: &ServerProcess, args: &[&str]) {
    common::cli_ok(&server.addr_string(), args);
}

fn api_of(server: &ServerProcess) -> Api {
    Api::guest(
        server.ready["http_listen"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap(),
    )
}

#[test]
fn a_durable_queue_stays_paused_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let http = [
        "--http-listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    let server = ServerProcess::start(&data, &http);
    {
        let conn = Connection::connect(&server.addr_string()).unwrap();
        let ch = conn.open_channel().unwrap();
        let options = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        ch.queue_declare("orders", options).unwrap();
        cli(&server, &["pause", "orders"]);
        publish(&ch, "orders", "kept", true);
        wait_ready(&api_of(&server), "orders", 1);
    }
    assert!(server.terminate().success());

    let server = ServerProcess::start(&data, &http);
    let api = api_of(&server);
    assert_eq!(queue_row(&api, "orders")["state"], json!("paused"));
    assert_eq!(paused_gauge(&server), "1");
    let conn = Connection::connect(&server.addr_string()).unwrap();
    let ch = conn.open_channel().unwrap();
    let consumer = ch
        .basic_consume("orders", ConsumeOptions::default())
        .unwrap();
    assert_quiet(&consumer);
    cli(&server, &["resume", "orders"]);
    assert_eq!(body_of(&consumer), "kept");
    assert_eq!(queue_row(&api, "orders")["state"], json!("running"));
    assert_eq!(paused_gauge(&server), "0");
}

/// The value of `relaymq_queues_paused` on the server's metrics page.
fn paused_gauge(server: &ServerProcess) -> String {
    let addr = server.ready["metrics_listen"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let page = common::http::request(addr, "GET", "/metrics", None, None, &[]).text();
    page.lines()
        .find_map(|l| l.strip_prefix("relaymq_queues_paused "))
        .expect("relaymq_queues_paused on the page")
        .to_string()
}
