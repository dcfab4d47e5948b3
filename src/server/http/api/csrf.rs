//! Cross-site request forgery protection for the API's writes.
//!
//! A browser that once answered a Basic-auth prompt for this origin resends those
//! credentials on every request to it, including a form posted by another site, and
//! a form can send `application/x-www-form-urlencoded`, `multipart/form-data` or
//! `text/plain` bodies without asking the server first (a "simple" request, Fetch
//! standard §3.2.3). So a write is refused when:
//!
//! - it says it comes from another site: `Sec-Fetch-Site` other than `same-origin` or
//!   `none`, or an `Origin` other than the request's own (`null` included): 403;
//! - it is a `POST` (the only write method a browser sends cross-site without a CORS
//!   preflight, which this API never grants) whose body has one of the types an HTML form
//!   sends (`application/x-www-form-urlencoded`, `multipart/form-data`, `text/plain`:
//!   the CORS-safelisted ones, Fetch standard §2.2.2): 415;
//! - the one exception, a `multipart/form-data` definitions upload (the form RabbitMQ's
//!   UI posts), carries no proof of coming from this origin: a `Sec-Fetch-Site:
//!   same-origin` or a matching `Origin`: 403.
//!
//! A `POST` with `application/json`, another type or none at all passes: a browser
//! sends another type cross-site only after a preflight, and marks every cross-origin
//! `POST` it sends, with or without a body type, with `Origin` (pyrabbit2 posts with no
//! content type). `PUT`, `PATCH` and `DELETE` take any content type (as RabbitMQ's API
//! does): a browser sends them to another origin only after a preflight, and the API
//! answers `OPTIONS` without any `Access-Control-Allow-*` header. Tools other than
//! browsers (curl, rabbitmqadmin, the HTTP clients) send neither header.
//! docs/http-api.md §1 states the rule.

use super::ApiError;
use crate::server::http::request::Request;

/// The body types an HTML form sends, which a browser posts to another origin without a
/// preflight (the CORS-safelisted `Content-Type` values).
const FORM_TYPES: [&str; 3] = [
    "application/x-www-form-urlencoded",
    "multipart/form-data",
    "text/plain",
];

/// Whether `method` changes something (everything but GET, HEAD and OPTIONS).
fn is_write(method: &str) -> bool {
    !matches!(method, "GET" | "HEAD" | "OPTIONS")
}

/// The media type of the request's body, lower-cased, without parameters.
fn media_type(request: &Request) -> Option<String> {
    let v = request.header("content-type")?;
    let t = v
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    (!t.is_empty()).then_some(t)
}

/// The `host[:port]` part of an origin (`scheme://host[:port]`), lower-cased.
fn origin_authority(origin: &str) -> Option<String> {
    let (_, rest) = origin.split_once("://")?;
    let authority = rest.split('/').next().unwrap_or("");
    (!authority.is_empty()).then(|| authority.to_ascii_lowercase())
}

/// Whether the request proves it comes from a page of this origin: `Sec-Fetch-Site:
/// same-origin`, or an `Origin` whose host and port are the request's `Host`.
fn same_origin_proven(request: &Request) -> bool {
    if request
        .header("sec-fetch-site")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("same-origin"))
    {
        return true;
    }
    match (request.header("origin"), request.header("host")) {
        (Some(origin), Some(host)) => {
            origin_authority(origin).is_some_and(|a| a == host.trim().to_ascii_lowercase())
        }
        _ => false,
    }
}

