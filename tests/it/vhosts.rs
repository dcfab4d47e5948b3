//! Virtual hosts end to end: the default vhost, declaring and listing vhosts, isolation of
//! their exchanges and queues, and what deleting one does to its connections and queues
//! (AMQP 0-9-1 §3.1.1, RabbitMQ's semantics; administration is on channel 0).

use crate::common;

use common::TestServer;
use relaymq::client::{
    ClientError, ConnectOptions, Connection, ConsumeOptions, ConsumerEvent, ExchangeDeclareOptions,
    ListKind, QueueDeclareOptions,
};
use relaymq::types::{BasicProperties, FieldValue};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(5);

fn connect_to(server: &TestServer, vhost: &str) -> Result<Connection, ClientError> {
    let mut options = ConnectOptions::new(server.addr_string());
    options.timeout = Duration::from_secs(10);
    options.vhost = vhost.into();
    Connection::connect_with(options)
}

fn connect(server: &TestServer, vhost: &str) -> Connection {
    connect_to(server, vhost).expect("connect")
}

fn vhost_names(conn: &Connection) -> Vec<String> {
    conn.list(ListKind::Vhosts)
        .expect("list vhosts")
        .iter()
        .filter_map(|r| r.get("name").and_then(FieldValue::as_str).map(String::from))
        .collect()
}

fn passive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    }
}

/// Ready messages of `queue` in the connection's vhost, or `None` when it is absent.
fn ready(conn: &Connection, queue: &str) -> Option<u32> {
    let ch = conn.open_channel().expect("channel");
    match ch.queue_declare(queue, passive()) {
        Ok(ok) => Some(ok.message_count),
        Err(e) if e.reply_code() == Some(404) => None,
        Err(e) => panic!("passive declare of {queue:?}: {e}"),
    }
}

#[test]
fn the_default_vhost_exists() {
    let server = TestServer::start();
    let conn = connect(&server, "/");
    assert_eq!(vhost_names(&conn), ["/"]);
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", QueueDeclareOptions::default())
        .unwrap();
    let rows = conn.list(ListKind::Queues).unwrap();
    assert_eq!(rows[0].get("vhost").and_then(FieldValue::as_str), Some("/"));
}

#[test]
fn a_declared_vhost_is_listed_and_accepts_connections() {
    let server = TestServer::start();
    let admin = connect(&server, "/");
    admin.declare_vhost("staging").unwrap();
    admin.declare_vhost("staging").unwrap(); // idempotent
    admin.declare_vhost("prod/eu").unwrap();
    let mut names = vhost_names(&admin);
    names.sort();
    assert_eq!(names, ["/", "prod/eu", "staging"]);
    let conn = connect(&server, "staging");
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("q", QueueDeclareOptions::default())
        .unwrap();
    let rows = conn.list(ListKind::Queues).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0].get("vhost").and_then(FieldValue::as_str),
        Some("staging")
    );
}

#[test]
fn the_same_queue_name_in_two_vhosts_names_two_queues() {
    let server = TestServer::start();
    let admin = connect(&server, "/");
    admin.declare_vhost("a").unwrap();
    admin.declare_vhost("b").unwrap();
    let (ca, cb) = (connect(&server, "a"), connect(&server, "b"));
    let (cha, chb) = (ca.open_channel().unwrap(), cb.open_channel().unwrap());
    cha.queue_declare("shared", QueueDeclareOptions::default())
        .unwrap();
    assert_eq!(ready(&cb, "shared"), None, "declared in a only");
    // Different flags are fine: it is another queue.
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    chb.queue_declare("shared", durable).unwrap();
    let props = BasicProperties::default();
    cha.basic_publish("", "shared", false, &props, b"in a")
        .unwrap();
    cha.basic_publish("", "shared", false, &props, b"in a, 2")
        .unwrap();
    chb.basic_publish("", "shared", false, &props, b"in b")
        .unwrap();
    assert_eq!(ready(&ca, "shared"), Some(2));
    assert_eq!(ready(&cb, "shared"), Some(1));
    assert_eq!(
        chb.basic_get("shared", true).unwrap().unwrap().body,
        b"in b"
    );
    assert!(chb.basic_get("shared", true).unwrap().is_none());
    assert_eq!(ready(&ca, "shared"), Some(2));
    // The default vhost has no such queue.
    assert_eq!(ready(&admin, "shared"), None);
}

#[test]
fn exchanges_and_bindings_are_separate_per_vhost() {
    let server = TestServer::start();
    let admin = connect(&server, "/");
    admin.declare_vhost("a").unwrap();
    admin.declare_vhost("b").unwrap();
    let (ca, cb) = (connect(&server, "a"), connect(&server, "b"));
    let (cha, chb) = (ca.open_channel().unwrap(), cb.open_channel().unwrap());
    cha.exchange_declare("events", "fanout", ExchangeDeclareOptions::default())
        .unwrap();
    // `events` does not exist in b: a topic exchange of that name can be declared there.
    chb.exchange_declare("events", "topic", ExchangeDeclareOptions::default())
        .unwrap();
    let qa = cha
        .queue_declare("", QueueDeclareOptions::default())
        .unwrap()
        .queue;
    let qb = chb
        .queue_declare("", QueueDeclareOptions::default())
        .unwrap()
        .queue;
    cha.queue_bind(&qa, "amq.fanout", "", Default::default())
        .unwrap();
    chb.queue_bind(&qb, "events", "#", Default::default())
        .unwrap();
    let props = BasicProperties::default();
    // Each vhost has its own amq.fanout and its own `events`.
    cha.basic_publish("amq.fanout", "", false, &props, b"a fanout")
        .unwrap();
    cha.basic_publish("events", "x", false, &props, b"a events")
        .unwrap();
    assert_eq!(cha.basic_get(&qa, true).unwrap().unwrap().body, b"a fanout");
    assert!(cha.basic_get(&qa, true).unwrap().is_none());
    assert!(chb.basic_get(&qb, true).unwrap().is_none());
    let rows = cb.list(ListKind::Bindings).unwrap();
    assert!(rows
        .iter()
        .all(|r| r.get("vhost").and_then(FieldValue::as_str) == Some("b")));
}

