//! A private PostgreSQL server in a directory, on a loopback port, started
//! from the binaries of the operating system's packages (Debian's
//! `postgresql`): what the store's tests, the replica tests and `hone bench
//! store` run against. Not a way to run production databases.
//!
//! Run as root, the server runs as the `postgres` user (PostgreSQL refuses
//! root); the directory is handed to that user.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a start may take before it is called failed.
const START_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum LocalPostgresError {
    /// No PostgreSQL server binaries here (`HONE_POSTGRES_BIN`, Debian's
    /// `/usr/lib/postgresql/*/bin`, or `initdb` on the `PATH`).
    #[error("no PostgreSQL server binaries found (install Debian's `postgresql`, or set HONE_POSTGRES_BIN to the directory holding initdb and postgres)")]
    NotInstalled,
    #[error("{what}: {message}")]
    Failed { what: String, message: String },
}

fn failed(what: &str, message: impl std::fmt::Display) -> LocalPostgresError {
    LocalPostgresError::Failed {
        what: what.to_owned(),
        message: message.to_string(),
    }
}

/// A server in `dir` (its data in `dir/data`, its socket and log in `dir`).
#[derive(Debug)]
pub struct LocalPostgres {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    /// `(uid, gid)` the server runs as, when this process is root.
    user: Option<(u32, u32)>,
    /// `-c name=value` settings the server starts with.
    settings: &'static [&'static str],
    child: Option<Child>,
}

/// A throwaway server for tests: nothing is fsynced (a crash of the machine
/// may lose or corrupt it; a crash of PostgreSQL may not).
const FAST: &[&str] = &["fsync=off", "full_page_writes=off"];

/// A throwaway server that also speaks TLS with the certificate
/// [`LocalPostgres::create_tls`] makes (paths relative to the data directory).
const FAST_TLS: &[&str] = &[
    "fsync=off",
    "full_page_writes=off",
    "ssl=on",
    "ssl_cert_file=server.crt",
    "ssl_key_file=server.key",
];

/// For benchmarks: fsynced and crash-safe, but a commit does not wait for
/// its fsync — the durability class of SQLite's `synchronous = NORMAL`.
const DURABLE: &[&str] = &["synchronous_commit=off"];

impl Drop for LocalPostgres {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The directory with `initdb` and `postgres`, if PostgreSQL is installed.
pub fn server_binaries() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("HONE_POSTGRES_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path).find(|dir| dir.join("initdb").exists() && dir.join("postgres").exists())
    })
}

/// The uid and gid of `name` in `/etc/passwd`.
fn system_user(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&name) && fields.len() > 3)
            .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
            .flatten()
    })
}

fn free_port() -> Result<u16, LocalPostgresError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| failed("cannot find a free port", e))?;
    Ok(listener
        .local_addr()
        .map_err(|e| failed("cannot find a free port", e))?
        .port())
}

impl LocalPostgres {
    /// Creates a cluster in `dir` (which must be empty or absent) and starts
    /// it on a free loopback port. Superuser `hone`, no password (trust on
    /// loopback only).
    pub fn create(dir: &Path) -> Result<Self, LocalPostgresError> {
        Self::create_with(dir, FAST)
    }

    /// As [`LocalPostgres::create`], durable (for benchmarks).
    pub fn create_durable(dir: &Path) -> Result<Self, LocalPostgresError> {
        Self::create_with(dir, DURABLE)
    }

    /// Starts the durable cluster an earlier [`LocalPostgres::create_durable`]
    /// left in `dir`, on a free port.
    pub fn open_durable(dir: &Path) -> Result<Self, LocalPostgresError> {
        let mut server = Self::new(dir, DURABLE)?;
        server.start()?;
        Ok(server)
    }

