//! Users, permissions and logins (issue 7, parts 1 and 2): RabbitMQ's access-control model
//! on both listeners, the CLI's `user` and `permission` commands, users kept in meta.db.

use crate::common;

use common::amqp_raw;
use common::{Raw, TestServer};
use relaymq::amqp::{write_content, AmqpMethod, BASIC_CLASS_ID};
use relaymq::auth::password::{rabbit_sha256, RABBIT_SHA256};
use relaymq::client::{
    ClientError, ConnectOptions, Connection, ConsumeOptions, ListKind, QueueDeclareOptions,
};
use relaymq::native::Method;
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Output};
use std::time::Duration;

fn connect_as(
    server: &TestServer,
    user: &str,
    password: &str,
    vhost: &str,
) -> Result<Connection, ClientError> {
    Connection::connect_with(ConnectOptions {
        user: user.into(),
        password: password.into(),
        vhost: vhost.into(),
        ..ConnectOptions::new(server.addr_string())
    })
}

fn admin(server: &TestServer) -> Connection {
    Connection::connect(&server.addr_string()).expect("guest connects")
}

/// Creates `user` with password `pw` and the three patterns on `/`.
fn user_with(server: &TestServer, user: &str, pw: &str, c: &str, w: &str, r: &str) {
    let a = admin(server);
    a.add_user(user, pw, &[]).unwrap();
    a.set_permissions(user, "/", c, w, r).unwrap();
    a.close().unwrap();
}

fn code(e: &ClientError) -> u16 {
    e.reply_code()
        .unwrap_or_else(|| panic!("no reply code in {e:?}"))
}

fn text(e: &ClientError) -> String {
    match e {
        ClientError::Auth { text, .. }
        | ClientError::ConnectionClosed { text, .. }
        | ClientError::ChannelClosed { text, .. } => text.clone(),
        other => panic!("no text in {other:?}"),
    }
}

