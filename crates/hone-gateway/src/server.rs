//! The HTTP server loop: hyper's connections — HTTP/1.1, and HTTP/2 over
//! cleartext for clients that speak it with prior knowledge (h2c, as gRPC
//! and some SDKs do) — with the limits a
//! gateway in front of production agents needs, which `axum::serve` does not
//! set: a cap on open client connections (below the file-descriptor limit, so
//! that a flood of slow clients cannot take `/health` and the journal down
//! with it), a header-read timeout that also closes idle keep-alive
//! connections, and OpenAI-style JSON bodies on the refusals hyper writes by
//! itself (400 for a malformed request head, 414, 431).

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio_util::task::TaskTracker;

/// Largest request head (request line and headers) read.
const MAX_HEAD_BYTES: usize = 128 << 10;
/// Connections over the cap being answered at once (beyond this they are
/// closed without an answer).
const MAX_REFUSING: usize = 256;
/// How long a refused connection is drained so that closing it sends the
/// answer, not a reset.
const REFUSE_LINGER: Duration = Duration::from_millis(200);

/// Limits of the server loop.
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
}

impl ServeLimits {
    /// The configured limits; without a configured cap, half of the file
    /// descriptors this process may open (raising its soft limit to the hard
    /// one first, as servers do).
    pub fn from_config(gateway: &hone_config::GatewayConfig) -> Self {
        Self {
            max_connections: gateway
                .max_connections
                .unwrap_or_else(|| (raise_fd_limit().min(1 << 17).saturating_sub(256) / 2).max(64)),
            header_read_timeout: gateway.header_read_timeout,
        }
    }
}

/// Raises the soft limit on open files to the hard limit; returns the limit now.
fn raise_fd_limit() -> usize {
    #[cfg(unix)]
    {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let mut limit = getrlimit(Resource::Nofile);
        if let (Some(current), Some(max)) = (limit.current, limit.maximum) {
            if current < max {
                let raised = Rlimit {
                    current: Some(max),
                    maximum: Some(max),
                };
                if setrlimit(Resource::Nofile, raised).is_ok() {
                    limit = raised;
                }
            }
        }
        limit
            .current
            .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX))
    }
    #[cfg(not(unix))]
    {
        1024
    }
}

/// Serves `app` until `shutdown` resolves; then stops accepting and asks
/// every open connection to finish its request in flight and close. Returns
/// once the listener is closed (connections may still be finishing: wait on
/// `connections`).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ServeLimits,
    connections: TaskTracker,
    shutdown: impl Future<Output = ()>,
) {
    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(true);
    http.http2()
        .timer(TokioTimer::new())
        .max_header_list_size(MAX_HEAD_BYTES as u32);
    let http = Arc::new(http);
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (stop, stopping) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors or a connection reset before
                    // accept: back off briefly rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refuse(tcp, limits.max_connections, &refusing);
            continue;
        };
        if let Err(e) = tcp.set_nodelay(true) {
            // Without it a response written in two pieces waits for the
            // client's delayed ACK (~40 ms).
            tracing::warn!(error = %e, "cannot set TCP_NODELAY");
        }
        // The peer's address travels with each request, as axum's
        // `ConnectInfo` (the dashboard limits failed sign-ins per address).
        let with_peer = tower::ServiceExt::map_request(
            app.clone(),
            move |mut request: hyper::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
                request
            },
        );
        let service = TowerToHyperService::new(with_peer);
        let mut stopping = stopping.clone();
        let http = http.clone();
        connections.spawn(async move {
            let _slot = slot;
            let connection = http.serve_connection(TokioIo::new(ErrorBodies::new(tcp)), service);
            tokio::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                    return;
                }
                _ = stopping.wait_for(|stop| *stop) => {}
            }
            connection.as_mut().graceful_shutdown();
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    let _ = stop.send(true);
}

