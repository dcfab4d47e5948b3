//! A publishing connection remembers its recent routes (`broker::topology`); every change
//! to exchanges, queues or bindings, made on any connection, must reach its next publish.
//! Each step publishes on the same channel with the same exchange and routing key, so a
//! stale cached route would show as a message in the wrong place (or in none).

use crate::common;

use common::TestServer;
use relaymq::client::{
    Channel, Connection, ExchangeDeclareOptions, PublishMessage, QueueDeclareOptions,
};
use relaymq::types::{BasicProperties, FieldTable};

fn message(exchange: &str, routing_key: &str) -> PublishMessage {
    PublishMessage {
        exchange: exchange.into(),
        routing_key: routing_key.into(),
        mandatory: false,
        properties: BasicProperties::default(),
        body: b"m".to_vec(),
    }
}

/// Ready messages of `queue`, read on a fresh channel of `conn` (after everything `conn`
/// sent before: a connection's methods are handled in order).
fn ready(conn: &Connection, queue: &str) -> u32 {
    let ch = conn.open_channel().unwrap();
    let n = ch
        .queue_declare(
            queue,
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
        )
        .expect("passive declare")
        .message_count;
    ch.close().unwrap();
    n
}

fn declare(ch: &Channel, queue: &str) {
    ch.queue_declare(queue, QueueDeclareOptions::default())
        .unwrap();
}

#[test]
fn bindings_made_and_removed_elsewhere_reach_the_next_publish() {
    let server = TestServer::start();
    let publisher = Connection::connect(&server.addr_string()).unwrap();
    let admin = Connection::connect(&server.addr_string()).unwrap();
    let p = publisher.open_channel().unwrap();
    let a = admin.open_channel().unwrap();
    a.exchange_declare("x", "direct", ExchangeDeclareOptions::default())
        .unwrap();
    declare(&a, "q1");
    declare(&a, "q2");

    // Unroutable first: the empty route is what gets remembered.
    p.publish_batch(&[message("x", "k")]).unwrap();
    assert_eq!(ready(&publisher, "q1"), 0);

    a.queue_bind("q1", "x", "k", FieldTable::new()).unwrap();
    p.publish_batch(&[message("x", "k")]).unwrap();
    assert_eq!(ready(&publisher, "q1"), 1, "a new binding routes");

    a.queue_bind("q2", "x", "k", FieldTable::new()).unwrap();
    p.publish_batch(&[message("x", "k")]).unwrap();
    assert_eq!(
        (ready(&publisher, "q1"), ready(&publisher, "q2")),
        (2, 1),
        "a second binding adds a queue"
    );

    a.queue_unbind("q1", "x", "k", FieldTable::new()).unwrap();
    p.publish_batch(&[message("x", "k")]).unwrap();
    assert_eq!(
        (ready(&publisher, "q1"), ready(&publisher, "q2")),
        (2, 2),
        "an unbinding removes the queue"
    );
}

#[test]
fn a_queue_deleted_and_declared_again_gets_the_next_publish() {
    let server = TestServer::start();
    let publisher = Connection::connect(&server.addr_string()).unwrap();
    let admin = Connection::connect(&server.addr_string()).unwrap();
    let p = publisher.open_channel().unwrap();
    let a = admin.open_channel().unwrap();
    declare(&a, "q");
    p.publish_batch(&[message("", "q")]).unwrap();
    assert_eq!(ready(&publisher, "q"), 1);

    a.queue_delete("q", false, false).unwrap();
    declare(&a, "q");
    p.publish_batch(&[message("", "q")]).unwrap();
    assert_eq!(
        ready(&publisher, "q"),
        1,
        "the new queue, not the deleted one"
    );

    // A queue that did not exist when a route was remembered.
    p.publish_batch(&[message("", "later")]).unwrap();
    declare(&a, "later");
    p.publish_batch(&[message("", "later")]).unwrap();
    assert_eq!(ready(&publisher, "later"), 1);
}

#[test]
fn exchanges_and_exchange_bindings_changed_elsewhere_reach_the_next_publish() {
    let server = TestServer::start();
    let publisher = Connection::connect(&server.addr_string()).unwrap();
    let admin = Connection::connect(&server.addr_string()).unwrap();
    let p = publisher.open_channel().unwrap();
    let a = admin.open_channel().unwrap();
    for x in ["front", "back"] {
        a.exchange_declare(x, "topic", ExchangeDeclareOptions::default())
            .unwrap();
    }
    declare(&a, "q");
    a.queue_bind("q", "back", "a.#", FieldTable::new()).unwrap();
    p.publish_batch(&[message("front", "a.b")]).unwrap();
    assert_eq!(ready(&publisher, "q"), 0);

    a.exchange_bind("back", "front", "#", FieldTable::new())
        .unwrap();
    p.publish_batch(&[message("front", "a.b")]).unwrap();
    assert_eq!(
        ready(&publisher, "q"),
        1,
        "through the new exchange binding"
    );

    // Deleted and declared again as a fanout with the queue bound directly.
    a.exchange_delete("front", false).unwrap();
    a.exchange_declare("front", "fanout", ExchangeDeclareOptions::default())
        .unwrap();
    p.publish_batch(&[message("front", "a.b")]).unwrap();
    assert_eq!(
        ready(&publisher, "q"),
        1,
        "the new exchange has no bindings"
    );
    a.queue_bind("q", "front", "", FieldTable::new()).unwrap();
    p.publish_batch(&[message("front", "a.b")]).unwrap();
    assert_eq!(ready(&publisher, "q"), 2);
}