fn cli(server: &TestServer, user: &str, password: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_relaymq-cli"))
        .args(["--addr", &server.addr_string(), "--user", user])
        .args(["--password", password])
        .args(args)
        .output()
        .expect("relaymq-cli runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_user_without_write_permission_gets_403_on_publish_and_the_channel_closes() {
    let server = TestServer::start();
    admin(&server)
        .open_channel()
        .unwrap()
        .queue_declare("inbox", QueueDeclareOptions::default())
        .unwrap();
    // May read and declare, may write only to exchanges named log.*.
    user_with(&server, "reader", "pw", ".*", "^log\\.", ".*");
    let conn = connect_as(&server, "reader", "pw", "/").unwrap();
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    ch.basic_publish("", "inbox", false, &BasicProperties::default(), b"x")
        .unwrap();
    let e = ch.wait_for_confirms(Duration::from_secs(10)).unwrap_err();
    assert_eq!(code(&e), 403, "{e:?}");
    assert_eq!(
        text(&e),
        "access to exchange 'amq.default' in vhost '/' refused for user 'reader'"
    );
    assert!(!ch.is_open());
    // The connection survives and other operations still work.
    let ch2 = conn.open_channel().unwrap();
    ch2.queue_declare("reader-q", QueueDeclareOptions::default())
        .unwrap();
    assert!(ch2.basic_get("inbox", true).unwrap().is_none());
    // Nothing reached the queue.
    let a = admin(&server);
    let q = a
        .open_channel()
        .unwrap()
        .queue_declare("inbox", QueueDeclareOptions::default())
        .unwrap();
    assert_eq!(q.message_count, 0);
}

#[test]
fn every_operation_checks_its_permission_like_rabbitmq() {
    let server = TestServer::start();
    let a = admin(&server);
    let ach = a.open_channel().unwrap();
    ach.queue_declare("theirs", QueueDeclareOptions::default())
        .unwrap();
    ach.exchange_declare("ex", "direct", Default::default())
        .unwrap();
    // Configure mine-*, write mine-* and ex, read mine-* only.
    user_with(&server, "bob", "pw", "^mine-", "^(mine-.*|ex)$", "^mine-");
    let conn = connect_as(&server, "bob", "pw", "/").unwrap();
    let refused = |f: &dyn Fn(&relaymq::client::Channel) -> Result<(), ClientError>,
                   resource: &str| {
        let ch = conn.open_channel().unwrap();
        let e = f(&ch).unwrap_err();
        assert_eq!(code(&e), 403, "{resource}: {e:?}");
        assert_eq!(
            text(&e),
            format!("access to {resource} in vhost '/' refused for user 'bob'")
        );
    };
    refused(
        &|ch| {
            ch.queue_declare("other", QueueDeclareOptions::default())
                .map(|_| ())
        },
        "queue 'other'",
    );
    refused(
        &|ch| ch.queue_delete("theirs", false, false).map(|_| ()),
        "queue 'theirs'",
    );
    refused(&|ch| ch.queue_purge("theirs").map(|_| ()), "queue 'theirs'");
    refused(
        &|ch| ch.basic_get("theirs", false).map(|_| ()),
        "queue 'theirs'",
    );
    refused(
        &|ch| {
            ch.basic_consume("theirs", ConsumeOptions::default())
                .map(|_| ())
        },
        "queue 'theirs'",
    );
    refused(
        &|ch| ch.exchange_declare("bobs-x", "fanout", Default::default()),
        "exchange 'bobs-x'",
    );
    refused(&|ch| ch.exchange_delete("ex", false), "exchange 'ex'");
    // Binding writes to the queue and reads from the exchange: bob may write `ex` but
    // not read it.
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("mine-1", QueueDeclareOptions::default())
        .unwrap();
    refused(
        &|ch| ch.queue_bind("mine-1", "ex", "k", FieldTable::new()),
        "exchange 'ex'",
    );
    refused(
        &|ch| ch.queue_bind("theirs", "amq.direct", "k", FieldTable::new()),
        "queue 'theirs'",
    );
    // A server-named queue is checked under its generated name (amq.gen-…): refused.
    let e = ch
        .queue_declare("", QueueDeclareOptions::default())
        .unwrap_err();
    assert_eq!(code(&e), 403);
    assert!(text(&e).starts_with("access to queue 'amq.gen-"), "{e:?}");
    // Passive declares need no permission (RabbitMQ).
    let ch = conn.open_channel().unwrap();
    let ok = ch
        .queue_declare(
            "theirs",
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(ok.message_count, 0);
    // What is allowed works end to end.
    ch.confirm_select().unwrap();
    ch.basic_publish("ex", "k", false, &BasicProperties::default(), b"m")
        .unwrap();
    assert!(ch.wait_for_confirms(Duration::from_secs(10)).unwrap());
}

#[test]
fn a_permission_change_applies_to_an_open_connection_at_its_next_operation() {
    let server = TestServer::start();
    user_with(&server, "carol", "pw", ".*", ".*", ".*");
    let conn = connect_as(&server, "carol", "pw", "/").unwrap();
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("c", QueueDeclareOptions::default())
        .unwrap();
    ch.confirm_select().unwrap();
    // Warm the publish route cache, then take write away.
    ch.basic_publish("", "c", false, &BasicProperties::default(), b"1")
        .unwrap();
    assert!(ch.wait_for_confirms(Duration::from_secs(10)).unwrap());
    admin(&server)
        .set_permissions("carol", "/", ".*", "", ".*")
        .unwrap();
    ch.basic_publish("", "c", false, &BasicProperties::default(), b"2")
        .unwrap();
    let e = ch.wait_for_confirms(Duration::from_secs(10)).unwrap_err();
    assert_eq!(code(&e), 403, "{e:?}");
    // Clearing the permission takes the vhost away: every operation is refused.
    admin(&server).clear_permissions("carol", "/").unwrap();
    let e = conn
        .open_channel()
        .unwrap()
        .basic_get("c", true)
        .unwrap_err();
    assert_eq!(code(&e), 403);
    let e = connect_as(&server, "carol", "pw", "/").unwrap_err();
    assert_eq!(code(&e), 530);
}

#[test]
fn a_user_without_access_to_a_vhost_cannot_open_it_on_either_listener() {
    let server = TestServer::start();
    let a = admin(&server);
    a.declare_vhost("private").unwrap();
    user_with(&server, "dave", "pw", ".*", ".*", ".*");
    let e = connect_as(&server, "dave", "pw", "private").unwrap_err();
    assert_eq!(code(&e), 530, "{e:?}");
    assert_eq!(
        text(&e),
        "access to vhost 'private' refused for user 'dave'"
    );
    let mut amqp = amqp_raw::Raw::connect(server.handle.amqp_addr().unwrap());
    let (code, reason) = amqp.login("dave", "pw", "private").unwrap_err();
    assert_eq!(code, 530);
    assert_eq!(
        reason,
        "NOT_ALLOWED - access to vhost 'private' refused for user 'dave'"
    );
    // The creator of a vhost (guest here) got full access to it.
    connect_as(&server, "guest", "guest", "private")
        .unwrap()
        .close()
        .unwrap();
    // With a permission entry, dave gets in.
    a.set_permissions("dave", "private", "", "", "").unwrap();
    connect_as(&server, "dave", "pw", "private").unwrap();
}

#[test]
fn a_publish_over_amqp_without_write_permission_is_a_403_channel_close() {
    let server = TestServer::start();
    user_with(&server, "erin", "pw", ".*", "", ".*");
    let mut amqp = amqp_raw::Raw::connect(server.handle.amqp_addr().unwrap());
    amqp.login("erin", "pw", "/").unwrap();
    amqp.method(1, &AmqpMethod::ChannelOpen {});
    assert!(matches!(
        amqp.recv(),
        Some((1, AmqpMethod::ChannelOpenOk {}))
    ));
    amqp.method(
        1,
        &AmqpMethod::BasicPublish {
            exchange: "amq.topic".into(),
            routing_key: "k".into(),
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
        b"x",
        amqp_raw::FRAME_MAX,
    );
    amqp.send(&content);
    match amqp.recv() {
        Some((
            1,
            AmqpMethod::ChannelClose {
                reply_code,
                reply_text,
                ..
            },
        )) => {
            assert_eq!(reply_code, 403);
            assert_eq!(
                reply_text,
                "ACCESS_REFUSED - access to exchange 'amq.topic' in vhost '/' refused for user 'erin'"
            );
        }
        other => panic!("expected channel.close 403, got {other:?}"),
    }
}

/// A socket to `to` from the source address `from` (a second loopback address).
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let source: SocketAddr = format!("{from}:0").parse().unwrap();
    socket.bind(&source.into()).unwrap();
    socket.connect(&to.into()).unwrap();
    socket.into()
}

#[test]
fn guest_is_refused_from_a_non_loopback_address_on_both_listeners() {
    // 127.0.0.2 stands for a remote client: the server treats it as non-local.
    let server = TestServer::start_with(|c| {
        c.broker.nonlocal_peers = vec!["127.0.0.2".parse().unwrap()];
    });
    user_with(&server, "remote", "pw", ".*", ".*", ".*");
    let mut raw = Raw::from_stream(connect_from("127.0.0.2", server.addr()));
    match raw.open_as("guest", "guest", "/") {
        Method::Close {
            reply_code,
            reply_text,
            ..
        } => {
            assert_eq!(reply_code, 403);
            assert_eq!(reply_text, "user 'guest' can only connect via localhost");
        }
        other => panic!("expected a 403 close, got {other:?}"),
    }
    let amqp_addr = server.handle.amqp_addr().unwrap();
    let mut amqp = amqp_raw::Raw::from_stream(connect_from("127.0.0.2", amqp_addr));
    let (code, _) = amqp.login("guest", "guest", "/").unwrap_err();
    assert_eq!(code, 403);
    // Another user from there gets in; guest from 127.0.0.1 too.
    let mut raw = Raw::from_stream(connect_from("127.0.0.2", server.addr()));
    assert!(matches!(
        raw.open_as("remote", "pw", "/"),
        Method::OpenOk { .. }
    ));
    let mut amqp = amqp_raw::Raw::from_stream(connect_from("127.0.0.2", amqp_addr));
    amqp.login("remote", "pw", "/").unwrap();
    admin(&server).close().unwrap();
}

#[test]
fn failed_logins_are_slowed_per_source_address() {
    let server = TestServer::start_with(|c| {
        c.broker.loopback_users = Vec::new();
    });
    let attempt = |from: &str, password: &str| {
        let mut raw = Raw::from_stream(connect_from(from, server.addr()));
        raw.open_as("guest", password, "/")
    };
    for _ in 0..relaymq::auth::throttle::FAILED_LOGINS_FREE {
        match attempt("127.0.0.3", "wrong") {
            Method::Close { reply_text, .. } => {
                assert!(
                    reply_text.contains("wrong user name or password"),
                    "{reply_text}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
    // Even the right password is refused from that address for a while...
    match attempt("127.0.0.3", "guest") {
        Method::Close {
            reply_code,
            reply_text,
            ..
        } => {
            assert_eq!(reply_code, 403);
            assert!(
                reply_text.contains("too many failed logins as 'guest' from 127.0.0.3"),
                "{reply_text}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Another user logs in from there, and its success does not clear guest's count.
    admin(&server).add_user("app", "apppw", &[]).unwrap();
    admin(&server)
        .set_permissions("app", "/", ".*", ".*", ".*")
        .unwrap();
    let mut raw = Raw::from_stream(connect_from("127.0.0.3", server.addr()));
    assert!(matches!(
        raw.open_as("app", "apppw", "/"),
        Method::OpenOk { .. }
    ));
    assert!(matches!(
        attempt("127.0.0.3", "guest"),
        Method::Close {
            reply_code: 403,
            ..
        }
    ));
    // ...while other addresses are served.
    assert!(matches!(
        attempt("127.0.0.1", "guest"),
        Method::OpenOk { .. }
    ));
    // After the delay, the right password works again.
    std::thread::sleep(Duration::from_millis(
        relaymq::auth::throttle::LOGIN_DELAY_MS_BASE + 200,
    ));
    assert!(matches!(
        attempt("127.0.0.3", "guest"),
        Method::OpenOk { .. }
    ));
}

#[test]
fn only_administrators_manage_users_and_permissions_and_management_tags_list() {
    let server = TestServer::start();
    user_with(&server, "plain", "pw", ".*", ".*", ".*");
    let conn = connect_as(&server, "plain", "pw", "/").unwrap();
    let e = conn.add_user("x", "y", &[]).unwrap_err();
    assert_eq!(code(&e), 403, "{e:?}");
    assert_eq!(
        text(&e),
        "user.add refused for user 'plain': needs the administrator tag"
    );
    assert_eq!(code(&conn.declare_vhost("v").unwrap_err()), 403);
    assert_eq!(code(&conn.set_disk_free_limit(1).unwrap_err()), 403);
    assert_eq!(code(&conn.list(ListKind::Queues).unwrap_err()), 403);
    // The connection is still usable after admin refusals.
    conn.open_channel().unwrap();
    admin(&server)
        .set_user_tags("plain", &["management"])
        .unwrap();
    assert!(conn.list(ListKind::Queues).is_ok());
    assert_eq!(code(&conn.list(ListKind::Users).unwrap_err()), 403);
    // A management user sees the vhosts it may open and its own connections only.
    let a = admin(&server);
    a.declare_vhost("hidden").unwrap();
    let names = |kind: ListKind, field: &str| -> Vec<String> {
        conn.list(kind)
            .unwrap()
            .iter()
            .filter_map(|r| r.get(field).and_then(|v| v.as_str()).map(String::from))
            .collect()
    };
    assert_eq!(names(ListKind::Vhosts, "name"), vec!["/"]);
    assert_eq!(names(ListKind::Connections, "user"), vec!["plain"]);
    let all: Vec<String> = a
        .list(ListKind::Vhosts)
        .unwrap()
        .iter()
        .filter_map(|r| r.get("name").and_then(|v| v.as_str()).map(String::from))
        .collect();
    assert!(all.contains(&"hidden".to_string()), "{all:?}");
}

#[test]
fn deleting_a_user_closes_its_connections() {
    let server = TestServer::start();
    user_with(&server, "gone", "pw", ".*", ".*", ".*");
    let conn = connect_as(&server, "gone", "pw", "/").unwrap();
    admin(&server).delete_user("gone").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while conn.is_open() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let e = conn.open_channel().unwrap_err();
    assert_eq!(code(&e), 320, "{e:?}");
    assert_eq!(
        code(&connect_as(&server, "gone", "pw", "/").unwrap_err()),
        403
    );
}

#[test]
fn the_cli_manages_users_and_permissions() {
    let server = TestServer::start();
    let ok = |o: Output| {
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    ok(cli(
        &server,
        "guest",
        "guest",
        &[
            "user",
            "add",
            "ops",
            "s3cret",
            "--tags",
            "administrator,management",
        ],
    ));
    ok(cli(
        &server,
        "guest",
        "guest",
        &["declare", "vhost", "prod"],
    ));
    ok(cli(
        &server,
        "guest",
        "guest",
        &[
            "--vhost",
            "prod",
            "permission",
            "set",
            "ops",
            "--configure",
            "^ops-",
            "--write",
            ".*",
            "--read",
            "",
        ],
    ));
    // An administrator opens any vhost natively to administer it, permissions there
    // or not (as `rabbitmqctl -p`); a user without the tag does not.
    ok(cli(&server, "ops", "s3cret", &["user", "list"]));
    let users = ok(cli(
        &server,
        "ops",
        "s3cret",
        &["--vhost", "prod", "user", "list"],
    ));
    assert!(
        users.contains("ops") && users.contains("administrator,management"),
        "{users}"
    );
    assert!(users.contains("argon2id"), "{users}");
    let perms = ok(cli(
        &server,
        "ops",
        "s3cret",
        &["--vhost", "prod", "permission", "list", "--json"],
    ));
    let rows: serde_json::Value = serde_json::from_str(&perms).unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["user"] == "ops")
        .expect("ops row");
    assert_eq!(row["vhost"], "prod");
    assert_eq!(row["configure"], "^ops-");
    assert_eq!(row["read"], "");
    // The new user can work in prod within its permissions.
    let out = cli(
        &server,
        "ops",
        "s3cret",
        &["--vhost", "prod", "declare", "queue", "other"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("403"), "{}", stderr(&out));
    ok(cli(
        &server,
        "ops",
        "s3cret",
        &["--vhost", "prod", "declare", "queue", "ops-q"],
    ));
    ok(cli(
        &server,
        "guest",
        "guest",
        &["user", "passwd", "ops", "n3w"],
    ));
    let old = cli(&server, "ops", "s3cret", &["--vhost", "prod", "status"]);
    assert_eq!(old.status.code(), Some(3), "{}", stderr(&old));
    ok(cli(&server, "ops", "n3w", &["--vhost", "prod", "status"]));
    ok(cli(
        &server,
        "guest",
        "guest",
        &["--vhost", "prod", "permission", "clear", "ops"],
    ));
    // Without permissions in prod the administrator still reaches it to administer it,
    // but its queues are out of reach.
    ok(cli(&server, "ops", "n3w", &["--vhost", "prod", "status"]));
    let out = cli(
        &server,
        "ops",
        "n3w",
        &["--vhost", "prod", "declare", "queue", "ops-q2"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("403"), "{}", stderr(&out));
    ok(cli(&server, "guest", "guest", &["user", "delete", "ops"]));
    let users = ok(cli(&server, "guest", "guest", &["user", "list"]));
    assert!(!users.contains("ops"), "{users}");
    // A non-administrator is refused with the reason.
    ok(cli(
        &server,
        "guest",
        "guest",
        &["user", "add", "pat", "pw"],
    ));
    ok(cli(
        &server,
        "guest",
        "guest",
        &[
            "permission",
            "set",
            "pat",
            "--configure",
            ".*",
            "--write",
            ".*",
            "--read",
            ".*",
        ],
    ));
    let out = cli(&server, "pat", "pw", &["user", "add", "x", "y"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("user.add refused for user 'pat': needs the administrator tag"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_user_imported_with_a_rabbitmq_hash_logs_in_and_is_rehashed_with_argon2() {
    let server = TestServer::start();
    // The hash `rabbitmqctl export_definitions` gives (salted SHA-256).
    let hash = rabbit_sha256([0xca, 0xfe, 0xba, 0xbe], "from-rabbit");
    let out = cli(
        &server,
        "guest",
        "guest",
        &["user", "add", "migrated", "--password-hash", &hash],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let list = |server: &TestServer| {
        admin(server)
            .list(ListKind::Users)
            .unwrap()
            .into_iter()
            .find(|r| r.get("name") == Some(&FieldValue::string("migrated")))
            .and_then(|r| {
                r.get("hashing_algorithm")
                    .and_then(|v| v.as_str())
                    .map(String::from)
            })
    };
    assert_eq!(list(&server).as_deref(), Some(RABBIT_SHA256));
    admin(&server)
        .set_permissions("migrated", "/", ".*", ".*", ".*")
        .unwrap();
    assert_eq!(
        code(&connect_as(&server, "migrated", "wrong", "/").unwrap_err()),
        403
    );
    connect_as(&server, "migrated", "from-rabbit", "/").unwrap();
    assert_eq!(list(&server).as_deref(), Some("argon2id"));
    connect_as(&server, "migrated", "from-rabbit", "/").unwrap();
}

#[test]
fn users_survive_a_restart_and_the_default_user_is_only_created_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let start = || {
        let data = data.clone();
        TestServer::start_with(move |c| c.data_dir = data)
    };
    let server = start();
    user_with(&server, "keeper", "pw", "^k", ".*", ".*");
    let a = admin(&server);
    a.add_user("root", "rootpw", &["administrator"]).unwrap();
    a.set_permissions("root", "/", ".*", ".*", ".*").unwrap();
    let root = connect_as(&server, "root", "rootpw", "/").unwrap();
    root.delete_user("guest").unwrap();
    drop(root);
    let TestServer { handle, dir: _dir } = server;
    handle.shutdown();
    handle.join().unwrap();

    let server = start();
    // guest is not re-created; keeper's permissions came back from meta.db.
    assert_eq!(
        code(&connect_as(&server, "guest", "guest", "/").unwrap_err()),
        403
    );
    let keeper = connect_as(&server, "keeper", "pw", "/").unwrap();
    let e = keeper
        .open_channel()
        .unwrap()
        .queue_declare("not-k", QueueDeclareOptions::default())
        .unwrap_err();
    assert_eq!(code(&e), 403);
    let root = connect_as(&server, "root", "rootpw", "/").unwrap();
    let users: Vec<String> = root
        .list(ListKind::Users)
        .unwrap()
        .iter()
        .filter_map(|r| r.get("name").and_then(|v| v.as_str()).map(String::from))
        .collect();
    assert_eq!(users, vec!["keeper", "root"]);
}

#[test]
fn requests_pipelined_behind_connection_open_wait_for_the_password_check() {
    let server = TestServer::start();
    // A new user: its first login needs the (slow) argon2 check on the checker thread.
    user_with(&server, "piper", "pw", ".*", ".*", ".*");
    let mut raw = Raw::connect_bare(server.addr());
    raw.stream
        .write_all(&relaymq::native::PROTOCOL_HEADER)
        .unwrap();
    raw.send(
        0,
        1,
        &Method::Open {
            user: "piper".into(),
            password: "pw".into(),
            vhost: "/".into(),
            frame_max: 0,
            heartbeat_s: 0,
            channel_max: 0,
            client_name: "pipelined".into(),
        },
    );
    raw.send(1, 2, &Method::ChannelOpen);
    raw.send(
        1,
        3,
        &Method::QueueDeclare {
            queue: "piped".into(),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            arguments: FieldTable::new(),
        },
    );
    let mut replies = Vec::new();
    while replies.len() < 3 {
        let (_, id, m) = raw.recv().expect("a reply");
        replies.push((id, m));
    }
    assert!(
        matches!(replies[0], (1, Method::OpenOk { .. })),
        "{replies:?}"
    );
    assert!(matches!(replies[1], (2, Method::Ok)), "{replies:?}");
    assert!(
        matches!(&replies[2], (3, Method::QueueDeclareOk { queue, .. }) if queue == "piped"),
        "{replies:?}"
    );
}
