//! The golden-reply shape comparator of `tests/common/golden.rs`, which the HTTP API
//! tests use to hold RelayMQ's replies against RabbitMQ's recorded ones: what it accepts,
//! what it reports (every problem, with its path), and the recorded fixtures themselves.

use crate::common::golden::{
    self, assert_same_shape, assert_same_shape_with, shape_problems, Shape,
};
use serde_json::{json, Value};

fn problems(expected: &Value, actual: &Value) -> Vec<String> {
    shape_problems(expected, actual, &Shape::default())
}

#[test]
fn a_reply_with_every_field_and_more_passes() {
    let expected = json!({
        "name": "orders.new",
        "durable": true,
        "messages": 3,
        "consumer_utilisation": 1.0,
        "message_stats": {"publish": 3, "publish_details": {"rate": 0.0}},
    });
    // Integers and floats are both numbers; fields RabbitMQ does not send are fine.
    let actual = json!({
        "name": "other",
        "durable": false,
        "messages": 0.5,
        "consumer_utilisation": 0,
        "message_stats": {"publish": 0, "publish_details": {"rate": 7}, "ack": 1},
        "relaymq_only": [1, 2],
    });
    assert_eq!(problems(&expected, &actual), Vec::<String>::new());
}

#[test]
fn every_missing_or_mistyped_field_is_listed_with_its_path() {
    let expected = json!({
        "items": [{
            "name": "q",
            "messages": 3,
            "message_stats": {"publish_details": {"rate": 0.0}},
        }],
        "page": 1,
    });
    let actual = json!({
        "items": [
            {"name": "a", "messages": 1, "message_stats": {"publish_details": {}}},
            {"name": 7, "message_stats": {"publish_details": {"rate": "fast"}}},
        ],
        "page": null,
    });
    assert_eq!(
        problems(&expected, &actual),
        [
            "items[0].message_stats.publish_details.rate: missing",
            "items[1].message_stats.publish_details.rate: expected number, found string \"fast\"",
            "items[1].messages: missing",
            "items[1].name: expected string, found number 7",
            "page: expected number, found null",
        ]
    );
}

#[test]
fn null_in_the_fixture_matches_anything() {
    let expected = json!({"policy": null, "head_message_timestamp": null});
    let actual = json!({"policy": {"a": 1}, "head_message_timestamp": 1700000000});
    assert_eq!(problems(&expected, &actual), Vec::<String>::new());
    // A fixture that is null as a whole (a 204's empty body) matches any reply.
    assert_eq!(problems(&Value::Null, &json!([1])), Vec::<String>::new());
}

#[test]
fn the_root_is_named_body() {
    assert_eq!(
        problems(&json!([{"name": "q"}]), &json!({"name": "q"})),
        ["body: expected array, found object {\"name\":\"q\"}"]
    );
}

#[test]
fn each_element_is_held_against_the_fixtures_first() {
    let expected = json!([{"name": "a", "vhost": "/"}, {"name": "b"}]);
    let actual = json!([{"name": "x", "vhost": "/"}, {"name": "y"}]);
    assert_eq!(problems(&expected, &actual), ["[1].vhost: missing"]);
    // An empty fixture array says nothing about the elements: any array will do.
    assert_eq!(
        problems(&json!({"slaves": []}), &json!({"slaves": [1, "x"]})),
        Vec::<String>::new()
    );
    assert_eq!(
        problems(&json!({"slaves": []}), &json!({"slaves": {}})),
        ["slaves: expected array, found object {}"]
    );
}

#[test]
fn an_empty_array_fails_unless_the_caller_allows_it() {
    let expected = json!({"consumer_details": [{"consumer_tag": "t"}]});
    let actual = json!({"consumer_details": []});
    assert_eq!(
        problems(&expected, &actual),
        ["consumer_details: empty array, RabbitMQ's has 1 element(s)"]
    );
    let allowed = Shape {
        empty_arrays_ok: true,
        ..Shape::default()
    };
    assert_eq!(
        shape_problems(&expected, &actual, &allowed),
        Vec::<String>::new()
    );
}

#[test]
fn opaque_paths_compare_the_type_and_not_the_contents() {
    let expected = json!([{
        "arguments": {"x-max-length": 1000},
        "backing_queue_status": {"delta": ["delta", "undefined", 0, 0, "undefined"]},
        "stats": {"delta": [1, 2]},
    }]);
    // USER_DATA (the default) names `arguments` and `backing_queue_status` at any depth.
    let actual = json!([
        {"arguments": {}, "backing_queue_status": {"mode": "lazy"}, "stats": {"delta": [3]}},
        {"arguments": [], "backing_queue_status": {}, "stats": {"delta": ["x"]}},
    ]);
    assert_eq!(
        problems(&expected, &actual),
        [
            "[1].arguments: expected object, found array []",
            "[1].stats.delta[0]: expected number, found string \"x\"",
        ]
    );
    // A suffix names whole steps, and may name its parents, with every index as `[]`.
    let only_stats_delta = Shape {
        opaque: &["[].stats.delta"],
        ..Shape::default()
    };
    assert_eq!(
        shape_problems(&expected, &actual, &only_stats_delta),
        [
            "[0].arguments.x-max-length: missing",
            "[0].backing_queue_status.delta: missing",
            "[1].arguments: expected object, found array []",
            "[1].backing_queue_status.delta: missing",
        ]
    );
    let not_a_whole_step = Shape {
        opaque: &["guments"],
        ..Shape::default()
    };
    assert_eq!(
        shape_problems(
            &json!({"arguments": {"a": 1}}),
            &json!({"arguments": {}}),
            &not_a_whole_step
        ),
        ["arguments.a: missing"]
    );
}

