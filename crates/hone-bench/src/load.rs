//! An open-loop load generator over raw HTTP/1.1 keep-alive connections.
//!
//! Request `i` is due at `start + i / rate` whatever happened before it, so a
//! slow server cannot slow the load down. Its latency runs to the moment its
//! whole response is read, from the moment it was *due* when its connection
//! was still busy then with an earlier answer (latency correction, as wrk2
//! and oha do: the wait behind a stalled answer counts, so stalls are not
//! hidden by coordinated omission), and from the moment it was written when
//! the connection was free (so the timer's millisecond of lateness, the
//! generator's own, does not count). Requests are pre-encoded and responses
//! parsed minimally, so the generator costs little CPU.

use anyhow::{bail, Context, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CONNECTIONS: usize = 64;

pub struct Report {
    latencies_ms: Vec<f64>,
    pub ok: u64,
    pub errors: u64,
    elapsed: Duration,
}

impl Report {
    pub fn p(&self, q: f64) -> f64 {
        if self.latencies_ms.is_empty() {
            return f64::NAN;
        }
        let i = ((self.latencies_ms.len() as f64 - 1.0) * q).round() as usize;
        self.latencies_ms[i]
    }

    pub fn achieved_rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64()
    }
}

/// Reads one HTTP/1.1 response with a Content-Length; returns its status.
async fn read_response(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Result<u16> {
    buffer.clear();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = std::str::from_utf8(&buffer[..end])?;
            let status: u16 = head.get(9..12).context("short status line")?.parse()?;
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.split_once(':')
                        .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                        .map(|(_, v)| v.trim())
                })
                .context("no content-length")?
                .parse()?;
            while buffer.len() < end + 4 + length {
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    bail!("connection closed mid-body");
                }
                buffer.extend_from_slice(&chunk[..n]);
            }
            return Ok(status);
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            bail!("connection closed");
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// Open-loop load of `POST path` with `body` at `rate` per second.
pub async fn run(port: u16, path: &str, body: &[u8], rate: f64, seconds: f64) -> Result<Report> {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAuthorization: Bearer bench\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    let request = Arc::new(request);
    let total = (rate * seconds) as u64;
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now() + Duration::from_millis(50);
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..CONNECTIONS {
        let (request, next) = (request.clone(), next.clone());
        workers.spawn(async move {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
            stream.set_nodelay(true)?;
            let mut buffer = Vec::with_capacity(4096);
            let (mut latencies, mut errors) = (Vec::new(), 0u64);
            // When the connection's last answer was read.
            let mut free_since = start;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let due = start + Duration::from_secs_f64(i as f64 / rate);
                tokio::time::sleep_until(due.into()).await;
                let from = if free_since > due { due } else { Instant::now() };
                stream.write_all(&request).await?;
                let answer = read_response(&mut stream, &mut buffer).await;
                free_since = Instant::now();
                match answer {
                    Ok(200) => latencies.push(from.elapsed().as_secs_f64() * 1000.0),
                    Ok(_) => errors += 1,
                    Err(_) => {
                        errors += 1;
                        stream = TcpStream::connect(("127.0.0.1", port)).await?;
                        stream.set_nodelay(true)?;
                    }
                }
            }
            Ok::<_, anyhow::Error>((latencies, errors))
        });
    }
    let mut report = Report {
        latencies_ms: Vec::new(),
        ok: 0,
        errors: 0,
        elapsed: Duration::ZERO,
    };
    while let Some(worker) = workers.join_next().await {
        let (latencies, errors) = worker??;
        report.ok += latencies.len() as u64;
        report.latencies_ms.extend(latencies);
        report.errors += errors;
    }
    report.elapsed = start.elapsed();
    report.latencies_ms.sort_by(f64::total_cmp);
    Ok(report)
}

/// A plain GET, for reading `/metrics`.
pub async fn get(port: u16, path: &str) -> Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes())
        .await?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await?;
    Ok(text)
}
