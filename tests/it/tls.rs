//! TLS on the native and AMQP 0-9-1 listeners (issue 7, part 3): round trips with the
//! client library, the real `relaymq-cli --tls`, raw AMQP through rustls and pika; a
//! plaintext client, garbage and a stalled handshake on a TLS port close only that
//! connection; client certificates required or optional; unusable files stop start-up
//! naming the file; a TLS consumer that stops reading leaves messages in the queue (the
//! TLS layer adds a bounded buffer, not an unbounded one).
//!
//! Every certificate is made here with rcgen (a throwaway CA, a server certificate for
//! `localhost` and `127.0.0.1`, client certificates from that CA and from another).
//! Servers listen on 127.0.0.1 only; every wait is bounded.

use crate::common;

use common::TestServer;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use relaymq::client::{
    ClientError, ConnectOptions, Connection, ConsumeOptions, ConsumerEvent, PublishMessage,
    QueueDeclareOptions, TlsOptions,
};
use relaymq::server::tls::{ClientAuth, TlsConfig};
use relaymq::types::BasicProperties;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest wait for something that must happen.
const WAIT: Duration = Duration::from_secs(10);
/// Longest a child process (the CLI, pika) may run before it is killed.
const CHILD_TIMEOUT: Duration = Duration::from_secs(60);

/// The PEM files of one test's little PKI.
struct Pki {
    dir: tempfile::TempDir,
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
    /// A client certificate from a CA the server does not trust.
    rogue_cert: PathBuf,
    rogue_key: PathBuf,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let mut params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(
        DnType::CommonName,
        names.first().copied().unwrap_or("client"),
    );
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p
    };
    let ca1 = ca("RelayMQ test CA");
    let rogue_ca = ca("Somebody else's CA");
    let (server_cert, server_key) = leaf(
        &ca1,
        &["localhost", "127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (client_cert, client_key) = leaf(&ca1, &["client"], ExtendedKeyUsagePurpose::ClientAuth);
    let (rogue_cert, rogue_key) = leaf(&rogue_ca, &["rogue"], ExtendedKeyUsagePurpose::ClientAuth);
    Pki {
        ca: write("ca.pem", &ca1.pem()),
        server_cert: write("server.pem", &server_cert),
        server_key: write("server-key.pem", &server_key),
        client_cert: write("client.pem", &client_cert),
        client_key: write("client-key.pem", &client_key),
        rogue_cert: write("rogue.pem", &rogue_cert),
        rogue_key: write("rogue-key.pem", &rogue_key),
        dir,
    }
}

/// TLS settings on free loopback ports; with `client_auth`, clients are checked against
/// the test CA.
fn tls_config(pki: &Pki, client_auth: Option<ClientAuth>) -> TlsConfig {
    let mut t = TlsConfig::new(&pki.server_cert, &pki.server_key);
    t.listen = Some("127.0.0.1:0".parse().unwrap());
    t.amqp_listen = Some("127.0.0.1:0".parse().unwrap());
    if let Some(mode) = client_auth {
        t.client_ca_file = Some(pki.ca.clone());
        t.client_auth = mode;
    }
    t
}

fn tls_server(pki: &Pki, client_auth: Option<ClientAuth>) -> TestServer {
    let tls = tls_config(pki, client_auth);
    TestServer::start_with(move |c| c.tls = Some(tls))
}

fn tls_addr(server: &TestServer) -> SocketAddr {
    server.handle.tls_addr().expect("native TLS listener")
}

fn amqp_tls_addr(server: &TestServer) -> SocketAddr {
    server.handle.amqp_tls_addr().expect("AMQP TLS listener")
}

fn trust(pki: &Pki) -> TlsOptions {
    TlsOptions::new(&pki.ca)
}

fn with_cert(pki: &Pki, cert: &Path, key: &Path) -> TlsOptions {
    TlsOptions {
        cert_file: Some(cert.to_path_buf()),
        key_file: Some(key.to_path_buf()),
        ..TlsOptions::new(&pki.ca)
    }
}

fn connect(addr: SocketAddr, tls: Option<TlsOptions>) -> Result<Connection, ClientError> {
    Connection::connect_with(ConnectOptions {
        timeout: WAIT,
        tls,
        ..ConnectOptions::new(addr.to_string())
    })
}

/// Declares `queue`, publishes `body` to it and gets it back.
fn round_trip(conn: &Connection, queue: &str, body: &[u8]) {
    let ch = conn.open_channel().expect("channel");
    ch.queue_declare(queue, QueueDeclareOptions::default())
        .expect("declare");
    ch.basic_publish("", queue, false, &BasicProperties::default(), body)
        .expect("publish");
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(m) = ch.basic_get(queue, true).expect("get") {
            assert_eq!(m.body, body, "body over TLS");
            break;
        }
        assert!(Instant::now() < deadline, "message never arrived");
        std::thread::sleep(Duration::from_millis(10));
    }
    ch.close().expect("channel close");
}

