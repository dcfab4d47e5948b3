//! Resource alarms (docs/security.md §6): while the memory or disk alarm is set, a
//! connection that publishes is told (`connection.blocked`) and its publishes are held
//! unread; consumers keep draining; when the alarm clears the held publishes arrive and
//! none is lost. Loopback only; deadlines are generous, nothing asserts a timing.

use crate::common;
use common::connect;

use common::amqp_raw::{self, FRAME_MAX};
use common::{ServerProcess, TestServer};
use relaymq::alarm::MemoryWatermark;
use relaymq::amqp::{write_content, AmqpMethod, BASIC_CLASS_ID, PROTOCOL_HEADER};
use relaymq::client::{
    Channel, ConnectOptions, Connection, ConsumeOptions, ConsumerEvent, QueueDeclareOptions,
};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How long anything expected may take to happen.
const DEADLINE: Duration = Duration::from_secs(15);

/// How long a blocked publisher is watched to show its publishes stay held.
const HELD_FOR: Duration = Duration::from_millis(700);

/// A watermark far below any process's resident memory: the memory alarm is on.
const TINY: MemoryWatermark = MemoryWatermark::Relative(0.0);

/// A watermark no test process reaches: the memory alarm is off.
const HUGE: MemoryWatermark = MemoryWatermark::Relative(1.0);

fn start_alarmed() -> TestServer {
    TestServer::start_with(|c| c.broker.alarms.memory_high_watermark = TINY)
}

/// Ready messages of `queue`, by a passive declare on a connection that never publishes.
fn ready(ch: &Channel, queue: &str) -> u32 {
    let opts = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(queue, opts)
        .expect("passive declare")
        .message_count
}

fn status_field(conn: &Connection, key: &str) -> FieldValue {
    let info = conn.status().expect("status");
    info.get(key)
        .cloned()
        .unwrap_or_else(|| panic!("status has no {key}: {info:?}"))
}

fn publish(ch: &Channel, queue: &str, body: &str) {
    ch.basic_publish(
        "",
        queue,
        false,
        &BasicProperties::default(),
        body.as_bytes(),
    )
    .expect("publish");
}

fn next_body(consumer: &relaymq::client::Consumer, ch: &Channel) -> String {
    match consumer.recv_timeout(DEADLINE).expect("delivery") {
        ConsumerEvent::Delivery(d) => {
            ch.basic_ack(d.delivery_tag, false).expect("ack");
            String::from_utf8(d.body).expect("utf-8")
        }
        other => panic!("expected a delivery, got {other:?}"),
    }
}

