//! A throwaway S3-compatible server on a loopback port — moto's
//! (`python3 -m moto.server`, from PyPI's `moto[server]`), which speaks S3's
//! REST wire format — for the artefact tests and the replica tests: S3
//! itself cannot run here. Not a way to store anything that matters.

use hone_config::ArtefactsConfig;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const START_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub struct LocalS3 {
    port: u16,
    child: Child,
}

impl Drop for LocalS3 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl LocalS3 {
    /// Whether moto's server can be started here.
    pub fn available() -> bool {
        Command::new("python3")
            .args(["-c", "import moto.server"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts a server and waits until it answers.
    pub fn start() -> Result<LocalS3, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| format!("cannot find a free port: {e}"))?;
        let child = Command::new("python3")
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start moto's S3 server (pip install 'moto[server]'): {e}"))?;
        let mut server = LocalS3 { port, child };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("moto's S3 server exited at start ({status})"));
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(format!("moto's S3 server did not listen on {port} within 30 s"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(server)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Creates `bucket` (an unsigned `PUT /bucket`, which moto accepts).
    pub fn create_bucket(&self, bucket: &str) -> Result<(), String> {
        let mut stream =
            TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| format!("cannot reach moto's server: {e}"))?;
        let request = format!(
            "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        );
        stream
            .write_all(request.as_bytes())
            .map_err(|e| format!("creating bucket {bucket}: {e}"))?;
        let mut answer = String::new();
        stream
            .read_to_string(&mut answer)
            .map_err(|e| format!("creating bucket {bucket}: {e}"))?;
        match answer.lines().next() {
            Some(status) if status.contains(" 200 ") => Ok(()),
            other => Err(format!("creating bucket {bucket}: {}", other.unwrap_or("no answer"))),
        }
    }

    /// An `[artefacts]` config publishing to `s3://<bucket>/<prefix>` here.
    pub fn config(&self, bucket: &str, prefix: &str, cache_dir: &Path) -> ArtefactsConfig {
        ArtefactsConfig {
            url: Some(format!("s3://{bucket}/{prefix}")),
            endpoint: Some(self.endpoint()),
            region: Some("us-east-1".to_owned()),
            allow_http: Some(true),
            access_key_id: Some("hone-test".to_owned()),
            secret_access_key: Some("hone-test-secret".to_owned()),
            cache_dir: cache_dir.to_path_buf(),
            memory_dir: cache_dir.with_file_name("memory"),
        }
    }

    /// The same as a TOML `[artefacts]` table.
    pub fn toml(&self, bucket: &str, prefix: &str) -> String {
        format!(
            "[artefacts]\nurl = \"s3://{bucket}/{prefix}\"\nendpoint = \"{}\"\nregion = \"us-east-1\"\nallow_http = true\naccess_key_id = \"hone-test\"\nsecret_access_key = \"hone-test-secret\"\n",
            self.endpoint()
        )
    }
}
