//! An answer of the HTTP server ([`super::server`]): status, headers and a body that is
//! either bytes (sent with `Content-Length`) or written by a closure as it is produced
//! (sent `chunked`, RFC 9112 §7.1), so a long list is streamed in bounded memory.

use flate2::write::GzEncoder;
use flate2::Compression;
use std::io::{self, BufWriter, Write};

/// Smallest body compressed when the client accepts gzip, in bytes: below it the gzip
/// header and the CPU cost more than they save.
pub const GZIP_BYTES_MIN: usize = 1024;

/// Size of the buffer a streamed body is written through, in bytes: one chunk on the
/// wire per buffer, and the most of a streamed body held in memory at once.
pub const HTTP_STREAM_BUFFER_BYTES: usize = 64 * 1024;

/// Writes a streamed body into the socket (through a chunked encoder).
pub type BodyWriter = Box<dyn FnOnce(&mut dyn Write) -> io::Result<()> + Send>;

/// The body of an answer.
pub enum ResponseBody {
    /// No body (`Content-Length: 0`, or none at all for 204 and 304).
    Empty,
    /// These bytes.
    Bytes(Vec<u8>),
    /// Produced while it is written.
    Stream(BodyWriter),
}

/// An answer.
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Headers beyond those the server adds (`content-length`, `transfer-encoding`,
    /// `connection`, `date`, `server`); names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: ResponseBody,
    /// Close the connection after this answer.
    pub close: bool,
}

impl Response {
    /// An answer with no body.
    pub fn empty(status: u16) -> Response {
        Response {
            status,
            headers: Vec::new(),
            body: ResponseBody::Empty,
            close: false,
        }
    }

    /// An answer with `body` of type `content_type`.
    pub fn bytes(status: u16, content_type: &str, body: Vec<u8>) -> Response {
        Response {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            body: ResponseBody::Bytes(body),
            close: false,
        }
    }

    /// An answer whose body `write` produces as it is sent.
    pub fn stream(status: u16, content_type: &str, write: BodyWriter) -> Response {
        Response {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            body: ResponseBody::Stream(write),
            close: false,
        }
    }

