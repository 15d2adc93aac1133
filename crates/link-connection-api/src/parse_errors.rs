//! A request hyper cannot parse (a malformed request line or header: `400`; a head too large:
//! `431`; a URI too long: `414`) is answered by hyper itself, with an empty body and
//! `connection: close`, before any code of the contract runs, and hyper offers no hook to
//! change that answer. The contract says every error has a
//! JSON body, so each connection's stream is wrapped: those responses, which no handler can
//! write (every error a handler answers has a JSON body, `json_errors`), are replaced on their
//! way out by the contract's own, with the same status.

use link_protocol::{ErrorCode, RemoteError};
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The status lines of hyper's answers to an unparsable request, with what each says, and
/// what marks such an answer as bodiless.
const HYPER_ERRORS: &[(&[u8], ErrorCode, &str)] = &[
    (
        b"HTTP/1.1 400 Bad Request\r\n",
        ErrorCode::BadRequest,
        "the request is not valid HTTP/1.1: its request line or a header could not be parsed",
    ),
    (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
        ErrorCode::TooLarge,
        "the request's head is too large (too many or too long header fields)",
    ),
    (
        b"HTTP/1.1 414 URI Too Long\r\n",
        ErrorCode::TooLarge,
        "the request's URI is too long",
    ),
];
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

/// The contract's answer in place of `buf`, when `buf` is a whole bodiless response head of
/// hyper's for an unparsable request.
fn replacement(buf: &[u8]) -> Option<Vec<u8>> {
    let bodiless = buf.ends_with(b"\r\n\r\n")
        && buf
            .windows(EMPTY.len())
            .any(|w| w.eq_ignore_ascii_case(EMPTY));
    let (status, code, why) = HYPER_ERRORS
        .iter()
        .find(|(status, ..)| bodiless && buf.starts_with(status))?;
    let body = RemoteError::new(*code, *why).to_http_body().to_string();
    let status = String::from_utf8_lossy(status);
    let head = "content-type: application/json\r\nconnection: close\r\n";
    Some(format!("{status}{head}content-length: {}\r\n\r\n{body}", body.len()).into_bytes())
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
        if let Some(ours) = replacement(buf) {
            // Taken as written; the replacement goes out with the next write, flush or
            // shutdown (hyper flushes its answer), so a retried write cannot send it twice.
            self.pending = Some((ours, 0));
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
    // `replacement` looks at.
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_bodiless_answers_are_replaced() {
        let rest = "connection: close\r\ncontent-length: 0\r\ndate: Sun, 06 Dec 2026 GMT\r\n\r\n";
        for (status, code) in [
            ("400 Bad Request", "bad_request"),
            ("431 Request Header Fields Too Large", "too_large"),
            ("414 URI Too Long", "too_large"),
        ] {
            let hyper = format!("HTTP/1.1 {status}\r\n{rest}");
            let text = String::from_utf8(replacement(hyper.as_bytes()).unwrap()).unwrap();
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            assert!(
                head.starts_with(&format!("HTTP/1.1 {status}\r\n")),
                "{head}"
            );
            assert!(
                head.contains(&format!("content-length: {}", body.len())),
                "{head}"
            );
            let json: serde_json::Value = serde_json::from_str(body).unwrap();
            assert_eq!(json["error"]["code"], code);
        }
        // The contract's own errors have bodies; other statuses and body bytes pass.
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 52\r\n\r\n";
        assert!(replacement(ours).is_none());
        assert!(replacement(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(replacement(b"{}").is_none());
    }
}
