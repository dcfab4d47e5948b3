//! Topic exchange routing, end to end: for each (binding key, routing key) pair a fresh
//! exclusive server-named queue is bound to a topic exchange, one message is published
//! and `basic.get` shows whether it arrived (AMQP 0-9-1 §3.1.3.3, RabbitMQ semantics:
//! `*` is exactly one word, `#` zero or more, an empty routing key is zero words).

use crate::common;
use common::connect;

use common::TestServer;
use relaymq::client::{Channel, ExchangeDeclareOptions, QueueDeclareOptions};
use relaymq::types::{BasicProperties, FieldTable};

fn exclusive_queue(ch: &Channel) -> String {
    let options = QueueDeclareOptions {
        exclusive: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare("", options).expect("declare").queue
}

/// Binds a fresh queue with `binding_key`, publishes one message with `routing_key` and
/// returns whether the queue got it (checking it got exactly one copy, intact).
fn routed(ch: &Channel, exchange: &str, binding_key: &str, routing_key: &str) -> bool {
    let q = exclusive_queue(ch);
    ch.queue_bind(&q, exchange, binding_key, FieldTable::new())
        .expect("bind");
    let body = format!("{binding_key:?} <- {routing_key:?}");
    ch.basic_publish(
        exchange,
        routing_key,
        false,
        &BasicProperties::default(),
        body.as_bytes(),
    )
    .expect("publish");
    let got = ch.basic_get(&q, true).expect("get");
    if let Some(m) = &got {
        assert_eq!(m.body, body.as_bytes());
        assert_eq!(m.routing_key, routing_key);
        assert_eq!(m.exchange, exchange);
        assert_eq!(m.message_count, 0, "{body}: enqueued more than once");
    }
    assert_eq!(ch.queue_delete(&q, false, false).expect("delete"), 0);
    got.is_some()
}

/// Runs every pair on a fresh server through `amq.topic`; reports all mismatches at once.
fn check_table(cases: &[(&str, &str, bool)]) {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().expect("channel");
    let wrong: Vec<String> = cases
        .iter()
        .filter(|&&(binding, routing, expected)| {
            routed(&ch, "amq.topic", binding, routing) != expected
        })
        .map(|(binding, routing, expected)| {
            format!("binding {binding:?}, routing key {routing:?}: expected routed = {expected}")
        })
        .collect();
    assert!(wrong.is_empty(), "mismatches:\n{}", wrong.join("\n"));
}

#[test]
fn words_without_wildcards_match_exactly() {
    check_table(&[
        ("a", "a", true),
        ("a", "b", false),
        ("a.b.c", "a.b.c", true),
        ("a.b", "a", false),
        ("a", "a.b", false),
        ("a.b", "a.c", false),
        ("A", "a", false),
        ("stock.usd.nyse", "stock.usd.nyse", true),
    ]);
}

#[test]
fn star_matches_exactly_one_word() {
    check_table(&[
        ("*", "a", true),
        ("*", "a.b", false),
        ("*.b", "a.b", true),
        ("*.b", "b", false),
        ("*.b", "a.a.b", false),
        ("a.*.c", "a.b.c", true),
        ("a.*.c", "a.c", false),
        ("a.*.c", "a.b.b.c", false),
        ("a.*", "a", false),
        ("*.*", "a.b", true),
        ("*.*", "a", false),
        ("*.*", "a.b.c", false),
    ]);
}

#[test]
fn hash_matches_zero_or_more_words() {
    check_table(&[
        ("#", "a", true),
        ("#", "a.b.c.d.e", true),
        ("a.#", "a", true),
        ("a.#", "a.b", true),
        ("a.#", "a.b.c", true),
        ("a.#", "b.a", false),
        ("#.c", "c", true),
        ("#.c", "a.b.c", true),
        ("#.c", "c.d", false),
        ("a.#.b", "a.b", true),
        ("a.#.b", "a.x.y.z.b", true),
        ("a.#.b", "a.x.y.z", false),
    ]);
}

#[test]
fn hash_before_words_finds_the_last_occurrence_of_the_tail() {
    // A greedy matcher that lets `#` stop at the first `b` gets these wrong.
    check_table(&[
        ("#.b.c", "b.x.b.c", true),
        ("#.b.c", "b.c.b.c", true),
        ("#.b.c", "b.c.b", false),
        ("#.a.b", "a.a.b", true),
        ("a.#.a", "a.a.a.a", true),
        ("a.#.m.#.z", "a.b.m.n.m.z", true),
    ]);
}

#[test]
fn wildcards_combine() {
    check_table(&[
        ("#.#", "a", true),
        ("#.#", "a.b.c", true),
        ("*.#", "a", true),
        ("*.#", "a.b.c", true),
        ("#.*", "a", true),
        ("*.#.*", "a", false),
        ("*.#.*", "a.b", true),
        ("a.*.#", "a", false),
        ("a.*.#", "a.b.c.d", true),
        ("#.*.b", "b", false),
        ("#.*.b", "a.b", true),
        ("#.b.#", "x.b.y", true),
        ("#.b.#", "x.y", false),
    ]);
}

#[test]
fn empty_words_are_words() {
    check_table(&[
        ("a..b", "a..b", true),
        ("a..b", "a.b", false),
        ("a.*.b", "a..b", true),
        ("a.#.b", "a..b", true),
        (".a", ".a", true),
        (".a", "a", false),
        ("a.", "a.", true),
        ("a.", "a", false),
        ("a.*", "a.", true),
        ("*.*", ".", true),
        ("#", "..", true),
    ]);
}

#[test]
fn wildcard_characters_inside_a_word_are_literal() {
    check_table(&[
        ("a*", "a*", true),
        ("a*", "ab", false),
        ("a*", "a", false),
        ("*a", "ba", false),
        ("a#", "a", false),
        ("a#", "a.b", false),
        ("a#", "a#", true),
        ("#a", "x.a", false),
        ("**", "a", false),
        // A routing key's `*` and `#` are ordinary characters.
        ("a", "*", false),
        ("a.b", "a.*", false),
        ("*", "#", true),
    ]);
}

#[test]
fn non_ascii_words_match_as_whole_words() {
    check_table(&[
        ("café.*", "café.crème", true),
        ("café.*", "cafe.crème", false),
        ("#.日本", "東京.日本", true),
        ("*.日本", "日本", false),
        ("ü.#", "ü", true),
        ("🐇.*.🥕", "🐇.ß.🥕", true),
        ("Ω", "ω", false),
    ]);
}

#[test]
fn an_empty_routing_key_has_zero_words() {
    // RabbitMQ splits "" into no words at all: only patterns that can match nothing
    // (``, `#`, `#.#`, ...) take it; `*` needs a word.
    check_table(&[
        ("", "", true),
        ("#", "", true),
        ("#.#", "", true),
        ("#.#.#", "", true),
        ("*", "", false),
        ("*.#", "", false),
        ("#.*", "", false),
        ("a", "", false),
        ("", "a", false),
        ("", ".", false),
    ]);
}

/// RabbitMQ's own topic test (`rabbit_exchange_type_topic` suite): every binding at once
/// on one declared topic exchange, then the queues each routing key reaches.
#[test]
fn a_declared_topic_exchange_routes_like_rabbitmq_with_many_bindings() {
    const BINDINGS: &[(&str, &str)] = &[
        ("a.b.c", "t1"),
        ("a.*.c", "t2"),
        ("a.#.b", "t3"),
        ("a.b.b.c", "t4"),
        ("#", "t5"),
        ("#.#", "t6"),
        ("#.b", "t7"),
        ("*.*", "t8"),
        ("a.*", "t9"),
        ("*.b.c", "t10"),
        ("a.#", "t11"),
        ("a.#.#", "t12"),
        ("b.b.c", "t13"),
        ("a.b.b", "t14"),
        ("a.b", "t15"),
        ("b.c", "t16"),
        ("", "t17"),
        ("*.*.*", "t18"),
        ("vodka.martini", "t19"),
        ("a.b.c", "t20"),
        ("*.#", "t21"),
        ("#.*.#", "t22"),
        ("*.#.#", "t23"),
        ("#.#.#", "t24"),
        ("*", "t25"),
        ("#.b.#", "t26"),
    ];
    const EXPECTED: &[(&str, &[&str])] = &[
        (
            "a.b.c",
            &[
                "t1", "t2", "t5", "t6", "t10", "t11", "t12", "t18", "t20", "t21", "t22", "t23",
                "t24", "t26",
            ],
        ),
        (
            "a.b",
            &[
                "t3", "t5", "t6", "t7", "t8", "t9", "t11", "t12", "t15", "t21", "t22", "t23",
                "t24", "t26",
            ],
        ),
        (
            "a.b.b",
            &[
                "t3", "t5", "t6", "t7", "t11", "t12", "t14", "t18", "t21", "t22", "t23", "t24",
                "t26",
            ],
        ),
        ("", &["t5", "t6", "t17", "t24"]),
        (
            "b.c.c",
            &["t5", "t6", "t18", "t21", "t22", "t23", "t24", "t26"],
        ),
        (
            "a.a.a.a.a",
            &["t5", "t6", "t11", "t12", "t21", "t22", "t23", "t24"],
        ),
        ("vodka.gin", &["t5", "t6", "t8", "t21", "t22", "t23", "t24"]),
        (
            "vodka.martini",
            &["t5", "t6", "t8", "t19", "t21", "t22", "t23", "t24"],
        ),
        (
            "b.b.c",
            &[
                "t5", "t6", "t10", "t13", "t18", "t21", "t22", "t23", "t24", "t26",
            ],
        ),
        (
            "nothing.here.at.all",
            &["t5", "t6", "t21", "t22", "t23", "t24"],
        ),
        ("oneword", &["t5", "t6", "t21", "t22", "t23", "t24", "t25"]),
    ];
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    ch.exchange_declare("topic_matching", "topic", ExchangeDeclareOptions::default())
        .unwrap();
    let mut queues: Vec<&str> = BINDINGS.iter().map(|(_, q)| *q).collect();
    queues.sort_unstable();
    queues.dedup();
    for q in &queues {
        ch.queue_declare(q, QueueDeclareOptions::default()).unwrap();
    }
    for (key, q) in BINDINGS {
        ch.queue_bind(q, "topic_matching", key, FieldTable::new())
            .unwrap();
    }
    for (routing_key, expected) in EXPECTED {
        ch.basic_publish(
            "topic_matching",
            routing_key,
            false,
            &BasicProperties::default(),
            routing_key.as_bytes(),
        )
        .unwrap();
        let mut reached = Vec::new();
        for q in &queues {
            if let Some(m) = ch.basic_get(q, true).unwrap() {
                assert_eq!(m.body, routing_key.as_bytes());
                assert_eq!(m.message_count, 0, "{q} got {routing_key:?} twice");
                reached.push(*q);
            }
        }
        let mut expected = expected.to_vec();
        expected.sort_unstable();
        assert_eq!(reached, expected, "routing key {routing_key:?}");
    }
}

#[test]
fn a_message_matching_two_bindings_of_one_queue_is_enqueued_once() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let q = exclusive_queue(&ch);
    for key in ["a.*", "#", "a.b", "*.b"] {
        ch.queue_bind(&q, "amq.topic", key, FieldTable::new())
            .unwrap();
    }
    ch.basic_publish(
        "amq.topic",
        "a.b",
        false,
        &BasicProperties::default(),
        b"once",
    )
    .unwrap();
    let declared = ch
        .queue_declare(
            &q,
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
        )
        .unwrap();
    assert_eq!(declared.message_count, 1);
    let m = ch.basic_get(&q, true).unwrap().expect("the message");
    assert_eq!(m.body, b"once");
    assert_eq!(m.message_count, 0);
    assert!(ch.basic_get(&q, true).unwrap().is_none());
}

#[test]
fn unbinding_one_of_two_matching_bindings_keeps_the_queue_routed() {
    let server = TestServer::start();
    let conn = connect(&server);
    let ch = conn.open_channel().unwrap();
    let q = exclusive_queue(&ch);
    ch.queue_bind(&q, "amq.topic", "a.*", FieldTable::new())
        .unwrap();
    ch.queue_bind(&q, "amq.topic", "#.b", FieldTable::new())
        .unwrap();
    ch.queue_unbind(&q, "amq.topic", "a.*", FieldTable::new())
        .unwrap();
    let props = BasicProperties::default();
    ch.basic_publish("amq.topic", "a.b", false, &props, b"via #.b")
        .unwrap();
    ch.basic_publish("amq.topic", "a.c", false, &props, b"via a.* only")
        .unwrap();
    let m = ch.basic_get(&q, true).unwrap().expect("a.b still routed");
    assert_eq!(m.body, b"via #.b");
    assert!(ch.basic_get(&q, true).unwrap().is_none(), "a.* was unbound");
}
