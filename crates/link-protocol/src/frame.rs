//! Length-prefixed frames: a 4-byte big-endian length, then that many bytes of JSON.

use crate::Error;
use serde::{de::DeserializeOwned, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest frame either side accepts. Tool output is capped well below this.
pub const MAX_FRAME: usize = 4 * 1024 * 1024;

/// Reads one frame; `Ok(None)` on a clean end of stream before a length prefix.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<Vec<u8>>, Error> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(Error::FrameTooLarge(len));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf).await?;
    Ok(Some(buf))
}

/// Writes one frame and flushes it.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, bytes: &[u8]) -> Result<(), Error> {
    if bytes.len() > MAX_FRAME {
        return Err(Error::FrameTooLarge(bytes.len()));
    }
    let mut out = Vec::with_capacity(4 + bytes.len());
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
    w.write_all(&out).await?;
    w.flush().await?;
    Ok(())
}

/// Reads one frame and decodes it as `T`.
pub async fn read_message<T: DeserializeOwned, R: AsyncRead + Unpin>(
    r: &mut R,
) -> Result<Option<T>, Error> {
    match read_frame(r).await? {
        Some(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
        None => Ok(None),
    }
}

/// Encodes `msg` and writes it as one frame.
pub async fn write_message<T: Serialize, W: AsyncWrite + Unpin>(
    w: &mut W,
    msg: &T,
) -> Result<(), Error> {
    write_frame(w, &serde_json::to_vec(msg)?).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn round_trip_and_limit() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            write_message(&mut a, &serde_json::json!({"x": 1}))
                .await
                .unwrap();
        });
        let got: serde_json::Value = read_message(&mut b).await.unwrap().unwrap();
        writer.await.unwrap();
        assert_eq!(got["x"], 1);

        let mut big = Vec::new();
        big.extend_from_slice(&((MAX_FRAME as u32) + 1).to_be_bytes());
        let err = read_frame(&mut big.as_slice()).await.unwrap_err();
        assert!(matches!(err, Error::FrameTooLarge(_)));
        assert!(read_frame(&mut [].as_slice()).await.unwrap().is_none());
    }
}