#[test]
fn native_publishers_are_blocked_consumers_drain_and_nothing_is_lost() {
    let server = start_alarmed();
    let admin = connect(&server);
    let admin_ch = admin.open_channel().unwrap();
    admin_ch
        .queue_declare("alarm-q", QueueDeclareOptions::default())
        .unwrap();
    assert_eq!(status_field(&admin, "mem_alarm"), FieldValue::Bool(true));

    // A publisher on a server started above its watermark: told, and held.
    let publisher = connect(&server);
    let p_ch = publisher.open_channel().unwrap();
    p_ch.confirm_select().unwrap();
    assert!(!publisher.is_blocked(), "not blocked before it publishes");
    for i in 0..3 {
        publish(&p_ch, "alarm-q", &format!("m{i}"));
    }
    let blocked = publisher.blocked_status();
    assert_eq!(
        blocked.wait_change(None, DEADLINE).as_deref(),
        Some("low on memory")
    );
    std::thread::sleep(HELD_FOR);
    assert_eq!(
        ready(&admin_ch, "alarm-q"),
        0,
        "held publishes were processed"
    );
    assert_eq!(
        status_field(&admin, "connections_blocked"),
        FieldValue::I64(1)
    );

    // Raising the watermark at run time unblocks it: the held publishes arrive, confirmed.
    admin.set_memory_high_watermark(HUGE).unwrap();
    assert!(blocked.wait_unblocked(DEADLINE), "no connection.unblocked");
    assert!(
        p_ch.wait_for_confirms(DEADLINE).unwrap(),
        "held publishes nacked"
    );
    common::wait_until(DEADLINE, "3 ready messages", || {
        ready(&admin_ch, "alarm-q") == 3
    });
    assert_eq!(status_field(&admin, "mem_alarm"), FieldValue::Bool(false));

    // The alarm sets again: a connection that published is told at once and held at its
    // next publish, while a consumer on another connection drains and acks what is there.
    admin.set_memory_high_watermark(TINY).unwrap();
    assert_eq!(
        blocked.wait_change(None, DEADLINE).as_deref(),
        Some("low on memory")
    );
    for i in 3..8 {
        publish(&p_ch, "alarm-q", &format!("m{i}"));
    }
    let consumer_conn = connect(&server);
    let c_ch = consumer_conn.open_channel().unwrap();
    let consumer = c_ch
        .basic_consume("alarm-q", ConsumeOptions::default())
        .unwrap();
    let mut got: Vec<String> = (0..3).map(|_| next_body(&consumer, &c_ch)).collect();
    assert_eq!(got, ["m0", "m1", "m2"]);
    assert!(!consumer_conn.is_blocked(), "a consumer is never blocked");
    std::thread::sleep(HELD_FOR);
    assert_eq!(
        ready(&admin_ch, "alarm-q"),
        0,
        "held publishes were processed"
    );
    assert!(matches!(
        consumer.recv_timeout(Duration::from_millis(100)),
        Err(relaymq::client::ClientError::Timeout)
    ));

    // Cleared: the five held publishes arrive in order, none lost, all confirmed.
    admin.set_memory_high_watermark(HUGE).unwrap();
    got.extend((3..8).map(|_| next_body(&consumer, &c_ch)));
    assert_eq!(
        got,
        (0..8).map(|i| format!("m{i}")).collect::<Vec<_>>(),
        "every message exactly once, in order"
    );
    assert!(p_ch.wait_for_confirms(DEADLINE).unwrap());
    assert!(blocked.wait_unblocked(DEADLINE));
    assert!(publisher.is_open() && consumer_conn.is_open());
    assert_eq!(
        status_field(&admin, "connections_blocked"),
        FieldValue::I64(0)
    );
}

/// An AMQP 0-9-1 connection opened with `capabilities.connection.blocked = announce`.
fn amqp_open(addr: SocketAddr, announce: bool) -> amqp_raw::Raw {
    let mut r = amqp_raw::Raw::connect(addr);
    r.send(&PROTOCOL_HEADER);
    let Some((
        0,
        AmqpMethod::ConnectionStart {
            server_properties, ..
        },
    )) = r.recv()
    else {
        panic!("no connection.start");
    };
    let Some(FieldValue::Table(caps)) = server_properties.get("capabilities") else {
        panic!("no server capabilities");
    };
    assert_eq!(
        caps.get("connection.blocked"),
        Some(&FieldValue::Bool(true)),
        "the server announces connection.blocked"
    );
    let mut client_caps = FieldTable::new();
    client_caps.insert("connection.blocked".into(), FieldValue::Bool(announce));
    let mut props = FieldTable::new();
    props.insert("capabilities".into(), FieldValue::Table(client_caps));
    r.method(
        0,
        &AmqpMethod::ConnectionStartOk {
            client_properties: props,
            mechanism: "PLAIN".into(),
            response: b"\0guest\0guest".to_vec(),
            locale: "en_US".into(),
        },
    );
    let Some((0, AmqpMethod::ConnectionTune { frame_max, .. })) = r.recv() else {
        panic!("no tune");
    };
    r.method(
        0,
        &AmqpMethod::ConnectionTuneOk {
            channel_max: 16,
            frame_max,
            heartbeat: 0,
        },
    );
    r.method(
        0,
        &AmqpMethod::ConnectionOpen {
            virtual_host: "/".into(),
        },
    );
    assert!(matches!(
        r.recv(),
        Some((0, AmqpMethod::ConnectionOpenOk {}))
    ));
    r.method(1, &AmqpMethod::ChannelOpen {});
    assert!(matches!(r.recv(), Some((1, AmqpMethod::ChannelOpenOk {}))));
    r.method(1, &AmqpMethod::ConfirmSelect { nowait: false });
    assert!(matches!(
        r.recv(),
        Some((1, AmqpMethod::ConfirmSelectOk {}))
    ));
    r
}