#[test]
fn optional_paths_may_be_missing_or_null_and_are_compared_when_present() {
    let expected = json!({"items": [{"name": "q", "message_stats": {"publish": 3}}]});
    let actual = json!({"items": [
        {"name": "busy", "message_stats": {"publish": 1}},
        {"name": "idle"},
        {"name": "idle too", "message_stats": null},
        {"name": "wrong", "message_stats": {"publish": "3"}},
    ]});
    let shape = Shape {
        optional: &["message_stats"],
        ..Shape::default()
    };
    assert_eq!(
        shape_problems(&expected, &actual, &shape),
        ["items[3].message_stats.publish: expected number, found string \"3\""]
    );
    assert_eq!(
        problems(&expected, &actual),
        [
            "items[1].message_stats: missing",
            "items[2].message_stats: expected object, found null",
            "items[3].message_stats.publish: expected number, found string \"3\"",
        ]
    );
}

#[test]
fn assert_same_shape_panics_listing_every_problem_and_the_fixture() {
    let mut queue = golden::fixture("queue")["body"].clone();
    assert_same_shape("queue", &queue);
    let fields = queue.as_object_mut().unwrap();
    fields.remove("messages");
    fields["durable"] = json!("yes");
    fields["message_stats"]["publish_details"] = json!({});
    let panic = std::panic::catch_unwind(|| assert_same_shape("queue", &queue))
        .expect_err("a reply without `messages` fails");
    let message = panic
        .downcast_ref::<String>()
        .expect("a formatted panic message");
    for part in [
        "GET /queues/orders/orders.new",
        "tests/fixtures/management/queue.json",
        "3 problem(s)",
        "\n  durable: expected bool, found string \"yes\"",
        "\n  message_stats.publish_details.rate: missing",
        "\n  messages: missing",
    ] {
        assert!(message.contains(part), "{part:?} not in:\n{message}");
    }
}

#[test]
fn fixture_returns_the_whole_recorded_reply() {
    let recorded = golden::fixture("queues");
    assert_eq!(recorded["request"], "GET /queues");
    assert_eq!(recorded["status"], 200);
    assert_eq!(recorded["headers"]["content-type"], "application/json");
    assert!(recorded["body"].is_array());
    let missing =
        std::panic::catch_unwind(|| golden::fixture("no-such-fixture")).expect_err("no such file");
    let message = missing.downcast_ref::<String>().unwrap();
    assert!(message.contains("overview"), "{message}");
}

/// Every fixture is a recorded reply, and its body has its own shape except where
/// RabbitMQ 3.10 itself varies between the elements of one list (so a test comparing such
/// a list says so with [`Shape`]): an idle queue has no `message_stats`, each listener
/// has its own socket options, and a vhost made without tags has `tags: ""` where the
/// default vhost has `[]`.
#[test]
fn every_fixture_has_its_own_shape_except_where_rabbitmq_varies() {
    let names = golden::fixture_names();
    assert!(names.len() >= 40, "{names:?}");
    for name in &names {
        let recorded = golden::fixture(name);
        let request = recorded["request"].as_str().unwrap_or_default();
        assert!(
            ["GET /", "PUT /", "POST /", "DELETE /"]
                .iter()
                .any(|m| request.starts_with(m)),
            "{name}: request {request:?}"
        );
        assert!(recorded["status"].is_u64(), "{name}: status");
        assert!(recorded["headers"].is_object(), "{name}: headers");
        let body = &recorded["body"];
        let found = problems(body, body);
        let varies: &[&str] = match name.as_str() {
            "queues" | "queues-vhost" | "queues-columns" => &["[1].message_stats: missing"],
            "queues-paged" => &["items[1].message_stats: missing"],
            "overview" => &[
                "listeners[0].socket_opts.linger[1]: expected bool, found number 0",
                "listeners[1].socket_opts: expected object, found array []",
                "listeners[2].socket_opts.backlog: missing",
                "listeners[2].socket_opts.exit_on_close: missing",
                "listeners[2].socket_opts.linger: missing",
                "listeners[2].socket_opts.nodelay: missing",
            ],
            "vhosts" => &[
                "[1].metadata.tags: expected array, found string \"\"",
                "[1].tags: expected array, found string \"\"",
            ],
            _ => &[],
        };
        assert_eq!(found, varies, "{name}");
    }
    let queues = Shape {
        optional: &["message_stats"],
        ..Shape::default()
    };
    for name in ["queues", "queues-vhost", "queues-columns"] {
        assert_same_shape_with(name, &golden::fixture(name)["body"], &queues);
    }
    let overview = Shape {
        opaque: &["listeners"],
        ..Shape::default()
    };
    assert_same_shape_with("overview", &golden::fixture("overview")["body"], &overview);
}
