//! A small HTTP/1.1 client for the management API's tests: one request per connection
//! (`Connection: close`), Basic credentials, JSON bodies, chunked answers decoded. Raw
//! enough that tests see exactly what the server sent (status, headers, bytes).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// An answer.
#[derive(Debug, Clone)]
pub struct HttpReply {
    pub status: u16,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpReply {
    /// The body as JSON (`null` when empty).
    pub fn json(&self) -> serde_json::Value {
        if self.body.is_empty() {
            return serde_json::Value::Null;
        }
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): status {} body {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The first header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends one request and reads the whole answer (≤ 30 s).
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    auth: Option<(&str, &str)>,
    body: Option<&[u8]>,
    headers: &[(&str, &str)],
) -> HttpReply {
    use base64::Engine;
    let mut s = TcpStream::connect(addr).expect("connect to the HTTP API");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some((u, p)) = auth {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
        head.push_str(&format!("Authorization: Basic {token}\r\n"));
    }
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!("Content-Length: {}\r\n", b.len()));
        if !headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
        {
            head.push_str("Content-Type: application/json\r\n");
        }
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    if let Some(b) = body {
        out.extend_from_slice(b);
    }
    s.write_all(&out).expect("send the request");
    let mut all = Vec::new();
    s.read_to_end(&mut all).expect("read the answer");
    parse_reply(&all)
}

/// Parses a whole answer (head and body, body read to the close).
pub fn parse_reply(all: &[u8]) -> HttpReply {
    let end = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(all)));
    let head = String::from_utf8_lossy(&all[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let raw = &all[end + 4..];
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked { dechunk(raw) } else { raw.to_vec() };
    HttpReply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk size line");
        let size_text = String::from_utf8_lossy(&raw[..line_end]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16)
            .expect("hex chunk size");
        raw = &raw[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

/// The management API of a server, as one user.
#[derive(Debug, Clone)]
pub struct Api {
    pub addr: SocketAddr,
    pub user: String,
    pub password: String,
}

impl Api {
    /// As `guest`/`guest`.
    pub fn guest(addr: SocketAddr) -> Api {
        Api::as_user(addr, "guest", "guest")
    }

    /// As `user`.
    pub fn as_user(addr: SocketAddr, user: &str, password: &str) -> Api {
        Api {
            addr,
            user: user.to_string(),
            password: password.to_string(),
        }
    }

    fn send(&self, method: &str, path: &str, body: Option<&serde_json::Value>) -> HttpReply {
        let bytes = body.map(|b| b.to_string().into_bytes());
        request(
            self.addr,
            method,
            &format!("/api{path}"),
            Some((&self.user, &self.password)),
            bytes.as_deref(),
            &[],
        )
    }

    /// `GET /api{path}`.
    pub fn get(&self, path: &str) -> HttpReply {
        self.send("GET", path, None)
    }

    /// `PUT /api{path}` with a JSON body.
    pub fn put(&self, path: &str, body: &serde_json::Value) -> HttpReply {
        self.send("PUT", path, Some(body))
    }

    /// `POST /api{path}` with a JSON body.
    pub fn post(&self, path: &str, body: &serde_json::Value) -> HttpReply {
        self.send("POST", path, Some(body))
    }

    /// `DELETE /api{path}`.
    pub fn delete(&self, path: &str) -> HttpReply {
        self.send("DELETE", path, None)
    }

    /// `GET /api{path}` that must answer 200; its JSON.
    pub fn get_ok(&self, path: &str) -> serde_json::Value {
        let r = self.get(path);
        assert_eq!(r.status, 200, "GET {path}: {}", r.text());
        r.json()
    }
}