/// Checks a request to `/api/` + `path` against the rules of the module documentation.
///
/// # Errors
/// 403 `forbidden` for a write from another site or an unproven multipart upload; 415
/// `unsupported_media_type` for a `POST` whose body is not JSON.
pub fn check(request: &Request, path: &[&str]) -> Result<(), ApiError> {
    let method = request.method.as_str();
    if !is_write(method) {
        return Ok(());
    }
    let cross_site = request.header("sec-fetch-site").is_some_and(|v| {
        let v = v.trim();
        !v.eq_ignore_ascii_case("same-origin") && !v.eq_ignore_ascii_case("none")
    }) || (request.header("origin").is_some() && !same_origin_proven(request));
    if cross_site {
        return Err(ApiError::new(
            403,
            "forbidden",
            "cross-origin request refused: the management API takes writes only from its \
             own origin (CSRF protection)",
        ));
    }
    if method != "POST" {
        return Ok(());
    }
    match media_type(request).as_deref() {
        None => Ok(()),
        Some(t) if !FORM_TYPES.contains(&t) => Ok(()),
        Some("multipart/form-data") if matches!(path, ["definitions", ..]) => {
            if same_origin_proven(request) {
                Ok(())
            } else {
                Err(ApiError::new(
                    403,
                    "forbidden",
                    "a multipart definitions upload must come from the management UI's own \
                     origin (Origin or Sec-Fetch-Site: same-origin); tools can POST the \
                     JSON document with content-type application/json",
                ))
            }
        }
        Some(other) => Err(ApiError::new(
            415,
            "unsupported_media_type",
            format!(
                "POST bodies must be sent with content-type application/json, not {other} \
                 (CSRF protection: a browser form cannot send JSON)"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, headers: &[(&str, &str)]) -> Request {
        let mut head = format!("{method} /api/x HTTP/1.1\r\nhost: broker:15672\r\n");
        for (n, v) in headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let peer = "127.0.0.1:1".parse().expect("address");
        Request::parse(head.as_bytes(), peer).expect("head").0
    }

    fn status(method: &str, path: &[&str], headers: &[(&str, &str)]) -> u16 {
        match check(&request(method, headers), path) {
            Ok(()) => 200,
            Err(e) => e.status,
        }
    }

    #[test]
    fn reads_pass_whatever_their_headers() {
        let hostile = [
            ("origin", "http://evil.example"),
            ("sec-fetch-site", "cross-site"),
        ];
        assert_eq!(status("GET", &["overview"], &hostile), 200);
        assert_eq!(status("HEAD", &["overview"], &hostile), 200);
    }

    #[test]
    fn cross_site_writes_are_refused_whatever_their_body() {
        let json = ("content-type", "application/json");
        for h in [
            vec![("sec-fetch-site", "cross-site"), json],
            vec![("sec-fetch-site", "same-site"), json],
            vec![("origin", "http://evil.example"), json],
            vec![("origin", "null"), json],
            vec![("origin", "http://broker:15673"), json],
        ] {
            assert_eq!(status("POST", &["bindings"], &h), 403, "{h:?}");
            assert_eq!(status("PUT", &["vhosts", "a"], &h), 403, "{h:?}");
            assert_eq!(status("DELETE", &["vhosts", "a"], &h), 403, "{h:?}");
        }
    }

    #[test]
    fn posts_need_json_and_multipart_needs_proof_of_origin() {
        for t in [
            "application/x-www-form-urlencoded",
            "text/plain",
            "multipart/form-data; boundary=x",
        ] {
            assert_eq!(
                status("POST", &["bindings", "v"], &[("content-type", t)]),
                415,
                "{t}"
            );
        }
        // What tools send: JSON, or no type at all (pyrabbit2).
        assert_eq!(status("POST", &["bindings", "v"], &[]), 200);
        let json = [("content-type", "application/json; charset=utf-8")];
        assert_eq!(status("POST", &["bindings", "v"], &json), 200);
        let other = [("content-type", "application/xml")];
        assert_eq!(status("POST", &["bindings", "v"], &other), 200);
        let upper = [("content-type", "Text/Plain; charset=utf-8")];
        assert_eq!(status("POST", &["bindings", "v"], &upper), 415);
        let form = ("content-type", "multipart/form-data; boundary=x");
        assert_eq!(status("POST", &["definitions"], &[form]), 403);
        assert_eq!(
            status(
                "POST",
                &["definitions"],
                &[form, ("sec-fetch-site", "same-origin")]
            ),
            200
        );
        assert_eq!(
            status(
                "POST",
                &["definitions"],
                &[form, ("origin", "http://BROKER:15672")]
            ),
            200
        );
        // PUT and DELETE take any body, as RabbitMQ's do (`curl -X PUT -d …`).
        let form = [("content-type", "application/x-www-form-urlencoded")];
        assert_eq!(status("PUT", &["vhosts", "a"], &form), 200);
        assert_eq!(status("DELETE", &["vhosts", "a"], &[]), 200);
    }
}
