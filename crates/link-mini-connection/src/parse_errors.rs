//! A request hyper cannot parse (a malformed request line or header) is answered by hyper
//! itself, with an empty-bodied `400` and `connection: close`, before any code of the contract
//! runs, and hyper offers no hook to change that answer. The contract says every error has a
//! JSON body, so each connection's stream is wrapped: that one response, which no handler can
//! write (every error a handler answers has a JSON body, `json_errors`), is replaced on its
//! way out by the contract's own `400`.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How hyper's answer to an unparsable request begins, and what marks it as bodiless.
const HYPER_400: &[u8] = b"HTTP/1.1 400 Bad Request\r\n";
const EMPTY: &[u8] = b"\r\ncontent-length: 0\r\n";

/// The stream of one connection, with hyper's bodiless `400` replaced.
pub struct JsonParseErrors<S> {
    inner: S,
    /// The replacement, and how much of it is written.
    pending: Option<(Vec<u8>, usize)>,
}

impl<S> JsonParseErrors<S> {
    pub fn new(inner: S) -> Self {
        JsonParseErrors {
            inner,
            pending: None,
        }
    }
}

/// True when `buf` is a whole response head of hyper's `400` for an unparsable request.
fn is_parse_error(buf: &[u8]) -> bool {
    buf.starts_with(HYPER_400)
        && buf.ends_with(b"\r\n\r\n")
        && buf
            .windows(EMPTY.len())
            .any(|w| w.eq_ignore_ascii_case(EMPTY))
}

/// The contract's `400` for a request that is not HTTP/1.1.
fn replacement() -> Vec<u8> {
    let body = link_protocol::RemoteError::bad_request(
        "the request is not valid HTTP/1.1: its request line or a header could not be parsed",
    )
    .to_http_body()
    .to_string();
    format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

impl<S: AsyncWrite + Unpin> JsonParseErrors<S> {
    /// Writes what is left of the replacement; ready once it is all written.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, done)) = &mut self.pending {
            if *done == bytes.len() {
                self.pending = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*done..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *done += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for JsonParseErrors<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for JsonParseErrors<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        if is_parse_error(buf) {
            // Taken as written; the replacement goes out with the next write, flush or
            // shutdown (hyper flushes its answer), so a retried write cannot send it twice.
            self.pending = Some((replacement(), 0));
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    // Not vectored: hyper then writes a response head in one buffer, which is what
    // `is_parse_error` looks at.
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_bodiless_400_is_replaced() {
        let hyper = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\
                      date: Sun, 06 Dec 2026 12:49:45 GMT\r\n\r\n";
        assert!(is_parse_error(hyper));
        // The contract's own 400s have bodies; other statuses and body bytes pass.
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\
                     content-length: 52\r\n\r\n";
        assert!(!is_parse_error(ours));
        assert!(!is_parse_error(
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
        ));
        assert!(!is_parse_error(b"{\"error\":{}}"));
        let text = String::from_utf8(replacement()).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"]["code"], "bad_request");
    }
}