    fn new(dir: &Path, settings: &'static [&'static str]) -> Result<Self, LocalPostgresError> {
        let bin = server_binaries().ok_or(LocalPostgresError::NotInstalled)?;
        let user = if rustix::process::geteuid().is_root() {
            Some(system_user("postgres").ok_or_else(|| {
                failed(
                    "running as root",
                    "PostgreSQL will not run as root, and there is no `postgres` user to run it as",
                )
            })?)
        } else {
            None
        };
        std::fs::create_dir_all(dir).map_err(|e| failed("cannot create the server's directory", e))?;
        if user.is_some() {
            // The server's user must be able to reach its directory.
            use std::os::unix::fs::PermissionsExt;
            let dir = dir
                .canonicalize()
                .map_err(|e| failed("cannot resolve the server's directory", e))?;
            for parent in dir.ancestors().skip(1) {
                let mode = std::fs::metadata(parent).map(|m| m.permissions().mode()).unwrap_or(0);
                if mode & 0o001 == 0 {
                    return Err(failed(
                        "the postgres user cannot reach the server's directory",
                        format!(
                            "{} is not searchable by others (chmod o+x it, or put the server elsewhere)",
                            parent.display()
                        ),
                    ));
                }
            }
        }
        let server = LocalPostgres {
            bin,
            dir: dir.to_owned(),
            port: free_port()?,
            user,
            settings,
            child: None,
        };
        server.hand_over(dir)?;
        Ok(server)
    }

    /// As [`LocalPostgres::create`], also accepting TLS connections with a
    /// certificate for `127.0.0.1` signed by a CA made here
    /// ([`LocalPostgres::ca_file`]), by the `openssl` command.
    pub fn create_tls(dir: &Path) -> Result<Self, LocalPostgresError> {
        let mut server = Self::new(dir, FAST_TLS)?;
        server.init()?;
        server.make_certificates()?;
        server.start()?;
        Ok(server)
    }

    /// The CA that signed a [`LocalPostgres::create_tls`] server's certificate (PEM).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    fn make_certificates(&self) -> Result<(), LocalPostgresError> {
        let dir = &self.dir;
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
        )
        .map_err(|e| failed("cannot write the certificate settings", e))?;
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        let steps: [Vec<&str>; 3] = [
            [
                &["req", "-x509"][..],
                &ec,
                &[
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.crt",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=hone test CA",
                ],
            ]
            .concat(),
            [
                &["req"][..],
                &ec,
                &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"],
            ]
            .concat(),
            vec![
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.crt",
                "-days",
                "2",
                "-extfile",
                "server.ext",
            ],
        ];
        for args in steps {
            let out = Command::new("openssl")
                .args(&args)
                .current_dir(dir)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| failed("cannot run openssl (Debian's `openssl`)", e))?;
            if !out.status.success() {
                return Err(failed("openssl failed", String::from_utf8_lossy(&out.stderr)));
            }
        }
        for file in ["server.crt", "server.key"] {
            let target = dir.join("data").join(file);
            std::fs::copy(dir.join(file), &target).map_err(|e| failed("cannot install the certificate", e))?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| failed("cannot install the certificate", e))?;
            self.hand_over(&target)?;
        }
        Ok(())
    }

    fn create_with(dir: &Path, settings: &'static [&'static str]) -> Result<Self, LocalPostgresError> {
        let mut server = Self::new(dir, settings)?;
        server.init()?;
        server.start()?;
        Ok(server)
    }

    fn init(&self) -> Result<(), LocalPostgresError> {
        let dir = &self.dir;
        let mut initdb = self.command("initdb");
        initdb.arg("-D").arg(dir.join("data")).args([
            "-U",
            "hone",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        ]);
        let out = initdb.output().map_err(|e| failed("cannot run initdb", e))?;
        if !out.status.success() {
            return Err(failed("initdb failed", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(())
    }

    /// Gives `path` to the server's user when running as root.
    fn hand_over(&self, path: &Path) -> Result<(), LocalPostgresError> {
        if let Some((uid, gid)) = self.user {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .map_err(|e| failed("cannot hand the server's directory to the postgres user", e))?;
        }
        Ok(())
    }

    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(self.bin.join(program));
        command.stdin(Stdio::null()).current_dir(&self.dir);
        if let Some((uid, gid)) = self.user {
            use std::os::unix::process::CommandExt;
            command.uid(uid).gid(gid).env("HOME", &self.dir);
        }
        command
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db` on this server.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://hone@127.0.0.1:{}/{db}", self.port)
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Starts the server (again) and waits until it accepts connections.
    pub fn start(&mut self) -> Result<(), LocalPostgresError> {
        if self.is_running() {
            return Ok(());
        }
        let log_path = self.dir.join("postgres.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| failed("cannot open the server log", e))?;
        self.hand_over(&log_path)?;
        let err = log.try_clone().map_err(|e| failed("cannot open the server log", e))?;
        let child = self
            .command("postgres")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-p", &self.port.to_string(), "-h", "127.0.0.1", "-k"])
            .arg(&self.dir)
            .args(["-c", "max_connections=200"])
            .args(self.settings.iter().flat_map(|setting| ["-c", setting]))
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| failed("cannot start postgres", e))?;
        self.child = Some(child);
        let started = Instant::now();
        loop {
            if !self.is_running() {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Err(failed("postgres exited while starting", log));
            }
            if self.execute("postgres", "SELECT 1").is_ok() {
                return Ok(());
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(failed("postgres did not start in time", log_path.display()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server cleanly (a fast shutdown: sessions are ended).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(pid) = i32::try_from(child.id()) {
                if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
                }
            }
            let _ = child.wait();
        }
    }

    /// Kills the server as a crash would (`kill -9`); the next start recovers.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Runs `sql` in database `db` as the superuser.
    pub fn execute(&self, db: &str, sql: &str) -> Result<(), LocalPostgresError> {
        execute_at(&self.url(db), sql)
    }

    /// Creates a new empty database and returns its URL.
    pub fn create_database(&self, name: &str) -> Result<String, LocalPostgresError> {
        self.execute("postgres", &format!("CREATE DATABASE \"{name}\""))?;
        Ok(self.url(name))
    }
}

/// Runs `sql` on the database at `url`, on a connection of its own (and a
/// thread of its own, so it may be called from async code too).
pub fn execute_at(url: &str, sql: &str) -> Result<(), LocalPostgresError> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| failed("cannot start a runtime", e))?;
                runtime.block_on(async move {
                    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                        .await
                        .map_err(|e| failed("cannot connect", super::describe(&e)))?;
                    // The connection's driver ends once the client is dropped.
                    let work = async move {
                        client
                            .batch_execute(sql)
                            .await
                            .map_err(|e| failed("SQL failed", super::describe(&e)))
                    };
                    let (result, _) = tokio::join!(work, connection);
                    result
                })
            })
            .join()
            .map_err(|_| failed("SQL failed", "the worker thread panicked"))?
    })
}