#[test]
fn deleting_a_vhost_closes_its_connections_with_320() {
    let server = TestServer::start();
    let admin = connect(&server, "/");
    admin.declare_vhost("doomed").unwrap();
    let victim = connect(&server, "doomed");
    let ch = victim.open_channel().unwrap();
    ch.queue_declare("q", QueueDeclareOptions::default())
        .unwrap();
    let consumer = ch.basic_consume("q", ConsumeOptions::default()).unwrap();
    let bystander = connect(&server, "/");
    let bch = bystander.open_channel().unwrap();
    bch.queue_declare("q", QueueDeclareOptions::default())
        .unwrap();
    admin.delete_vhost("doomed").unwrap();
    match consumer.recv_timeout(WAIT) {
        Err(ClientError::ConnectionClosed { code: 320, text }) => {
            assert!(text.contains("doomed"), "{text}")
        }
        Ok(ConsumerEvent::Cancelled) => {
            // The queue's deletion may be seen first; the connection close follows.
            let e = ch
                .queue_declare("q", QueueDeclareOptions::default())
                .unwrap_err();
            assert_eq!(e.reply_code(), Some(320), "{e}");
        }
        other => panic!("expected connection.close 320, got {other:?}"),
    }
    let e = ch
        .queue_declare("q", QueueDeclareOptions::default())
        .unwrap_err();
    assert_eq!(e.reply_code(), Some(320), "{e}");
    assert!(!victim.is_open());
    // Connections to other vhosts are untouched.
    assert!(bystander.is_open());
    assert_eq!(ready(&bystander, "q"), Some(0));
    assert!(admin.is_open());
}

#[test]
fn deleting_a_vhost_deletes_its_queues_and_exchanges() {
    let server = TestServer::start();
    let admin = connect(&server, "/");
    admin.declare_vhost("v").unwrap();
    {
        let conn = connect(&server, "v");
        let ch = conn.open_channel().unwrap();
        ch.queue_declare("q", QueueDeclareOptions::default())
            .unwrap();
        ch.exchange_declare("x", "direct", ExchangeDeclareOptions::default())
            .unwrap();
        ch.basic_publish("", "q", false, &BasicProperties::default(), b"m")
            .unwrap();
        assert_eq!(ready(&conn, "q"), Some(1));
        conn.close().unwrap();
    }
    admin.delete_vhost("v").unwrap();
    assert_eq!(vhost_names(&admin), ["/"]);
    // Connecting to it now fails; re-created, it is empty.
    assert_eq!(
        connect_to(&server, "v").unwrap_err().reply_code(),
        Some(402)
    );
    admin.declare_vhost("v").unwrap();
    let conn = connect(&server, "v");
    assert_eq!(ready(&conn, "q"), None);
    let ch = conn.open_channel().unwrap();
    let passive = ExchangeDeclareOptions {
        passive: true,
        ..ExchangeDeclareOptions::default()
    };
    let e = ch.exchange_declare("x", "direct", passive).unwrap_err();
    assert_eq!(e.reply_code(), Some(404), "{e}");
    assert!(conn.list(ListKind::Queues).unwrap().is_empty());
}

#[test]
fn connecting_to_a_missing_vhost_fails_with_402() {
    let server = TestServer::start();
    match connect_to(&server, "nowhere") {
        Err(ClientError::Auth { code: 402, text }) => assert!(text.contains("nowhere"), "{text}"),
        other => panic!("expected 402, got {other:?}"),
    }
    // The vhost was not created by the attempt.
    let admin = connect(&server, "/");
    assert_eq!(vhost_names(&admin), ["/"]);
}

#[test]
fn deleting_a_missing_vhost_fails_with_404_and_the_connection_stays_usable() {
    let server = TestServer::start();
    let admin = connect(&server, "/");
    let e = admin.delete_vhost("nowhere").unwrap_err();
    assert_eq!(e.reply_code(), Some(404), "{e}");
    assert!(admin.is_open());
    admin.declare_vhost("later").unwrap();
    assert!(vhost_names(&admin).contains(&"later".to_string()));
    let ch = admin.open_channel().unwrap();
    ch.queue_declare("q", QueueDeclareOptions::default())
        .unwrap();
}

#[test]
fn declaring_a_vhost_with_an_empty_name_is_refused_and_the_connection_stays_usable() {
    let server = TestServer::start();
    let admin = connect(&server, "/");
    let e = admin.declare_vhost("").unwrap_err();
    assert_eq!(e.reply_code(), Some(406), "{e}");
    assert!(admin.is_open());
    assert_eq!(vhost_names(&admin), ["/"]);
}

#[test]
fn the_default_vhost_cannot_be_deleted_so_the_broker_stays_reachable() {
    let server = TestServer::start();
    let admin = connect(&server, "/");
    let err = admin.delete_vhost("/").expect_err("deleting / is refused");
    assert_eq!(err.reply_code(), Some(406), "{err}");
    assert!(vhost_names(&admin).contains(&"/".to_string()));
    // The refusal cost neither the vhost nor the connection.
    connect(&server, "/")
        .close()
        .expect("new connections to / still work");
    admin.close().expect("admin connection still open");
}