#[test]
fn library_round_trip_over_tls_small_large_and_many() {
    let pki = pki();
    let server = tls_server(&pki, None);
    let conn = connect(tls_addr(&server), Some(trust(&pki))).expect("TLS connect");
    round_trip(&conn, "tls-small", b"hello over TLS");
    // Larger than the TLS send buffer and many TLS records in each direction.
    let big: Vec<u8> = (0..3 * 1024 * 1024 + 17).map(|i| (i % 251) as u8).collect();
    round_trip(&conn, "tls-big", &big);

    // Many deliveries pushed through one TLS connection while it also acks.
    let ch = conn.open_channel().unwrap();
    ch.queue_declare("tls-many", QueueDeclareOptions::default())
        .unwrap();
    let body = vec![7u8; 10_000];
    const MESSAGES: usize = 3_000;
    let props = BasicProperties::default();
    let batch: Vec<PublishMessage> = (0..100)
        .map(|_| PublishMessage {
            exchange: String::new(),
            routing_key: "tls-many".into(),
            mandatory: false,
            properties: props.clone(),
            body: body.clone(),
        })
        .collect();
    for _ in 0..MESSAGES / batch.len() {
        ch.publish_batch(&batch).unwrap();
    }
    let consumer = ch
        .basic_consume("tls-many", ConsumeOptions::default())
        .unwrap();
    for i in 0..MESSAGES {
        match consumer.recv_timeout(WAIT).unwrap() {
            ConsumerEvent::Delivery(d) => {
                assert_eq!(d.body.len(), body.len(), "delivery {i}");
                ch.basic_ack(d.delivery_tag, false).unwrap();
            }
            other => panic!("{other:?}"),
        }
    }
    // The server's name may also be given explicitly (checked against its DNS name).
    let named = TlsOptions {
        server_name: Some("localhost".into()),
        ..trust(&pki)
    };
    let conn2 = connect(tls_addr(&server), Some(named)).expect("TLS connect by name");
    round_trip(&conn2, "tls-named", b"by name");
    conn2.close().unwrap();
    conn.close().unwrap();
    // The plain listener still speaks plain TCP.
    let plain = connect(server.addr(), None).expect("plain connect");
    round_trip(&plain, "plain", b"plain still works");
    plain.close().unwrap();
}

#[test]
fn client_refuses_an_untrusted_or_misnamed_server() {
    let pki = pki();
    let server = tls_server(&pki, None);
    // Trusting another CA (the server's own certificate is not a CA).
    let wrong_ca = TlsOptions::new(&pki.rogue_cert);
    let err = connect(tls_addr(&server), Some(wrong_ca)).expect_err("untrusted server");
    assert!(matches!(err, ClientError::Tls(_)), "{err:?}");
    assert!(err.to_string().contains("certificate"), "{err}");
    let misnamed = TlsOptions {
        server_name: Some("broker.example".into()),
        ..trust(&pki)
    };
    let err = connect(tls_addr(&server), Some(misnamed)).expect_err("wrong name");
    assert!(matches!(err, ClientError::Tls(_)), "{err:?}");
    // A CA file that is not there: the error names it.
    let missing = TlsOptions::new(pki.dir.path().join("nope.pem"));
    let err = connect(tls_addr(&server), Some(missing)).expect_err("missing CA file");
    assert!(err.to_string().contains("nope.pem"), "{err}");
    // The server is unharmed.
    let conn = connect(tls_addr(&server), Some(trust(&pki))).unwrap();
    round_trip(&conn, "after-refusals", b"ok");
}

/// Runs `relaymq-cli` with `args`, killed after [`CHILD_TIMEOUT`].
fn cli(args: &[&str]) -> Output {
    run_bounded(Command::new(env!("CARGO_BIN_EXE_relaymq-cli")).args(args))
}

