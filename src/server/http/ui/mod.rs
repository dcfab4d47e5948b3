//! The management web UI: plain HTML, CSS and JavaScript files embedded in the binary
//! (nothing is fetched from anywhere at run time, so it works on an air-gapped host),
//! served by the management listener beside `/api`, of which it is a client and nothing
//! else (docs/ui.md).
//!
//! Each file is served with a strong `ETag` (the first 16 bytes of its SHA-256, hex) and
//! `cache-control: no-cache`, so a browser revalidates and gets `304 Not Modified`
//! until the binary changes; with `accept-encoding: gzip` it gets the file compressed
//! once, at the first request, with gzip's best level. Every answer carries a
//! `content-security-policy` that allows only this origin's scripts, styles and API
//! (no inline script runs, whatever a queue name or message body holds), and
//! `x-frame-options: DENY` against clickjacking.

use super::request::Request;
use super::response::Response;
use flate2::write::GzEncoder;
use flate2::Compression;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::sync::OnceLock;

/// The policy every UI file is served with: scripts, styles, images (and `data:`
/// images: the favicon) and API calls from this origin only; no plugins, no framing,
/// no `<base>`, forms post only here.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
     frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// One embedded file: its path (`/` is the page itself), media type and bytes.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

/// Declares the embedded files: (path under `/`, file under `assets/`, media type).
macro_rules! assets {
    ($(($path:expr, $file:expr, $type:expr)),* $(,)?) => {
        &[$(Asset {
            path: $path,
            content_type: $type,
            body: include_bytes!(concat!("assets/", $file)),
        }),*]
    };
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// Every file of the UI.
static ASSETS: &[Asset] = assets![
    ("/", "index.html", HTML),
    ("/index.html", "index.html", HTML),
    ("/css/relaymq.css", "relaymq.css", CSS),
    ("/img/favicon.svg", "favicon.svg", "image/svg+xml"),
    ("/js/core.js", "js/core.js", JS),
    ("/js/chart.js", "js/chart.js", JS),
    ("/js/overview.js", "js/overview.js", JS),
    ("/js/connections.js", "js/connections.js", JS),
    ("/js/exchanges.js", "js/exchanges.js", JS),
    ("/js/queues.js", "js/queues.js", JS),
    ("/js/admin.js", "js/admin.js", JS),
    ("/js/main.js", "js/main.js", JS),
];

/// What is computed once per file: its ETag and its gzip encoding.
struct Prepared {
    etag: String,
    gzip: Vec<u8>,
}

fn prepared() -> &'static [Prepared] {
    static PREPARED: OnceLock<Vec<Prepared>> = OnceLock::new();
    PREPARED.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                let digest = Sha256::digest(a.body);
                let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
                let mut gz = GzEncoder::new(Vec::new(), Compression::best());
                // Writing to a Vec cannot fail; an empty encoding is never served.
                let gzip = gz
                    .write_all(a.body)
                    .and_then(|()| gz.finish())
                    .unwrap_or_default();
                Prepared {
                    etag: format!("\"{hex}\""),
                    gzip,
                }
            })
            .collect()
    })
}

/// Whether `path` is the UI's (anything outside `/api`).
pub fn is_ui_path(path: &str) -> bool {
    path != "/api" && !path.starts_with("/api/")
}

/// Answers a request for a UI file: 200 with the file, 304 when `if-none-match` names
/// its ETag, 404 for a path the UI does not have, 405 (with `Allow`) for a method other
/// than GET, HEAD and OPTIONS.
pub fn serve(request: &Request) -> Response {
    let method = request.method.as_str();
    if method == "OPTIONS" {
        return secured(Response::empty(200)).with_header("allow", "GET, HEAD, OPTIONS");
    }
    if method != "GET" && method != "HEAD" {
        return secured(Response::bytes(
            405,
            "text/plain; charset=utf-8",
            b"Method Not Allowed\n".to_vec(),
        ))
        .with_header("allow", "GET, HEAD, OPTIONS");
    }
    let Some(i) = ASSETS.iter().position(|a| a.path == request.path) else {
        return secured(Response::bytes(
            404,
            "text/plain; charset=utf-8",
            b"Not Found\n".to_vec(),
        ));
    };
    let (asset, prep) = (&ASSETS[i], &prepared()[i]);
    let matches = request.header("if-none-match").is_some_and(|v| {
        v.split(',')
            .any(|t| t.trim() == prep.etag || t.trim() == "*")
    });
    if matches {
        return secured(Response::empty(304))
            .with_header("etag", prep.etag.clone())
            .with_header("cache-control", "no-cache");
    }
    let gzip = !prep.gzip.is_empty()
        && request
            .header("accept-encoding")
            .is_some_and(|v| v.split(',').any(|t| t.trim().starts_with("gzip")));
    let response = if gzip {
        Response::bytes(200, asset.content_type, prep.gzip.clone())
            .with_header("content-encoding", "gzip")
    } else {
        Response::bytes(200, asset.content_type, asset.body.to_vec())
    };
    secured(response)
        .with_header("vary", "accept-encoding")
        .with_header("etag", prep.etag.clone())
        .with_header("cache-control", "no-cache")
}

/// The security headers of every UI answer.
fn secured(r: Response) -> Response {
    r.with_header("content-security-policy", CONTENT_SECURITY_POLICY)
        .with_header("x-frame-options", "DENY")
        .with_header("x-content-type-options", "nosniff")
        .with_header("referrer-policy", "same-origin")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The total size of the UI's files, in bytes (each once, uncompressed): the budget
    /// docs/ui.md states is 500 KB.
    fn total_bytes() -> usize {
        let mut seen: Vec<&[u8]> = Vec::new();
        for a in ASSETS {
            if !seen.iter().any(|s| std::ptr::eq(*s, a.body)) {
                seen.push(a.body);
            }
        }
        seen.iter().map(|b| b.len()).sum()
    }

    #[test]
    fn the_ui_fits_its_budget_and_every_file_has_a_distinct_etag() {
        assert!(total_bytes() < 500_000, "{} bytes", total_bytes());
        let p = prepared();
        for (a, b) in ASSETS.iter().zip(p) {
            assert!(!a.body.is_empty(), "{} is empty", a.path);
            assert!(
                !b.gzip.is_empty() && b.gzip.len() < a.body.len(),
                "{}",
                a.path
            );
        }
        assert_eq!(p[0].etag, p[1].etag, "/ and /index.html are one file");
        assert_ne!(p[0].etag, p[2].etag);
    }

    #[test]
    fn only_the_api_prefix_is_not_the_uis() {
        assert!(is_ui_path("/"));
        assert!(is_ui_path("/js/core.js"));
        assert!(is_ui_path("/apidocs"));
        assert!(!is_ui_path("/api"));
        assert!(!is_ui_path("/api/overview"));
    }
}
