//! Shared helpers for integration tests: an in-process server on 127.0.0.1:0 and a raw
//! protocol connection for tests that must send exact (or broken) frames.

#![allow(dead_code)]

use relaymq::protocol::frame::{self, Payload, FRAME_HEADER_BYTES};
use relaymq::protocol::{FrameAssembler, Method, PROTOCOL_HEADER};
use relaymq::server::{self, ServerConfig, ServerHandle};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A server on a free loopback port with its own temporary data directory.
pub struct TestServer {
    pub handle: ServerHandle,
    pub dir: tempfile::TempDir,
}

impl TestServer {
    pub fn start() -> TestServer {
        TestServer::start_with(|_| {})
    }

    pub fn start_with(adjust: impl FnOnce(&mut ServerConfig)) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            data_dir: dir.path().join("data"),
            workers: 2,
            ..ServerConfig::default()
        };
        adjust(&mut config);
        let handle = server::start(config).expect("server starts");
        TestServer { handle, dir }
    }

    pub fn addr(&self) -> SocketAddr {
        self.handle.local_addr()
    }

    pub fn addr_string(&self) -> String {
        self.addr().to_string()
    }
}

/// A raw native-protocol connection: exact frames in, decoded frames out.
pub struct Raw {
    pub stream: TcpStream,
    buf: Vec<u8>,
    asm: FrameAssembler,
    pub frame_max: u32,
    next_request: u32,
}

impl Raw {
    /// Connects without sending anything.
    pub fn connect_bare(addr: SocketAddr) -> Raw {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Raw {
            stream,
            buf: Vec::new(),
            asm: FrameAssembler::new(64 << 20),
            frame_max: 128 * 1024,
            next_request: 1,
        }
    }

    /// Connects, sends the header and `connection.open` as guest, expects `open-ok`.
    pub fn connect(addr: SocketAddr) -> Raw {
        let mut raw = Raw::connect_bare(addr);
        raw.stream.write_all(&PROTOCOL_HEADER).unwrap();
        let (_, _, reply) = raw.call(
            0,
            Method::Open {
                user: "guest".into(),
                password: "guest".into(),
                vhost: "/".into(),
                frame_max: 0,
                heartbeat_s: 0,
                channel_max: 0,
                client_name: "raw-test".into(),
            },
        );
        match reply {
            Method::OpenOk { frame_max, .. } => raw.frame_max = frame_max,
            other => panic!("expected open-ok, got {other:?}"),
        }
        raw
    }

    pub fn send(&mut self, channel: u16, request_id: u32, method: &Method) {
        let mut out = Vec::new();
        frame::write_method(&mut out, channel, self.frame_max, |b| {
            method.encode(request_id, b)
        });
        self.stream.write_all(&out).expect("send");
    }

    /// Sends a request with a fresh id and returns the next frame that is not a push.
    pub fn call(&mut self, channel: u16, method: Method) -> (u16, u32, Method) {
        let rid = self.next_request;
        self.next_request += 1;
        self.send(channel, rid, &method);
        loop {
            let (ch, id, m) = self.recv().expect("reply");
            if id == rid || matches!(m, Method::Close { .. }) {
                return (ch, id, m);
            }
        }
    }

    /// The next method frame (heartbeats skipped), or `None` at EOF.
    pub fn recv(&mut self) -> Option<(u16, u32, Method)> {
        loop {
            if let Some((h, n)) = frame::check(&self.buf, 64 << 20).expect("valid frame") {
                let payload = self.buf[FRAME_HEADER_BYTES..n].to_vec();
                self.buf.drain(..n);
                if h.frame_type == frame::FrameType::Heartbeat {
                    continue;
                }
                match self.asm.push(&h, &payload).expect("assemble") {
                    None => continue,
                    Some(Payload::Whole(ch, p)) => {
                        let (rid, m) = Method::decode(p).expect("decode");
                        return Some((ch, rid, m));
                    }
                    Some(Payload::Joined(ch, p)) => {
                        let (rid, m) = Method::decode(&p).expect("decode");
                        return Some((ch, rid, m));
                    }
                    Some(Payload::Oversized { .. }) => panic!("oversized"),
                }
            }
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    /// Reads until EOF; returns every method received.
    pub fn drain_to_eof(&mut self) -> Vec<Method> {
        let mut v = Vec::new();
        while let Some((_, _, m)) = self.recv() {
            v.push(m);
        }
        v
    }
}

/// A real `relaymq-server` process (for restart and crash tests).
pub struct ServerProcess {
    pub child: std::process::Child,
    pub addr: SocketAddr,
    pub data_dir: std::path::PathBuf,
}

impl ServerProcess {
    /// Starts the built binary on a free loopback port with `data_dir`, waiting (≤ 20 s)
    /// for its ready file. `extra` are more flags.
    // The child is reaped by `Drop`, `terminate` or `kill9`, which clippy cannot see.
    #[allow(clippy::zombie_processes)]
    pub fn start(data_dir: &std::path::Path, extra: &[&str]) -> ServerProcess {
        let ready = data_dir.with_extension(format!("ready-{}", std::process::id()));
        let _ = std::fs::remove_file(&ready);
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_relaymq-server"))
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--ready-file")
            .arg(&ready)
            .arg("--log-level")
            .arg("warn")
            .args(extra)
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("server binary starts");
        let started = std::time::Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(&ready) {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                    if let Some(addr) = v["listen"].as_str() {
                        let _ = std::fs::remove_file(&ready);
                        return ServerProcess {
                            child,
                            addr: addr.parse().expect("address in ready file"),
                            data_dir: data_dir.to_path_buf(),
                        };
                    }
                }
            }
            if started.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("server did not become ready within 20 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn addr_string(&self) -> String {
        self.addr.to_string()
    }

    /// SIGTERM, then waits (≤ 20 s); returns the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        wait_bounded(&mut self.child)
    }

    /// SIGKILL (a crash), then reaps the process.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_bounded(child: &mut std::process::Child) -> std::process::ExitStatus {
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("server did not exit within 20 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
