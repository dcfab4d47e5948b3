//! A raw AMQP 0-9-1 client for tests that send exact frames, built on the project's codec.

use relaymq::amqp::{check, write_method, AmqpMethod, PROTOCOL_HEADER};
use relaymq::types::FieldTable;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Frames this test client accepts, in bytes (the server's default frame size).
pub const FRAME_MAX: u32 = 131_072;

/// A raw AMQP 0-9-1 connection for sending exact bytes.
pub struct Raw {
    pub s: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    pub fn connect(addr: SocketAddr) -> Raw {
        Raw::from_stream(TcpStream::connect(addr).expect("connect"))
    }

    /// Wraps a connected socket (e.g. one bound to a chosen source address).
    pub fn from_stream(s: TcpStream) -> Raw {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Raw { s, buf: Vec::new() }
    }

    /// Header, start-ok (PLAIN `user`/`password`), tune-ok, open `vhost`: `Ok` with the
    /// connection open, or the server's `connection.close` code and text.
    pub fn login(&mut self, user: &str, password: &str, vhost: &str) -> Result<(), (u16, String)> {
        self.send(&PROTOCOL_HEADER);
        assert!(matches!(
            self.recv(),
            Some((0, AmqpMethod::ConnectionStart { .. }))
        ));
        self.method(
            0,
            &AmqpMethod::ConnectionStartOk {
                client_properties: FieldTable::new(),
                mechanism: "PLAIN".into(),
                response: format!("\0{user}\0{password}").into_bytes(),
                locale: "en_US".into(),
            },
        );
        let frame_max = match self.recv() {
            Some((0, AmqpMethod::ConnectionTune { frame_max, .. })) => frame_max,
            Some((
                0,
                AmqpMethod::ConnectionClose {
                    reply_code,
                    reply_text,
                    ..
                },
            )) => return Err((reply_code, reply_text)),
            other => panic!("expected tune, got {other:?}"),
        };
        self.method(
            0,
            &AmqpMethod::ConnectionTuneOk {
                channel_max: 16,
                frame_max,
                heartbeat: 0,
            },
        );
        self.method(
            0,
            &AmqpMethod::ConnectionOpen {
                virtual_host: vhost.into(),
            },
        );
        match self.recv() {
            Some((0, AmqpMethod::ConnectionOpenOk {})) => Ok(()),
            Some((
                0,
                AmqpMethod::ConnectionClose {
                    reply_code,
                    reply_text,
                    ..
                },
            )) => Err((reply_code, reply_text)),
            other => panic!("expected open-ok, got {other:?}"),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).expect("write");
    }

    pub fn method(&mut self, channel: u16, m: &AmqpMethod) {
        let mut out = Vec::new();
        write_method(&mut out, channel, m);
        self.send(&out);
    }

    /// The next frame of any type: (type, channel, payload); `None` at EOF or timeout.
    pub fn recv_frame(&mut self) -> Option<(relaymq::amqp::FrameType, u16, Vec<u8>)> {
        loop {
            if let Some((h, n)) = check(&self.buf, FRAME_MAX).expect("server frames are valid") {
                let frame: Vec<u8> = self.buf.drain(..n).collect();
                return Some((h.frame_type, h.channel, h.payload(&frame).to_vec()));
            }
            let mut chunk = [0u8; 4096];
            match self.s.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// The next method frame (content and heartbeat frames are skipped); `None` at EOF.
    pub fn recv(&mut self) -> Option<(u16, AmqpMethod)> {
        loop {
            if let Some((h, n)) = check(&self.buf, FRAME_MAX).expect("server frames are valid") {
                let frame: Vec<u8> = self.buf.drain(..n).collect();
                if h.frame_type == relaymq::amqp::FrameType::Method {
                    let m = AmqpMethod::decode(h.payload(&frame)).expect("decodes");
                    return Some((h.channel, m));
                }
                continue;
            }
            let mut chunk = [0u8; 4096];
            match self.s.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Header, start-ok (PLAIN guest/guest), tune-ok, open "/": an open connection.
    pub fn open(addr: SocketAddr) -> Raw {
        match Raw::try_open(addr, 16) {
            Ok((r, _)) => r,
            Err(e) => panic!("connection refused: {e:?}"),
        }
    }

    /// The handshake asking for `channel_max` (0 = the server's offer): the open
    /// connection with the server's `connection.tune` offer `(channel_max, frame_max)`, or
    /// the code and text of the `connection.close` that refused it.
    pub fn try_open(
        addr: SocketAddr,
        channel_max: u16,
    ) -> Result<(Raw, (u16, u32)), (u16, String)> {
        Raw::try_open_with(addr, channel_max, FieldTable::new())
    }

    /// An open connection whose `connection.start-ok` announces `capabilities` (each with
    /// the boolean true), as real clients do (pika: `consumer_cancel_notify`, …).
    pub fn open_with_capabilities(addr: SocketAddr, capabilities: &[&str]) -> Raw {
        let mut caps = FieldTable::new();
        for c in capabilities {
            caps.insert((*c).into(), relaymq::types::FieldValue::Bool(true));
        }
        let mut props = FieldTable::new();
        props.insert(
            "capabilities".into(),
            relaymq::types::FieldValue::Table(caps),
        );
        match Raw::try_open_with(addr, 16, props) {
            Ok((r, _)) => r,
            Err(e) => panic!("connection refused: {e:?}"),
        }
    }

    /// As [`Raw::try_open`], sending `client_properties` in `connection.start-ok`.
    pub fn try_open_with(
        addr: SocketAddr,
        channel_max: u16,
        client_properties: FieldTable,
    ) -> Result<(Raw, (u16, u32)), (u16, String)> {
        let mut r = Raw::connect(addr);
        r.send(&PROTOCOL_HEADER);
        assert!(matches!(
            r.recv(),
            Some((0, AmqpMethod::ConnectionStart { .. }))
        ));
        r.method(
            0,
            &AmqpMethod::ConnectionStartOk {
                client_properties,
                mechanism: "PLAIN".into(),
                response: b"\0guest\0guest".to_vec(),
                locale: "en_US".into(),
            },
        );
        let Some((
            0,
            AmqpMethod::ConnectionTune {
                channel_max: offered_channels,
                frame_max,
                ..
            },
        )) = r.recv()
        else {
            panic!("no tune");
        };
        r.method(
            0,
            &AmqpMethod::ConnectionTuneOk {
                channel_max,
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
        match r.recv() {
            Some((0, AmqpMethod::ConnectionOpenOk {})) => Ok((r, (offered_channels, frame_max))),
            Some((
                0,
                AmqpMethod::ConnectionClose {
                    reply_code,
                    reply_text,
                    ..
                },
            )) => Err((reply_code, reply_text)),
            other => panic!("expected open-ok or close, got {other:?}"),
        }
    }

    /// Expects `connection.close` with `code`; returns its text.
    pub fn expect_connection_close(&mut self, code: u16) -> String {
        match self.recv() {
            Some((
                0,
                AmqpMethod::ConnectionClose {
                    reply_code,
                    reply_text,
                    ..
                },
            )) => {
                assert_eq!(reply_code, code, "{reply_text}");
                reply_text
            }
            other => panic!("expected connection.close {code}, got {other:?}"),
        }
    }
}