/// Answers a connection over the cap with a 503 and closes it, so it holds
/// no file descriptor for long (what the client sent is drained briefly, or
/// closing would reset the connection before the answer is read).
fn refuse(tcp: TcpStream, cap: usize, refusing: &Arc<Semaphore>) {
    tracing::warn!(
        cap,
        "connection refused: too many open connections (gateway.max_connections)"
    );
    let Ok(permit) = refusing.clone().try_acquire_owned() else {
        return;
    };
    let body = error_body(
        "service_unavailable",
        "too_many_connections",
        &format!("the gateway already has {cap} open connections (gateway.max_connections); retry shortly"),
    );
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\nretry-after: 1\r\n\r\n{body}",
        body.len()
    );
    #[allow(
        clippy::disallowed_methods,
        reason = "a refusal holds no call and ends within REFUSE_LINGER; it need not delay shutdown"
    )]
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let _permit = permit;
        let mut tcp = tcp;
        let _ = tokio::time::timeout(REFUSE_LINGER, async {
            tcp.write_all(response.as_bytes()).await?;
            tcp.shutdown().await?;
            let mut sink = [0u8; 4096];
            while tcp.read(&mut sink).await? > 0 {}
            Ok::<_, io::Error>(())
        })
        .await;
    });
}

fn error_body(kind: &str, code: &str, message: &str) -> String {
    serde_json::json!({"error": {"message": message, "type": kind, "code": code, "param": null}}).to_string()
}

/// A connection whose writes pass through unchanged, except the bare
/// response hyper writes by itself when it cannot parse a request head
/// (`400`, `414`, `431` with no body), which gets an OpenAI-style JSON body.
struct ErrorBodies<T> {
    inner: T,
    /// A rewritten response still being written, and how many bytes of it are out.
    pending: Option<(Vec<u8>, usize)>,
}

impl<T> ErrorBodies<T> {
    fn new(inner: T) -> Self {
        Self { inner, pending: None }
    }
}

/// The JSON response for one of hyper's own bare error heads, if `head` is one.
fn with_body(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    if !text.ends_with("\r\n\r\n") || !text.to_ascii_lowercase().contains("\r\ncontent-length: 0\r\n") {
        return None;
    }
    let (status, code, message) = match text.get(..12)? {
        "HTTP/1.1 400" | "HTTP/1.0 400" => (
            "400 Bad Request",
            "invalid_http",
            "the request is not valid HTTP/1.1 (a malformed request line or header)",
        ),
        "HTTP/1.1 414" | "HTTP/1.0 414" => ("414 URI Too Long", "uri_too_long", "the request URI is too long"),
        "HTTP/1.1 431" | "HTTP/1.0 431" => (
            "431 Request Header Fields Too Large",
            "headers_too_large",
            "the request headers are too large",
        ),
        _ => return None,
    };
    let body = error_body("invalid_request_error", code, message);
    Some(
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl<T: AsyncRead + Unpin> AsyncRead for ErrorBodies<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ErrorBodies<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.pending.is_none() {
            match with_body(buf) {
                Some(rewritten) => self.pending = Some((rewritten, 0)),
                None => return Pin::new(&mut self.inner).poll_write(cx, buf),
            }
        }
        // Write the whole rewritten response, then report `buf` as written.
        let this = &mut *self;
        if let Some((bytes, sent)) = &mut this.pending {
            while *sent < bytes.len() {
                match Pin::new(&mut this.inner).poll_write(cx, &bytes[*sent..]) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(n)) => *sent += n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            }
        }
        this.pending = None;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::with_body;

    #[test]
    fn only_hyper_s_bare_error_heads_get_a_body() {
        let bare = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let rewritten = String::from_utf8(with_body(bare).unwrap()).unwrap();
        assert!(rewritten.starts_with("HTTP/1.1 431 "));
        assert!(rewritten.contains("\"code\":\"headers_too_large\""));
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 80\r\n\r\n";
        assert!(with_body(ours).is_none(), "a response with a body is left alone");
        assert!(with_body(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
    }
}
