//! Reading one HTTP/1.1 request: the head up to its blank line, then a body of the length
//! it declares, each within a named limit and the read timeout. Chunked bodies are refused
//! (411): the routes' clients send a `content-length`.

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::limits::{HTTP_BODY_BYTES_MAX, HTTP_HEAD_BYTES_MAX};

/// A request read whole.
#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// The path without the query.
    pub path: String,
    /// The query without its `?` (empty if none).
    pub query: String,
    /// The request line and headers, as text.
    pub head: String,
    pub body: Vec<u8>,
}

/// Why no request was read: the status and text to answer with (`None`: the client went
/// away or sent nothing, so nothing is answered).
pub type Refusal = Option<(u16, String)>;

/// Reads one request from `stream`.
pub async fn read(stream: &mut TcpStream) -> Result<Request, Refusal> {
    let mut buf = Vec::with_capacity(4096);
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if buf.len() >= HTTP_HEAD_BYTES_MAX {
            let why = format!(
                "the request head exceeds {HTTP_HEAD_BYTES_MAX} bytes (HTTP_HEAD_BYTES_MAX)\n"
            );
            return Err(Some((431, why)));
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.map_err(|_| None)?;
        if n == 0 {
            return Err(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut words = head.split_whitespace();
    let (method, target) = (words.next().unwrap_or("GET"), words.next().unwrap_or("/"));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if header(&head, "transfer-encoding").is_some() {
        return Err(Some((411, "send the body with a content-length, not chunked\n".into())));
    }
    let length = match header(&head, "content-length") {
        None => 0,
        Some(v) => {
            v.parse::<usize>().map_err(|_| Some((400, format!("content-length {v:?}\n"))))?
        }
    };
    if length > HTTP_BODY_BYTES_MAX {
        let why = format!(
            "the body is {length} bytes; the most is {HTTP_BODY_BYTES_MAX} (HTTP_BODY_BYTES_MAX)\n"
        );
        return Err(Some((413, why)));
    }
    let mut body = buf.split_off(head_end);
    if body.len() < length {
        let have = body.len();
        body.resize(length, 0);
        stream.read_exact(&mut body[have..]).await.map_err(|_| None)?;
    }
    body.truncate(length);
    Ok(Request {
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        head,
        body,
    })
}

/// The value of header `name` (any case) in a request's `head`: the one parser of headers.
pub fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).take_while(|l| !l.is_empty()).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The reason phrase of a status.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    }
}

/// Whether `a == b`, in time that depends on the lengths only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}
