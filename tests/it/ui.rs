//! The management web UI: its files as the HTTP listener serves them (embedded, ETags,
//! gzip, the security headers, the 500 KB budget), the API's CSRF rules, and the UI
//! driven in a real browser (headless Chromium through Selenium, `tests/ui/browser.py`)
//! against the real server binary: log in, live rates, create, bind, publish, get,
//! peek, replay, purge, delete, a quorum queue with a single active consumer, escaping,
//! tags, a cross-site form post.

use crate::common;
use common::clients::{self, run_bounded_for};
use common::http::request;
use common::{ServerProcess, TestServer};
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Longest the browser scenario may run before it is killed.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(300);

/// The UI's budget: every file it loads, uncompressed, in bytes (docs/ui.md).
const UI_BYTES_MAX: usize = 500_000;

fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> common::http::HttpReply {
    request(addr, "GET", path, None, None, headers)
}

/// The local files `index.html` loads (`src="…"` and `href="…"` not starting with `#`).
fn referenced_files(index: &str) -> Vec<String> {
    let mut files = Vec::new();
    for attr in ["src=\"", "href=\""] {
        let mut rest = index;
        while let Some(i) = rest.find(attr) {
            rest = &rest[i + attr.len()..];
            let end = rest.find('"').expect("closing quote");
            let target = &rest[..end];
            if !target.starts_with('#') && !target.contains("://") {
                files.push(format!("/{target}"));
            }
        }
    }
    files.sort();
    files.dedup();
    files
}

#[test]
fn ui_files_are_embedded_and_served_with_etags_gzip_and_security_headers() {
    let server = TestServer::with_api();
    let addr = server.http_addr();
    let index = get(addr, "/", &[]);
    assert_eq!(index.status, 200);
    assert_eq!(
        index.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let csp = index.header("content-security-policy").expect("a CSP");
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(index.header("x-frame-options"), Some("DENY"));
    let html = index.text();
    let files = referenced_files(&html);
    assert!(files.len() >= 8, "{files:?}");
    let mut total = index.body.len();
    for f in &files {
        let plain = get(addr, f, &[]);
        assert_eq!(plain.status, 200, "{f}");
        assert!(plain.header("content-encoding").is_none(), "{f}");
        let etag = plain.header("etag").expect("an ETag").to_string();
        assert_eq!(plain.header("cache-control"), Some("no-cache"), "{f}");
        total += plain.body.len();
        // Revalidation: 304 without a body.
        let again = get(addr, f, &[("If-None-Match", &etag)]);
        assert_eq!(again.status, 304, "{f}");
        assert!(again.body.is_empty(), "{f}");
        // A stale tag gets the file.
        assert_eq!(get(addr, f, &[("If-None-Match", "\"0\"")]).status, 200);
        // Compressed: the same bytes once gunzipped.
        let zipped = get(addr, f, &[("Accept-Encoding", "gzip, deflate")]);
        assert_eq!(zipped.header("content-encoding"), Some("gzip"), "{f}");
        assert!(zipped.body.len() < plain.body.len(), "{f}");
        let mut unzipped = Vec::new();
        flate2::read::GzDecoder::new(&zipped.body[..])
            .read_to_end(&mut unzipped)
            .expect("gzip");
        assert_eq!(unzipped, plain.body, "{f}");
        assert_eq!(zipped.header("etag"), Some(etag.as_str()));
    }
    assert!(total < UI_BYTES_MAX, "the UI is {total} bytes");
    // Nothing is fetched from elsewhere.
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "{html}"
    );
    assert_eq!(get(addr, "/js/nothing.js", &[]).status, 404);
    let post = request(addr, "POST", "/", None, Some(b"x"), &[]);
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET, HEAD, OPTIONS"));
    // The API is still the API.
    assert_eq!(get(addr, "/api/overview", &[]).status, 401);
}