fn amqp_publish(r: &mut amqp_raw::Raw, queue: &str, body: &[u8]) {
    r.method(
        1,
        &AmqpMethod::BasicPublish {
            exchange: String::new(),
            routing_key: queue.into(),
            mandatory: false,
            immediate: false,
        },
    );
    let mut content = Vec::new();
    write_content(
        &mut content,
        1,
        BASIC_CLASS_ID,
        &BasicProperties::default(),
        body,
        FRAME_MAX,
    );
    r.send(&content);
}

/// The next method within `wait`, or `None` when nothing comes.
fn amqp_recv_within(r: &mut amqp_raw::Raw, wait: Duration) -> Option<(u16, AmqpMethod)> {
    r.s.set_read_timeout(Some(wait)).unwrap();
    let got = r.recv();
    r.s.set_read_timeout(Some(DEADLINE)).unwrap();
    got
}

#[test]
fn amqp_blocked_and_unblocked_go_only_to_clients_announcing_the_capability() {
    let server = start_alarmed();
    let amqp = server.handle.amqp_addr().expect("AMQP listener");
    let admin = connect(&server);
    let admin_ch = admin.open_channel().unwrap();
    admin_ch
        .queue_declare("amqp-alarm-q", QueueDeclareOptions::default())
        .unwrap();

    let mut capable = amqp_open(amqp, true);
    let mut plain = amqp_open(amqp, false);
    amqp_publish(&mut capable, "amqp-alarm-q", b"from capable");
    amqp_publish(&mut plain, "amqp-alarm-q", b"from plain");

    match capable.recv() {
        Some((0, AmqpMethod::ConnectionBlocked { reason })) => assert_eq!(reason, "low on memory"),
        other => panic!("expected connection.blocked, got {other:?}"),
    }
    // Held: no confirm, nothing queued; the client without the capability hears nothing.
    assert_eq!(amqp_recv_within(&mut capable, HELD_FOR), None);
    assert_eq!(amqp_recv_within(&mut plain, HELD_FOR), None);
    assert_eq!(ready(&admin_ch, "amqp-alarm-q"), 0);

    admin.set_memory_high_watermark(HUGE).unwrap();
    assert!(matches!(
        capable.recv(),
        Some((0, AmqpMethod::ConnectionUnblocked {}))
    ));
    let ack = capable.recv();
    assert!(
        matches!(
            ack,
            Some((
                1,
                AmqpMethod::BasicAck {
                    delivery_tag: 1,
                    ..
                }
            ))
        ),
        "{ack:?}"
    );
    // The plain client gets its confirm and no unblocked notice before it.
    assert!(matches!(
        plain.recv(),
        Some((
            1,
            AmqpMethod::BasicAck {
                delivery_tag: 1,
                ..
            }
        ))
    ));
    common::wait_until(DEADLINE, "both messages", || {
        ready(&admin_ch, "amqp-alarm-q") == 2
    });
}

#[test]
fn the_disk_alarm_blocks_publishers_and_a_blocked_connection_outlives_heartbeats() {
    let server = TestServer::start();
    let admin = connect(&server);
    let admin_ch = admin.open_channel().unwrap();
    admin_ch
        .queue_declare("disk-q", QueueDeclareOptions::default())
        .unwrap();
    assert_eq!(
        status_field(&admin, "disk_free_alarm"),
        FieldValue::Bool(false)
    );
    admin.set_disk_free_limit(u64::MAX / 2).unwrap();
    assert_eq!(
        status_field(&admin, "disk_free_alarm"),
        FieldValue::Bool(true)
    );
    assert_eq!(status_field(&admin, "mem_alarm"), FieldValue::Bool(false));

    // Heartbeats every second: the server would drop a peer silent for 2 s, but not one
    // it does not read because it is blocked.
    let publisher = Connection::connect_with(ConnectOptions {
        heartbeat_s: 1,
        ..ConnectOptions::new(server.addr_string())
    })
    .unwrap();
    assert_eq!(publisher.heartbeat_s(), 1);
    let p_ch = publisher.open_channel().unwrap();
    p_ch.confirm_select().unwrap();
    publish(&p_ch, "disk-q", "while low on disk");
    let blocked = publisher.blocked_status();
    assert_eq!(
        blocked.wait_change(None, DEADLINE).as_deref(),
        Some("low on disk")
    );
    std::thread::sleep(Duration::from_millis(3_500));
    assert_eq!(ready(&admin_ch, "disk-q"), 0);
    assert!(publisher.is_open(), "the blocked connection was dropped");

    admin.set_disk_free_limit(0).unwrap();
    assert!(blocked.wait_unblocked(DEADLINE));
    assert!(p_ch.wait_for_confirms(DEADLINE).unwrap());
    common::wait_until(DEADLINE, "the held message", || {
        ready(&admin_ch, "disk-q") == 1
    });
    assert_eq!(status_field(&admin, "disk_free_limit"), FieldValue::I64(0));
    assert!(publisher.is_open());
}