fn run_bounded(cmd: &mut Command) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > CHILD_TIMEOUT {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn cli_round_trip_over_tls() {
    let pki = pki();
    let server = tls_server(&pki, Some(ClientAuth::Optional));
    let addr = tls_addr(&server).to_string();
    let ca = pki.ca.to_str().unwrap();
    let base = ["--addr", &addr, "--tls", "--tls-ca", ca];
    let run = |more: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(more);
        cli(&args)
    };
    let o = run(&["declare", "queue", "cli-tls"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&["publish", "", "cli-tls", "hello from the CLI over TLS"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&["get", "cli-tls"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "hello from the CLI over TLS\n"
    );
    // With a client certificate too.
    let (cert, key) = (
        pki.client_cert.to_str().unwrap(),
        pki.client_key.to_str().unwrap(),
    );
    let o = run(&["--tls-cert", cert, "--tls-key", key, "status"]);
    assert!(o.status.success(), "{}", text(&o));
    // Plain CLI on the TLS port, TLS CLI on the plain port: exit 3, cannot connect.
    let o = cli(&["--addr", &addr, "list", "queues"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let plain = server.addr().to_string();
    let o = cli(&["--addr", &plain, "--tls", "--tls-ca", ca, "list", "queues"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("TLS"),
        "{}",
        text(&o)
    );
    // --tls without a CA is a usage error.
    let o = cli(&["--addr", &addr, "--tls", "status"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// A rustls client configuration trusting the test CA, optionally with a client
/// certificate.
fn rustls_client(pki: &Pki, cert: Option<(&Path, &Path)>) -> Arc<rustls::ClientConfig> {
    let roots = relaymq::tls::load_roots(&pki.ca).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(relaymq::tls::crypto_provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    Arc::new(match cert {
        None => builder.with_no_client_auth(),
        Some((c, k)) => builder
            .with_client_auth_cert(
                relaymq::tls::load_certs(c).unwrap(),
                relaymq::tls::load_key(k).unwrap(),
            )
            .unwrap(),
    })
}

#[test]
fn amqp_over_tls_answers_the_protocol_header() {
    let pki = pki();
    let server = tls_server(&pki, None);
    let sock = TcpStream::connect(amqp_tls_addr(&server)).unwrap();
    sock.set_read_timeout(Some(WAIT)).unwrap();
    let conn =
        rustls::ClientConnection::new(rustls_client(&pki, None), "localhost".try_into().unwrap())
            .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    tls.write_all(&relaymq::amqp::PROTOCOL_HEADER).unwrap();
    // connection.start: frame type 1 (method), channel 0, class 10 method 10.
    let mut header = [0u8; 7];
    tls.read_exact(&mut header).unwrap();
    assert_eq!(header[0], 1, "method frame");
    assert_eq!(&header[1..3], &[0, 0], "channel 0");
    let size = u32::from_be_bytes([header[3], header[4], header[5], header[6]]) as usize;
    let mut payload = vec![0u8; size + 1];
    tls.read_exact(&mut payload).unwrap();
    assert_eq!(&payload[..4], &[0, 10, 0, 10], "connection.start");
    assert_eq!(payload[size], 0xCE, "frame end");
}

#[test]
fn pika_over_tls() {
    let pki = pki();
    let server = tls_server(&pki, None);
    let port = amqp_tls_addr(&server).port().to_string();
    let script = r#"
import ssl, sys, pika
ctx = ssl.create_default_context(cafile=sys.argv[1])
params = pika.ConnectionParameters(
    "127.0.0.1", int(sys.argv[2]),
    ssl_options=pika.SSLOptions(ctx, "localhost"),
    socket_timeout=10, blocked_connection_timeout=10)
conn = pika.BlockingConnection(params)
ch = conn.channel()
ch.queue_declare("pika-tls")
ch.basic_publish("", "pika-tls", b"pika over TLS")
print(ch.basic_get("pika-tls", auto_ack=True)[2].decode())
conn.close()
"#;
    let o =
        run_bounded(Command::new("python3").args(["-c", script, pki.ca.to_str().unwrap(), &port]));
    assert!(
        o.status.success(),
        "pika over TLS failed (pika is installed by scripts/test.sh: pip install pika)\n{}",
        text(&o)
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "pika over TLS");
}

/// Reads until the server closes the socket (EOF or reset); panics if it stays open
/// past `limit`.
fn expect_closed_within(mut sock: TcpStream, limit: Duration) -> Vec<u8> {
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match sock.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return got,
        }
        assert!(
            started.elapsed() < limit,
            "the server kept the connection open for {limit:?}"
        );
    }
}

#[test]
fn plaintext_client_on_the_tls_port_is_closed() {
    let pki = pki();
    let server = tls_server(&pki, None);
    let before = connect(tls_addr(&server), Some(trust(&pki))).unwrap();
    // The client library without TLS: told that the port speaks TLS.
    let err = connect(tls_addr(&server), None).expect_err("plain client on TLS port");
    assert!(err.to_string().contains("TLS alert"), "{err:?}");
    // Raw plaintext protocol headers on both TLS ports: an alert, then the close.
    for (addr, header) in [
        (tls_addr(&server), &relaymq::native::PROTOCOL_HEADER[..]),
        (amqp_tls_addr(&server), &relaymq::amqp::PROTOCOL_HEADER[..]),
    ] {
        let mut sock = TcpStream::connect(addr).unwrap();
        sock.write_all(header).unwrap();
        let got = expect_closed_within(sock, WAIT);
        assert!(
            got.is_empty() || got[0] == 0x15,
            "expected nothing or a TLS alert, got {got:02x?}"
        );
    }
    // Connections made before and after still work.
    round_trip(&before, "before-plain", b"still here");
    let after = connect(tls_addr(&server), Some(trust(&pki))).unwrap();
    round_trip(&after, "after-plain", b"and new ones too");
}

#[test]
fn garbage_instead_of_a_client_hello_closes_only_that_connection() {
    let pki = pki();
    let server = tls_server(&pki, None);
    let good = connect(tls_addr(&server), Some(trust(&pki))).unwrap();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut garbage = vec![0u8; 64 * 1024];
    for b in garbage.iter_mut() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        *b = seed as u8;
    }
    let mut huge_record = vec![0x16, 0x03, 0x01, 0xff, 0xff];
    huge_record.extend_from_slice(&garbage[..1024]);
    // A whole handshake record holding a ClientHello of four garbage bytes.
    let garbage_hello = [
        0x16, 0x03, 0x01, 0x00, 0x08, 1, 0, 0, 4, 0xde, 0xad, 0xbe, 0xef,
    ];
    for addr in [tls_addr(&server), amqp_tls_addr(&server)] {
        for bytes in [&garbage[..], &huge_record[..], &garbage_hello[..]] {
            let mut sock = TcpStream::connect(addr).unwrap();
            // The server may close before it read everything: a failed write is fine.
            let _ = sock.write_all(bytes);
            expect_closed_within(sock, WAIT);
        }
    }
    round_trip(&good, "after-garbage", b"unharmed");
    let again = connect(tls_addr(&server), Some(trust(&pki))).unwrap();
    round_trip(&again, "after-garbage-new", b"new connections too");
}

#[test]
fn a_stalled_tls_handshake_counts_against_the_handshake_timeout() {
    let pki = pki();
    let server = tls_server(&pki, None);
    // The first bytes of a ClientHello record, then nothing.
    let mut sock = TcpStream::connect(tls_addr(&server)).unwrap();
    sock.write_all(&[0x16, 0x03, 0x01]).unwrap();
    let limit =
        Duration::from_millis(relaymq::limits::HANDSHAKE_TIMEOUT_MS) + Duration::from_secs(5);
    let started = Instant::now();
    expect_closed_within(sock, limit);
    assert!(
        started.elapsed() >= Duration::from_millis(relaymq::limits::HANDSHAKE_TIMEOUT_MS / 2),
        "closed too early: {:?}",
        started.elapsed()
    );
}

/// Whether `result` is a refusal of the client certificate: the TLS alert, or the socket
/// closed under a client that was still writing.
fn refused(result: Result<Connection, ClientError>) -> ClientError {
    let err = result.expect_err("client refused");
    assert!(
        matches!(err, ClientError::Tls(_) | ClientError::Io(_)),
        "{err:?}"
    );
    err
}

#[test]
fn client_certificates_required() {
    let pki = pki();
    let server = tls_server(&pki, Some(ClientAuth::Required));
    let err = refused(connect(tls_addr(&server), Some(trust(&pki))));
    eprintln!("without a certificate: {err}");
    let rogue = with_cert(&pki, &pki.rogue_cert, &pki.rogue_key);
    let err = refused(connect(tls_addr(&server), Some(rogue)));
    eprintln!("with an untrusted certificate: {err}");
    let good = with_cert(&pki, &pki.client_cert, &pki.client_key);
    let conn = connect(tls_addr(&server), Some(good)).expect("CA-signed client cert");
    round_trip(&conn, "mtls", b"mutual TLS");
    // The AMQP TLS listener asks too.
    let sock = TcpStream::connect(amqp_tls_addr(&server)).unwrap();
    sock.set_read_timeout(Some(WAIT)).unwrap();
    let c =
        rustls::ClientConnection::new(rustls_client(&pki, None), "localhost".try_into().unwrap())
            .unwrap();
    let mut tls = rustls::StreamOwned::new(c, sock);
    let _ = tls.write_all(&relaymq::amqp::PROTOCOL_HEADER);
    let mut b = [0u8; 1];
    assert!(
        !matches!(tls.read(&mut b), Ok(1)),
        "AMQP over TLS without a client certificate was answered"
    );
    let sock = TcpStream::connect(amqp_tls_addr(&server)).unwrap();
    sock.set_read_timeout(Some(WAIT)).unwrap();
    let c = rustls::ClientConnection::new(
        rustls_client(&pki, Some((&pki.client_cert, &pki.client_key))),
        "localhost".try_into().unwrap(),
    )
    .unwrap();
    let mut tls = rustls::StreamOwned::new(c, sock);
    tls.write_all(&relaymq::amqp::PROTOCOL_HEADER).unwrap();
    tls.read_exact(&mut b).unwrap();
    assert_eq!(b[0], 1, "connection.start method frame");
}

#[test]
fn client_certificates_optional() {
    let pki = pki();
    let server = tls_server(&pki, Some(ClientAuth::Optional));
    let conn = connect(tls_addr(&server), Some(trust(&pki))).expect("no certificate is fine");
    round_trip(&conn, "opt-none", b"without");
    let good = with_cert(&pki, &pki.client_cert, &pki.client_key);
    let conn = connect(tls_addr(&server), Some(good)).expect("CA-signed client cert");
    round_trip(&conn, "opt-cert", b"with");
    // A certificate that is presented must still verify.
    let rogue = with_cert(&pki, &pki.rogue_cert, &pki.rogue_key);
    refused(connect(tls_addr(&server), Some(rogue)));
}

#[test]
fn unusable_files_stop_start_up_naming_the_file() {
    let pki = pki();
    let garbage = pki.dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let missing = pki.dir.path().join("missing.pem");
    let cases: Vec<(TlsConfig, &str)> = vec![
        (TlsConfig::new(&missing, &pki.server_key), "missing.pem"),
        (TlsConfig::new(&garbage, &pki.server_key), "garbage.pem"),
        (TlsConfig::new(&pki.server_cert, &garbage), "garbage.pem"),
        // A key that is not the certificate's.
        (
            TlsConfig::new(&pki.server_cert, &pki.client_key),
            "client-key.pem",
        ),
        (
            TlsConfig {
                client_ca_file: Some(garbage.clone()),
                ..tls_config(&pki, None)
            },
            "garbage.pem",
        ),
    ];
    for (tls, file) in cases {
        let dir = tempfile::tempdir().unwrap();
        let config = relaymq::server::ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            amqp_listen: None,
            data_dir: dir.path().join("data"),
            workers: 1,
            tls: Some(tls),
            metrics_listen: None,
            http_listen: None,
            ..Default::default()
        };
        let err = relaymq::server::start(config)
            .err()
            .expect("start-up refused");
        assert!(err.to_string().contains(file), "{file}: {err}");
        assert!(
            !dir.path().join("data").exists(),
            "checked before the data directory"
        );
    }
    // The binary: exit 1 with the file in the message; half the flags is a usage error.
    let data = pki.dir.path().join("data");
    let server = |args: &[&str]| {
        let mut all = vec![
            "--listen",
            "127.0.0.1:0",
            "--amqp-listen",
            "off",
            "--metrics-listen",
            "off",
            "--http-listen",
            "off",
            "--data-dir",
            data.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        run_bounded(Command::new(env!("CARGO_BIN_EXE_relaymq-server")).args(all))
    };
    let key = pki.server_key.to_str().unwrap();
    let o = server(&["--tls-cert", missing.to_str().unwrap(), "--tls-key", key]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("missing.pem"),
        "{}",
        text(&o)
    );
    let o = server(&["--tls-key", key]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = server(&["--tls-listen", "127.0.0.1:0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// The next method frame from `stream` (heartbeats skipped), or `None` at EOF.
fn recv_native(
    stream: &mut impl Read,
    buf: &mut Vec<u8>,
    asm: &mut relaymq::native::FrameAssembler,
) -> Option<(u16, relaymq::native::Method)> {
    use relaymq::native::frame::{self, Payload, FRAME_HEADER_BYTES};
    loop {
        if let Some((h, n)) = frame::check(buf, 64 << 20).expect("valid frame") {
            let payload = buf[FRAME_HEADER_BYTES..n].to_vec();
            buf.drain(..n);
            if h.frame_type == frame::FrameType::Heartbeat {
                continue;
            }
            let decoded = match asm.push(&h, &payload).expect("assemble") {
                None => continue,
                Some(Payload::Whole(ch, p)) => (ch, relaymq::native::Method::decode(p)),
                Some(Payload::Joined(ch, p)) => (ch, relaymq::native::Method::decode(&p)),
                Some(Payload::Oversized { .. }) => panic!("oversized"),
            };
            return Some((decoded.0, decoded.1.expect("decode").1));
        }
        let mut chunk = [0u8; 65536];
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[test]
fn a_tls_consumer_that_stops_reading_leaves_messages_in_the_queue() {
    use relaymq::native::{frame, Method, PROTOCOL_HEADER};
    use relaymq::types::FieldTable;
    const BODY: usize = 64 * 1024;
    const TOTAL: u64 = 1_200; // 75 MiB of bodies
    let pki = pki();
    let server = tls_server(&pki, None);
    // The consumer: native protocol over TLS, no_ack, then it stops reading its socket.
    let sock = TcpStream::connect(tls_addr(&server)).unwrap();
    sock.set_read_timeout(Some(WAIT)).unwrap();
    let c =
        rustls::ClientConnection::new(rustls_client(&pki, None), "localhost".try_into().unwrap())
            .unwrap();
    let mut tls = rustls::StreamOwned::new(c, sock);
    let mut out = PROTOCOL_HEADER.to_vec();
    let requests = [
        (
            0,
            Method::Open {
                user: "guest".into(),
                password: "guest".into(),
                vhost: "/".into(),
                frame_max: 0,
                heartbeat_s: 0,
                channel_max: 0,
                client_name: "sleepy-tls".into(),
            },
        ),
        (1, Method::ChannelOpen),
        (
            1,
            Method::QueueDeclare {
                queue: "slow-tls".into(),
                passive: false,
                durable: false,
                exclusive: false,
                auto_delete: false,
                arguments: FieldTable::new(),
            },
        ),
        (
            1,
            Method::BasicConsume {
                queue: "slow-tls".into(),
                consumer_tag: "sleepy".into(),
                no_ack: true,
                exclusive: false,
                arguments: FieldTable::new(),
            },
        ),
    ];
    for (i, (ch, m)) in requests.iter().enumerate() {
        frame::write_method(&mut out, *ch, 64 * 1024, |b| m.encode(i as u32 + 1, b));
    }
    tls.write_all(&out).unwrap();
    let (mut buf, mut asm) = (Vec::new(), relaymq::native::FrameAssembler::new(64 << 20));
    loop {
        match recv_native(&mut tls, &mut buf, &mut asm) {
            Some((_, Method::BasicConsumeOk { .. })) => break,
            Some((_, Method::Close { reply_text, .. })) => panic!("closed: {reply_text}"),
            Some(_) => {}
            None => panic!("consumer connection lost"),
        }
    }

    // The producer, on a plain connection, publishes 75 MiB with confirms.
    let conn = connect(server.addr(), None).unwrap();
    let ch = conn.open_channel().unwrap();
    ch.confirm_select().unwrap();
    let batch: Vec<PublishMessage> = (0..100)
        .map(|_| PublishMessage {
            exchange: String::new(),
            routing_key: "slow-tls".into(),
            mandatory: false,
            properties: BasicProperties::default(),
            body: vec![0xab; BODY],
        })
        .collect();
    for _ in 0..TOTAL / 100 {
        ch.publish_batch(&batch).unwrap();
    }
    assert!(ch.wait_for_confirms(Duration::from_secs(60)).unwrap());

    // At most the delivery high-water mark, the TLS send buffer, one message and what the
    // kernel buffers on both sides may have left the queue.
    let kernel = |f: &str| {
        std::fs::read_to_string(f)
            .ok()
            .and_then(|s| s.split_whitespace().last()?.parse::<usize>().ok())
            .unwrap_or(8 << 20)
    };
    let in_flight_max = relaymq::limits::OUTBOUND_HIGH_WATER_BYTES
        + relaymq::limits::TLS_SEND_BUFFER_BYTES
        + BODY
        + kernel("/proc/sys/net/ipv4/tcp_wmem")
        + kernel("/proc/sys/net/ipv4/tcp_rmem");
    let ready_min = TOTAL as i64 - (in_flight_max / BODY) as i64 - 16;
    let rows = conn.list(relaymq::client::ListKind::Queues).unwrap();
    let row = rows
        .iter()
        .find(|r| r.get("name").and_then(|v| v.as_str()) == Some("slow-tls"))
        .expect("queue listed");
    let ready = row.get("messages_ready").and_then(|v| v.as_i64()).unwrap();
    eprintln!("while the TLS consumer does not read: {ready} of {TOTAL} still ready (≥ {ready_min} required)");
    assert!(
        ready >= ready_min,
        "the server pushed {} messages towards a TLS consumer that does not read",
        TOTAL as i64 - ready
    );

    // It reads again: every message arrives.
    let mut delivered = 0u64;
    while delivered < TOTAL {
        match recv_native(&mut tls, &mut buf, &mut asm) {
            Some((1, Method::Deliver { deliveries })) => {
                for d in deliveries {
                    assert_eq!(d.body.len(), BODY);
                    delivered += 1;
                }
            }
            Some((_, m)) => panic!("expected basic.deliver, got {m:?}"),
            None => panic!("disconnected after {delivered} deliveries"),
        }
    }
}

// ---- The management HTTP API over TLS (`--https-listen`) ----

/// A server whose management API listens on HTTPS only (plain HTTP off), with the test
/// PKI and, with `client_auth`, client certificates checked.
fn https_server(pki: &Pki, client_auth: Option<ClientAuth>) -> TestServer {
    let mut tls = tls_config(pki, client_auth);
    tls.https_listen = Some("127.0.0.1:0".parse().unwrap());
    TestServer::start_with(move |c| {
        c.tls = Some(tls);
        c.http_listen = None;
    })
}

fn https_addr(server: &TestServer) -> SocketAddr {
    server.handle.https_addr().expect("HTTPS listener")
}

type HttpsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// An HTTPS connection to `addr` trusting the test CA, offering ALPN `http/1.1` (and
/// `h2` first, as browsers and curl do).
fn https_connect(pki: &Pki, addr: SocketAddr) -> HttpsStream {
    let sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(WAIT)).unwrap();
    let mut config = (*rustls_client(pki, None)).clone();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let conn =
        rustls::ClientConnection::new(Arc::new(config), "localhost".try_into().unwrap()).unwrap();
    rustls::StreamOwned::new(conn, sock)
}

/// A request as guest; `close` asks the server to close the connection after it.
fn https_request(method: &str, path: &str, body: Option<&[u8]>, close: bool) -> Vec<u8> {
    // guest:guest in Basic.
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n"
    );
    if close {
        head.push_str("Connection: close\r\n");
    }
    if let Some(b) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body.unwrap_or_default());
    out
}

/// Reads one answer with a `Content-Length` body off a kept-alive connection; `pending`
/// holds what was read past the previous answer.
fn read_one_reply(stream: &mut HttpsStream, pending: &mut Vec<u8>) -> common::http::HttpReply {
    let mut buf = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut buf).expect("an answer");
        assert!(n > 0, "closed before the answer's head");
        pending.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&pending[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .expect("a content-length answer");
    while pending.len() < head_end + length {
        let n = stream.read(&mut buf).expect("the answer's body");
        assert!(n > 0, "closed in the answer's body");
        pending.extend_from_slice(&buf[..n]);
    }
    let rest = pending.split_off(head_end + length);
    let reply = common::http::parse_reply(pending);
    *pending = rest;
    reply
}

/// Reads every answer up to the server's close (its TLS close_notify: `read_to_end`
/// fails on a close without one) and splits them.
fn read_to_close(mut stream: HttpsStream) -> Vec<u8> {
    let mut all = Vec::new();
    stream
        .read_to_end(&mut all)
        .expect("answers, then a clean TLS close (close_notify)");
    all
}

#[test]
fn https_serves_the_management_api_with_keep_alive_and_pipelining() {
    let pki = pki();
    let server = https_server(&pki, None);
    assert_eq!(server.handle.http_addr(), None, "plain HTTP is off");
    let addr = https_addr(&server);
    let mut tls = https_connect(&pki, addr);
    let mut pending = Vec::new();

    // Several requests on one connection.
    tls.write_all(&https_request("GET", "/api/whoami", None, false))
        .unwrap();
    let who = read_one_reply(&mut tls, &mut pending);
    assert_eq!(who.status, 200, "{}", who.text());
    assert_eq!(who.json()["name"], "guest");
    assert_eq!(
        tls.conn.alpn_protocol(),
        Some(&b"http/1.1"[..]),
        "ALPN picks HTTP/1.1 over h2"
    );
    let declare = br#"{"durable":true,"arguments":{"x-max-length":10}}"#;
    tls.write_all(&https_request(
        "PUT",
        "/api/queues/%2F/over-https",
        Some(declare),
        false,
    ))
    .unwrap();
    let created = read_one_reply(&mut tls, &mut pending);
    assert_eq!(created.status, 201, "{}", created.text());
    let publish = br#"{"properties":{},"routing_key":"over-https","payload":"sealed","payload_encoding":"string"}"#;
    tls.write_all(&https_request(
        "POST",
        "/api/exchanges/%2F/amq.default/publish",
        Some(publish),
        false,
    ))
    .unwrap();
    let routed = read_one_reply(&mut tls, &mut pending);
    assert_eq!(routed.json()["routed"], true, "{}", routed.text());

    // Two requests in one TLS write: the second waits decrypted in rustls while the
    // first is served, and is answered after it.
    let mut both = https_request("GET", "/api/queues/%2F/over-https", None, false);
    both.extend(https_request("GET", "/api/overview", None, true));
    tls.write_all(&both).unwrap();
    let first = read_one_reply(&mut tls, &mut pending);
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.json()["arguments"]["x-max-length"], 10);
    pending.extend(read_to_close(tls));
    let overview = common::http::parse_reply(&pending);
    assert_eq!(overview.status, 200, "{}", overview.text());
    let listeners = overview.json()["listeners"].clone();
    let https = listeners
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["protocol"] == "https")
        .unwrap_or_else(|| panic!("no https listener in {listeners}"));
    assert_eq!(https["port"], addr.port());
    assert!(
        !listeners
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["protocol"] == "http"),
        "plain HTTP is off, yet listed: {listeners}"
    );
}

#[test]
fn https_carries_large_bodies_both_ways() {
    let pki = pki();
    let server = https_server(&pki, None);
    let addr = https_addr(&server);
    // A definitions upload of about 1 MiB, then the unpaginated list of its queues
    // (a streamed, chunked answer), gzipped and not.
    let queues: Vec<serde_json::Value> = (0..4000)
        .map(|i| {
            serde_json::json!({"name": format!("bulk-{i:05}-{}", "q".repeat(200)), "vhost": "/",
                "durable": true, "auto_delete": false, "arguments": {}})
        })
        .collect();
    let doc = serde_json::json!({"queues": queues}).to_string();
    assert!(doc.len() > 900_000, "{}", doc.len());
    let mut tls = https_connect(&pki, addr);
    tls.write_all(&https_request(
        "POST",
        "/api/definitions",
        Some(doc.as_bytes()),
        true,
    ))
    .unwrap();
    let imported = common::http::parse_reply(&read_to_close(tls));
    assert!(
        imported.status == 204 || imported.status == 200,
        "{} {}",
        imported.status,
        imported.text()
    );
    let mut tls = https_connect(&pki, addr);
    tls.write_all(&https_request(
        "GET",
        "/api/queues/%2F?columns=name&pagination=false",
        None,
        true,
    ))
    .unwrap();
    let listed = common::http::parse_reply(&read_to_close(tls));
    assert_eq!(listed.status, 200);
    assert_eq!(listed.header("transfer-encoding"), Some("chunked"));
    assert!(listed.body.len() > 800_000, "{}", listed.body.len());
    let rows = listed.json();
    assert_eq!(rows.as_array().unwrap().len(), 4000);
    assert!(rows[0]["name"].as_str().unwrap().starts_with("bulk-00000-"));
}

#[test]
fn plain_http_and_garbage_on_the_https_port_close_only_that_connection() {
    let pki = pki();
    let server = https_server(&pki, None);
    let addr = https_addr(&server);
    let mut kept = https_connect(&pki, addr);
    let mut pending = Vec::new();
    kept.write_all(&https_request("GET", "/api/whoami", None, false))
        .unwrap();
    assert_eq!(read_one_reply(&mut kept, &mut pending).status, 200);
    for bytes in [
        &b"GET /api/overview HTTP/1.1\r\nHost: x\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\r\n"
            [..],
        &[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5][..],
    ] {
        let mut sock = TcpStream::connect(addr).unwrap();
        sock.write_all(bytes).unwrap();
        let got = expect_closed_within(sock, WAIT);
        assert!(
            got.is_empty() || got[0] == 0x15,
            "expected nothing or a TLS alert, got {:?}",
            String::from_utf8_lossy(&got)
        );
    }
    // An untrusting client fails its handshake and is closed.
    let sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(WAIT)).unwrap();
    let roots = rustls::RootCertStore::empty();
    let config = rustls::ClientConfig::builder_with_provider(relaymq::tls::crypto_provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let conn =
        rustls::ClientConnection::new(Arc::new(config), "localhost".try_into().unwrap()).unwrap();
    let mut untrusting = rustls::StreamOwned::new(conn, sock);
    assert!(untrusting
        .write_all(&https_request("GET", "/api/whoami", None, true))
        .and_then(|_| untrusting.flush())
        .and_then(|_| untrusting.read(&mut [0u8; 64]))
        .is_err());
    // The connection made before, and new ones, still work.
    kept.write_all(&https_request("GET", "/api/overview", None, true))
        .unwrap();
    pending.extend(read_to_close(kept));
    assert_eq!(common::http::parse_reply(&pending).status, 200);
    let mut again = https_connect(&pki, addr);
    again
        .write_all(&https_request("GET", "/api/whoami", None, true))
        .unwrap();
    assert_eq!(common::http::parse_reply(&read_to_close(again)).status, 200);
}

#[test]
fn https_with_required_client_certificates_refuses_a_client_without_one() {
    let pki = pki();
    let server = https_server(&pki, Some(ClientAuth::Required));
    let addr = https_addr(&server);
    let mut anonymous = https_connect(&pki, addr);
    let refused = anonymous
        .write_all(&https_request("GET", "/api/whoami", None, true))
        .and_then(|_| anonymous.flush())
        .and_then(|_| {
            let mut all = Vec::new();
            anonymous.read_to_end(&mut all).map(|_| all)
        });
    assert!(
        refused.is_err(),
        "answered without a client certificate: {refused:?}"
    );
    let sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(WAIT)).unwrap();
    let mut config = (*rustls_client(&pki, Some((&pki.client_cert, &pki.client_key)))).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let conn =
        rustls::ClientConnection::new(Arc::new(config), "localhost".try_into().unwrap()).unwrap();
    let mut with_cert = rustls::StreamOwned::new(conn, sock);
    with_cert
        .write_all(&https_request("GET", "/api/whoami", None, true))
        .unwrap();
    let who = common::http::parse_reply(&read_to_close(with_cert));
    assert_eq!(who.status, 200, "{}", who.text());
}

#[test]
fn rabbitmqadmin_over_https() {
    let Some(tool) = common::clients::rabbitmqadmin() else {
        return;
    };
    let pki = pki();
    let server = https_server(&pki, None);
    let port = https_addr(&server).port().to_string();
    let run = |args: &[&str]| {
        run_bounded(
            Command::new("python3")
                .arg(&tool)
                .args(["-H", "127.0.0.1", "-P", &port, "-u", "guest", "-p", "guest"])
                .args(["--ssl", "--ssl-ca-cert-file", pki.ca.to_str().unwrap()])
                .args(args),
        )
    };
    let o = run(&["declare", "queue", "name=admin-over-https", "durable=true"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&["-f", "raw_json", "list", "queues", "name"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("admin-over-https"),
        "{}",
        text(&o)
    );
}