#[test]
fn the_api_refuses_cross_site_writes_and_non_json_posts() {
    let server = TestServer::with_api();
    let addr = server.http_addr();
    let api = server.api();
    assert_eq!(
        api.put("/queues/%2F/victim", &serde_json::json!({})).status,
        201
    );
    let guest = Some(("guest", "guest"));
    let bind = "/api/bindings/%2F/e/amq.direct/q/victim";
    // A text/plain form whose body is JSON (`{"routing_key":"pwned","x":"="}`), posted
    // from another site with the browser's cached credentials.
    let body = br#"{"routing_key":"pwned","x":"="}"#;
    let forged = [
        vec![
            ("Content-Type", "text/plain"),
            ("Origin", "http://evil.example"),
        ],
        vec![
            ("Content-Type", "application/json"),
            ("Origin", "http://evil.example"),
        ],
        vec![
            ("Content-Type", "application/json"),
            ("Sec-Fetch-Site", "cross-site"),
        ],
        vec![("Content-Type", "application/json"), ("Origin", "null")],
    ];
    for headers in &forged {
        let r = request(addr, "POST", bind, guest, Some(body), headers);
        assert_eq!(r.status, 403, "{headers:?}: {}", r.text());
        assert!(r.text().contains("CSRF"), "{}", r.text());
    }
    // No Origin (an old browser): the body type decides.
    for t in ["text/plain", "application/x-www-form-urlencoded"] {
        let r = request(
            addr,
            "POST",
            bind,
            guest,
            Some(body),
            &[("Content-Type", t)],
        );
        assert_eq!(r.status, 415, "{t}: {}", r.text());
        assert!(r.text().contains("application/json"), "{}", r.text());
    }
    let bindings = api.get_ok("/queues/%2F/victim/bindings");
    assert!(
        bindings
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["routing_key"] != "pwned"),
        "{bindings}"
    );
    // The UI's own request (same origin) and a tool's (no Origin) pass.
    let own = format!("http://{addr}");
    let r = request(
        addr,
        "POST",
        bind,
        guest,
        Some(br#"{"routing_key":"ok"}"#),
        &[("Content-Type", "application/json"), ("Origin", &own)],
    );
    assert_eq!(r.status, 201, "{}", r.text());
    // PUT takes any body type, as RabbitMQ's API does (`curl -X PUT -d …`).
    let r = request(
        addr,
        "PUT",
        "/api/queues/%2F/formed",
        guest,
        Some(b"{}"),
        &[("Content-Type", "application/x-www-form-urlencoded")],
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let r = request(
        addr,
        "DELETE",
        "/api/queues/%2F/formed",
        guest,
        None,
        &[("Sec-Fetch-Site", "cross-site")],
    );
    assert_eq!(r.status, 403, "{}", r.text());
    // A multipart definitions upload needs proof of its origin.
    let multipart =
        b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"d.json\"\r\n\
        Content-Type: application/json\r\n\r\n{\"vhosts\":[{\"name\":\"uploaded\"}]}\r\n--b--\r\n";
    let form = ("Content-Type", "multipart/form-data; boundary=b");
    let r = request(
        addr,
        "POST",
        "/api/definitions",
        guest,
        Some(multipart),
        &[form],
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(api.get("/vhosts/uploaded").status, 404);
    let r = request(
        addr,
        "POST",
        "/api/definitions",
        guest,
        Some(multipart),
        &[form, ("Sec-Fetch-Site", "same-origin")],
    );
    assert!(r.status < 300, "{}: {}", r.status, r.text());
    assert_eq!(api.get("/vhosts/uploaded").status, 200);
}

#[test]
fn the_ui_works_in_a_real_browser() {
    if !clients::browser_available("ui::the_ui_works_in_a_real_browser") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(&dir.path().join("data"), &["--http-listen", "127.0.0.1:0"]);
    let http: SocketAddr = server.ready["http_listen"]
        .as_str()
        .expect("http_listen in the ready file")
        .parse()
        .unwrap();
    let amqp: SocketAddr = server.ready["amqp_listen"]
        .as_str()
        .expect("amqp_listen in the ready file")
        .parse()
        .unwrap();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let shots = root.join("target/ui-screenshots");
    let out = run_bounded_for(
        BROWSER_TIMEOUT,
        Command::new("python3")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .arg("-u")
            .arg(root.join("tests/ui/browser.py"))
            .arg("--http-port")
            .arg(http.port().to_string())
            .arg("--amqp-port")
            .arg(amqp.port().to_string())
            .arg("--bench")
            .arg(env!("CARGO_BIN_EXE_relaymq-bench"))
            .arg("--screenshots")
            .arg(&shots),
    );
    assert!(out.success, "the browser scenario failed: {out}");
    assert!(out.stdout.contains("ok: every step passed"), "{out}");
    drop(server);
}