/// Body size of the messages that fill the server in the purge test, bytes.
const FILL_BODY_BYTES: usize = 4096;

/// Most bytes the purge test publishes before giving up on the alarm (5× the mark).
const FILL_BYTES_MAX: usize = 1 << 30;

/// How long the alarm may take to clear once the memory is freed (the allocator hands
/// pages back about a second after they are freed; generous for a loaded machine).
const CLEAR_DEADLINE: Duration = Duration::from_secs(60);

/// A memory alarm clears once the memory is freed, even with no message left to drain:
/// the real server binary (its allocator) with a 200 MiB mark is filled with 4 KiB
/// messages until it blocks the publisher, the queue is purged, and the alarm clears by
/// itself, the held publishes arriving, confirmed. With glibc's allocator the process
/// kept the freed pages, stayed above the mark with 0 messages, and blocked publishers
/// for ever.
#[test]
fn the_memory_alarm_clears_after_a_purge_and_held_publishes_arrive() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(
        &dir.path().join("data"),
        &["--memory-high-watermark", "200MiB"],
    );
    let admin = Connection::connect(&server.addr_string()).expect("connect");
    let admin_ch = admin.open_channel().unwrap();
    admin_ch
        .queue_declare("fill-q", QueueDeclareOptions::default())
        .unwrap();
    assert_eq!(status_field(&admin, "mem_alarm"), FieldValue::Bool(false));

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let publisher = Connection::connect(&server.addr_string()).expect("connect");
    let stop_publishing = std::sync::Arc::clone(&stop);
    let filler = std::thread::spawn(move || {
        let ch = publisher.open_channel().unwrap();
        ch.confirm_select().unwrap();
        let batch: Vec<relaymq::client::PublishMessage> = (0..64)
            .map(|_| relaymq::client::PublishMessage {
                exchange: String::new(),
                routing_key: "fill-q".into(),
                mandatory: false,
                properties: BasicProperties::default(),
                body: vec![b'x'; FILL_BODY_BYTES],
            })
            .collect();
        let mut sent = 0;
        while !stop_publishing.load(std::sync::atomic::Ordering::Relaxed) {
            assert!(sent < FILL_BYTES_MAX, "no memory alarm after {sent} bytes");
            ch.publish_batch(&batch).expect("publish");
            sent += batch.len() * FILL_BODY_BYTES;
        }
        assert!(
            ch.wait_for_confirms(CLEAR_DEADLINE).unwrap(),
            "publishes nacked"
        );
        publisher
    });
    let end = Instant::now() + CLEAR_DEADLINE;
    while status_field(&admin, "mem_alarm") != FieldValue::Bool(true) {
        assert!(!filler.is_finished(), "the publisher stopped early");
        assert!(Instant::now() < end, "no memory alarm");
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);

    // Purged: nothing is queued any more, and the alarm clears by itself.
    admin_ch.queue_purge("fill-q").unwrap();
    let end = Instant::now() + CLEAR_DEADLINE;
    while status_field(&admin, "mem_alarm") != FieldValue::Bool(false) {
        assert!(
            Instant::now() < end,
            "the memory alarm did not clear: mem_used {:?}, mem_limit {:?}, {} ready",
            status_field(&admin, "mem_used"),
            status_field(&admin, "mem_limit"),
            ready(&admin_ch, "fill-q")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The publisher was unblocked: what it held arrives, confirmed.
    let publisher = filler.join().expect("publisher thread");
    assert!(!publisher.is_blocked());
    assert_eq!(
        status_field(&admin, "connections_blocked"),
        FieldValue::I64(0)
    );
    let FieldValue::I64(used) = status_field(&admin, "mem_used") else {
        panic!("mem_used is not a number")
    };
    assert!(used < 200 << 20, "resident memory {used} after the purge");
}

#[test]
fn out_of_range_watermarks_are_refused_and_the_cli_sets_and_shows_them() {
    let server = TestServer::start();
    let admin = connect(&server);
    // The client checks the range before sending; a raw request gets the server's 406.
    assert!(admin
        .set_memory_high_watermark(MemoryWatermark::Relative(1.5))
        .is_err());
    let mut raw = common::Raw::connect(server.addr());
    let (_, _, reply) = raw.call(
        0,
        relaymq::native::Method::MemoryHighWatermarkSet {
            watermark: MemoryWatermark::Relative(-1.0),
        },
    );
    match reply {
        relaymq::native::Method::ChannelClose { reply_code, .. } => assert_eq!(reply_code, 406),
        other => panic!("expected a 406 refusal, got {other:?}"),
    }
    // An absolute mark that cannot run a broker: refused by the server too.
    let (_, _, reply) = raw.call(
        0,
        relaymq::native::Method::MemoryHighWatermarkSet {
            watermark: MemoryWatermark::Absolute(2),
        },
    );
    match reply {
        relaymq::native::Method::ChannelClose {
            reply_code,
            reply_text,
            ..
        } => {
            assert_eq!(reply_code, 406);
            assert!(
                reply_text.contains("0.4") && reply_text.contains("1GiB"),
                "{reply_text}"
            );
        }
        other => panic!("expected a 406 refusal, got {other:?}"),
    }
    assert!(
        admin.is_open(),
        "a refused admin request keeps the connection"
    );

    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_relaymq-cli"))
            .arg("--addr")
            .arg(server.addr_string())
            .args(args)
            .output()
            .expect("relaymq-cli runs");
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).expect("utf-8")
    };
    // `set memory-high-watermark 2` is 2 bytes: a usage error (exit 2) showing both forms.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_relaymq-cli"))
        .arg("--addr")
        .arg(server.addr_string())
        .args(["set", "memory-high-watermark", "2"])
        .output()
        .expect("relaymq-cli runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("0.4") && err.contains("1GiB"), "{err}");
    cli(&["set", "disk-free-limit", "3MiB"]);
    cli(&["set", "memory-high-watermark", "0.75"]);
    let status = cli(&["status"]);
    assert!(status.contains("disk_free_limit: 3145728\n"), "{status}");
    assert!(status.contains("mem_high_watermark: 0.75\n"), "{status}");
    assert!(status.contains("mem_alarm: false\n"), "{status}");
    assert!(status.contains("disk_free_alarm: false\n"), "{status}");
}

/// Interop check with pika (required under `scripts/test.sh`, skipped by a plain `cargo
/// test` without pika: `common::clients`): pika's blocked and unblocked callbacks fire
/// and its confirmed publish completes once the alarm clears.
#[test]
fn pika_sees_blocked_and_unblocked() {
    if !common::clients::pika_available("alarms pika_sees_blocked_and_unblocked") {
        return;
    }
    let server = start_alarmed();
    let admin = connect(&server);
    let port = server.handle.amqp_addr().expect("AMQP listener").port();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/alarms_blocked.py"
    );
    let mut child = std::process::Command::new("python3")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .arg(script)
        .arg(port.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    common::wait_until(DEADLINE, "pika's publish to be held", || {
        status_field(&admin, "connections_blocked") == FieldValue::I64(1)
    });
    admin.set_memory_high_watermark(HUGE).unwrap();
    let end = Instant::now() + DEADLINE;
    while child.try_wait().expect("child status").is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            panic!("the pika script did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "publishing",
            "blocked: low on memory",
            "unblocked",
            "confirmed"
        ],
        "{stdout}"
    );
}