    /// Adds a header.
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Response {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    /// Closes the connection after this answer.
    pub fn closing(mut self) -> Response {
        self.close = true;
        self
    }

    /// Writes the answer to `out`; `head_only` for a `HEAD` request (headers only),
    /// `keep_alive` whether the connection stays open, `minor_version` the request's
    /// HTTP/1.x (HTTP/1.0 gets no chunked encoding: its streamed body ends at the close).
    ///
    /// # Errors
    /// The socket's, or the body writer's.
    pub fn write_to(
        self,
        out: &mut dyn Write,
        head_only: bool,
        keep_alive: bool,
        minor_version: u8,
    ) -> io::Result<()> {
        let mut head = format!("HTTP/1.1 {} {}\r\n", self.status, reason(self.status));
        head.push_str("server: RelayMQ\r\n");
        for (name, value) in &self.headers {
            // Header values come from the handlers; a CR or LF would split the head.
            let value: String = value.chars().filter(|c| *c != '\r' && *c != '\n').collect();
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        let no_body_status = self.status == 204 || self.status == 304 || self.status < 200;
        let chunked = matches!(self.body, ResponseBody::Stream(_)) && minor_version >= 1;
        let keep_alive =
            keep_alive && (minor_version >= 1 || !matches!(self.body, ResponseBody::Stream(_)));
        match &self.body {
            _ if no_body_status => {}
            ResponseBody::Empty => head.push_str("content-length: 0\r\n"),
            ResponseBody::Bytes(b) => head.push_str(&format!("content-length: {}\r\n", b.len())),
            ResponseBody::Stream(_) if chunked => head.push_str("transfer-encoding: chunked\r\n"),
            ResponseBody::Stream(_) => {}
        }
        if !keep_alive {
            head.push_str("connection: close\r\n");
        } else if minor_version == 0 {
            head.push_str("connection: keep-alive\r\n");
        }
        head.push_str("\r\n");
        if head_only || no_body_status {
            out.write_all(head.as_bytes())?;
            return out.flush();
        }
        match self.body {
            ResponseBody::Empty => out.write_all(head.as_bytes())?,
            ResponseBody::Bytes(b) => {
                let mut all = head.into_bytes();
                all.extend_from_slice(&b);
                out.write_all(&all)?;
            }
            ResponseBody::Stream(write) => {
                out.write_all(head.as_bytes())?;
                if chunked {
                    let mut encoder = BufWriter::with_capacity(
                        HTTP_STREAM_BUFFER_BYTES,
                        ChunkedWriter { out: &mut *out },
                    );
                    write(&mut encoder)?;
                    encoder.flush()?;
                    drop(encoder);
                    out.write_all(b"0\r\n\r\n")?;
                } else {
                    let mut buffered =
                        BufWriter::with_capacity(HTTP_STREAM_BUFFER_BYTES, &mut *out);
                    write(&mut buffered)?;
                    buffered.flush()?;
                }
            }
        }
        out.flush()
    }

    /// The answer compressed with gzip (RFC 9110 §8.4) when it is worth it: a body of at
    /// least [`GZIP_BYTES_MIN`] bytes, or a streamed one, of a compressible type (JSON,
    /// text, JavaScript, CSS, HTML), and not already encoded. Adds `content-encoding` and
    /// `vary: accept-encoding`. The caller decides whether the client accepts gzip.
    pub fn gzipped(mut self) -> Response {
        let compressible = self.headers.iter().any(|(n, v)| {
            n == "content-type"
                && ["json", "text/", "javascript", "css", "html", "svg"]
                    .iter()
                    .any(|t| v.contains(t))
        });
        let encoded = self.headers.iter().any(|(n, _)| n == "content-encoding");
        if !compressible || encoded {
            return self;
        }
        self.body = match self.body {
            ResponseBody::Bytes(b) if b.len() >= GZIP_BYTES_MIN => {
                let mut gz = GzEncoder::new(Vec::with_capacity(b.len() / 4), Compression::fast());
                if gz.write_all(&b).is_err() {
                    return Response {
                        body: ResponseBody::Bytes(b),
                        ..self
                    };
                }
                match gz.finish() {
                    Ok(z) => ResponseBody::Bytes(z),
                    Err(_) => {
                        return Response {
                            body: ResponseBody::Bytes(b),
                            ..self
                        }
                    }
                }
            }
            ResponseBody::Stream(write) => ResponseBody::Stream(Box::new(move |w| {
                let mut gz = GzEncoder::new(w, Compression::fast());
                write(&mut gz)?;
                gz.finish().map(|_| ())
            })),
            other => {
                return Response {
                    body: other,
                    ..self
                };
            }
        };
        self.headers
            .push(("content-encoding".into(), "gzip".into()));
        self.headers.push(("vary".into(), "accept-encoding".into()));
        self
    }

    /// Whether the connection is to be closed after it.
    pub fn closes(&self) -> bool {
        self.close
    }
}

/// Writes each buffer it is given as one chunk.
struct ChunkedWriter<'a> {
    out: &'a mut dyn Write,
}

impl Write for ChunkedWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.out
            .write_all(format!("{:x}\r\n", buf.len()).as_bytes())?;
        self.out.write_all(buf)?;
        self.out.write_all(b"\r\n")?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// The reason phrase of a status code (RFC 9110 §15).
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(r: Response, keep_alive: bool, minor: u8) -> String {
        let mut out = Vec::new();
        r.write_to(&mut out, false, keep_alive, minor)
            .expect("writes");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn bytes_go_with_their_length_and_streams_chunked() {
        let text = written(
            Response::bytes(200, "application/json", b"{}".to_vec()),
            true,
            1,
        );
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("content-length: 2\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n{}"), "{text}");
        let stream = Response::stream(200, "application/json", Box::new(|w| w.write_all(b"[1,2]")));
        let text = written(stream, true, 1);
        assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n5\r\n[1,2]\r\n0\r\n\r\n"), "{text}");
        let stream = Response::stream(200, "text/plain", Box::new(|w| w.write_all(b"x")));
        let text = written(stream, true, 0);
        assert!(text.contains("connection: close\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nx"), "{text}");
    }

    #[test]
    fn large_and_streamed_bodies_are_gzipped_small_ones_not() {
        use std::io::Read;
        let big = vec![b'a'; 10_000];
        let r = Response::bytes(200, "application/json", big.clone()).gzipped();
        assert!(r
            .headers
            .iter()
            .any(|(n, v)| n == "content-encoding" && v == "gzip"));
        let ResponseBody::Bytes(z) = &r.body else {
            panic!("bytes")
        };
        assert!(z.len() < 200, "{}", z.len());
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&z[..])
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, big);
        let small = Response::bytes(200, "application/json", b"{}".to_vec()).gzipped();
        assert!(small.headers.iter().all(|(n, _)| n != "content-encoding"));
        let binary = Response::bytes(200, "application/octet-stream", big.clone()).gzipped();
        assert!(binary.headers.iter().all(|(n, _)| n != "content-encoding"));
        let stream = Response::stream(
            200,
            "application/json",
            Box::new(|w| w.write_all(&[b'b'; 5000])),
        )
        .gzipped();
        let mut out = Vec::new();
        stream.write_to(&mut out, false, true, 1).expect("writes");
        let head = String::from_utf8_lossy(&out);
        assert!(head.contains("content-encoding: gzip\r\n"), "{head}");
        assert!(head.contains("transfer-encoding: chunked\r\n"), "{head}");
    }

    #[test]
    fn no_content_has_no_length_and_header_values_cannot_split_the_head() {
        let text = written(
            Response::empty(204).with_header("x-a", "1\r\nx-b: 2"),
            false,
            1,
        );
        assert!(!text.contains("content-length"), "{text}");
        assert!(text.contains("x-a: 1x-b: 2\r\n"), "{text}");
        assert!(text.contains("connection: close\r\n"), "{text}");
    }
}
