//! Throwaway PostgreSQL clusters, for the experiments that compare MariaDB
//! with PostgreSQL on the same machine: made with the distribution's
//! `initdb` in a directory of their own, listening on 127.0.0.1 on a free
//! port and on a socket in that directory, never reading or touching a
//! system cluster. Dropping a [`PgSandbox`] stops the server and removes
//! its directory; the server is killed by the kernel if this process dies.
//!
//! PostgreSQL refuses to run as root: started by root, the cluster's files
//! belong to, and the server runs as, the `postgres` account the
//! distribution's package creates.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{bail, setup, Ctx, Result};

/// Where the distribution installs a PostgreSQL major version's programs.
pub fn bin_dir(major: u32) -> PathBuf {
    PathBuf::from(format!("/usr/lib/postgresql/{major}/bin"))
}

/// The newest PostgreSQL whose `initdb` and `postgres` are installed.
pub fn find_bin_dir() -> Result<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<u32>().ok()?, e.path().join("bin"))))
        .filter(|(_, b)| b.join("initdb").is_file() && b.join("postgres").is_file())
        .collect();
    found.sort();
    match found.pop() {
        Some((_, b)) => Ok(b),
        None => {
            bail!("no PostgreSQL server found in /usr/lib/postgresql; install it with `apt-get install postgresql-15`")
        }
    }
}

/// How a PostgreSQL sandbox is started.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Directory the cluster lives in (made, and removed when dropped).
    pub dir: PathBuf,
    /// Where `initdb` and `postgres` are. Default: [`find_bin_dir`].
    pub bin_dir: Option<PathBuf>,
    /// Server settings, `-c name=value` (`("synchronous_commit", "off")`).
    pub settings: Vec<(String, String)>,
    /// A password for the `postgres` role, and clients over TCP must give
    /// it (SCRAM-SHA-256); without one, every client is trusted.
    pub scram_password: Option<String>,
    pub ready_timeout: Duration,
}

impl PgOptions {
    pub fn new(dir: impl Into<PathBuf>) -> PgOptions {
        PgOptions {
            dir: dir.into(),
            bin_dir: None,
            settings: vec![],
            scram_password: None,
            ready_timeout: Duration::from_secs(60),
        }
    }
}

/// A running throwaway PostgreSQL server.
pub struct PgSandbox {
    pub dir: PathBuf,
    /// The directory holding the server's Unix socket.
    pub socket_dir: PathBuf,
    pub port: u16,
    pub pid: u32,
    /// `SELECT version()`.
    pub version: String,
    /// The role trusted over TCP (SCRAM is asked of every other).
    trusted_role: &'static str,
    child: Option<Child>,
}

/// Removes a directory when dropped, unless disarmed (a start that fails
/// leaves nothing behind).
struct DirGuard(Option<PathBuf>);

impl Drop for DirGuard {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            let _ = fs::remove_dir_all(d);
        }
    }
}

/// The role a SCRAM cluster trusts over TCP from 127.0.0.1.
const TRUSTED_ROLE: &str = "pileup_trusted";

/// The account the server runs as when we are root: (uid, gid).
fn run_as() -> Result<Option<(u32, u32)>> {
    if !nix::unistd::Uid::effective().is_root() {
        return Ok(None);
    }
    match nix::unistd::User::from_name("postgres") {
        Ok(Some(u)) => Ok(Some((u.uid.as_raw(), u.gid.as_raw()))),
        _ => bail!(
            "PostgreSQL will not run as root and there is no `postgres` account to run it as; install the postgresql package (which creates it) or run as another user"
        ),
    }
}

/// A PostgreSQL error's own message (the client shows a server's error
/// as "db error" alone).
fn text(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => d.message().to_string(),
        None => match std::error::Error::source(e) {
            Some(c) => format!("{e}: {c}"),
            None => e.to_string(),
        },
    }
}

fn chown_tree(dir: &Path, ids: Option<(u32, u32)>) -> Result<()> {
    if let Some((u, g)) = ids {
        std::os::unix::fs::chown(dir, Some(u), Some(g)).with_ctx(|| format!("chown {}", dir.display()))?;
    }
    Ok(())
}

fn as_user(cmd: &mut Command, ids: Option<(u32, u32)>) {
    if let Some((u, g)) = ids {
        cmd.uid(u).gid(g);
    }
}

impl PgSandbox {
    /// Make a cluster and start its server; returns once it answers.
    pub fn start(o: PgOptions) -> Result<PgSandbox> {
        let bin = match &o.bin_dir {
            Some(b) => b.clone(),
            None => find_bin_dir()?,
        };
        let ids = run_as()?;
        if o.dir.exists() {
            fs::remove_dir_all(&o.dir).with_ctx(|| format!("removing stale {}", o.dir.display()))?;
        }
        fs::create_dir_all(&o.dir).with_ctx(|| format!("creating {}", o.dir.display()))?;
        let mut guard = DirGuard(Some(o.dir.clone()));
        fs::set_permissions(&o.dir, fs::Permissions::from_mode(0o700))?;
        chown_tree(&o.dir, ids)?;
        let data = o.dir.join("data");
        let mut init = Command::new(bin.join("initdb"));
        init.arg("-D").arg(&data).args(["-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"]);
        let pwfile = o.dir.join("pw");
        match &o.scram_password {
            Some(pw) => {
                use std::io::Write;
                use std::os::unix::fs::OpenOptionsExt;
                let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&pwfile)?;
                f.write_all(pw.as_bytes())?;
                chown_tree(&pwfile, ids)?;
                init.arg(format!("--pwfile={}", pwfile.display()));
                init.args(["--auth-local=trust", "--auth-host=scram-sha-256"]);
            }
            None => {
                init.arg("--auth=trust");
            }
        }
        as_user(&mut init, ids);
        let out = init.stdin(Stdio::null()).output().ctx("running initdb")?;
        let _ = fs::remove_file(&pwfile);
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            bail!("initdb failed: {}", err.lines().last().unwrap_or("").trim());
        }
        if o.scram_password.is_some() {
            // First match wins: this role is trusted over TCP, every other
            // asked for its password.
            let hba = data.join("pg_hba.conf");
            let rest = fs::read_to_string(&hba).with_ctx(|| format!("reading {}", hba.display()))?;
            fs::write(&hba, format!("host all {TRUSTED_ROLE} 127.0.0.1/32 trust\n{rest}"))
                .with_ctx(|| format!("writing {}", hba.display()))?;
        }
        let mut last = None;
        for _ in 0..5 {
            let port = crate::free_port()?;
            let mut cmd = Command::new(bin.join("postgres"));
            cmd.arg("-D").arg(&data).arg("-p").arg(port.to_string()).arg("-k").arg(&o.dir);
            cmd.args(["-c", "listen_addresses=127.0.0.1", "-c", "max_connections=1100"]);
            for (k, v) in &o.settings {
                cmd.arg("-c").arg(format!("{k}={v}"));
            }
            as_user(&mut cmd, ids);
            let log = fs::File::create(o.dir.join("server.log"))?;
            chown_tree(&o.dir.join("server.log"), ids)?;
            cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
            let child = crate::spawn(cmd, true)?;
            let mut sb = PgSandbox {
                dir: o.dir.clone(),
                socket_dir: o.dir.clone(),
                port,
                pid: child.id(),
                version: String::new(),
                trusted_role: if o.scram_password.is_some() { TRUSTED_ROLE } else { "postgres" },
                child: Some(child),
            };
            match sb.wait_ready(o.ready_timeout) {
                Ok(()) => {
                    if o.scram_password.is_some() {
                        let mut c = sb.connect()?;
                        c.batch_execute(&format!("CREATE ROLE {TRUSTED_ROLE} LOGIN SUPERUSER"))
                            .map_err(|e| setup!("making the role trusted over TCP: {}", text(&e)))?;
                    }
                    // The sandbox removes its directory from now on.
                    guard.0 = None;
                    return Ok(sb);
                }
                Err(e) => {
                    let log = fs::read_to_string(o.dir.join("server.log")).unwrap_or_default();
                    sb.stop();
                    // The directory stays for the next port; the guard
                    // removes it if no port works.
                    sb.dir = PathBuf::new();
                    if log.contains("could not bind") || log.contains("Address already in use") {
                        last = Some(e);
                        continue;
                    }
                    let tail: Vec<&str> = log.lines().rev().take(6).collect::<Vec<_>>().into_iter().rev().collect();
                    bail!("PostgreSQL did not start: {e}\nlast lines of its log:\n{}", tail.join("\n"));
                }
            }
        }
        Err(last.unwrap_or_else(|| setup!("could not find a free port for PostgreSQL")))
    }

    /// A client over TCP as `postgres` (with the password when the cluster
    /// was made with one).
    pub fn config(&self, password: Option<&str>) -> postgres::Config {
        let mut c = postgres::Config::new();
        c.host("127.0.0.1").port(self.port).user("postgres").dbname("postgres");
        c.connect_timeout(Duration::from_secs(10));
        if let Some(p) = password {
            c.password(p);
        }
        c
    }

    /// A client over TCP that the cluster trusts (no password asked).
    pub fn trusted_tcp_config(&self) -> postgres::Config {
        let mut c = postgres::Config::new();
        c.host("127.0.0.1").port(self.port).user(self.trusted_role).dbname("postgres");
        c.connect_timeout(Duration::from_secs(10));
        c
    }

    /// A client over the Unix socket (trusted).
    pub fn socket_config(&self) -> postgres::Config {
        let mut c = postgres::Config::new();
        c.host_path(&self.socket_dir).port(self.port).user("postgres").dbname("postgres");
        c
    }

    pub fn connect(&self) -> Result<postgres::Client> {
        self.socket_config().connect(postgres::NoTls).map_err(|e| setup!("connecting to PostgreSQL: {}", text(&e)))
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let t0 = Instant::now();
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Some(st) = c.try_wait()? {
                    bail!("postgres exited during start-up ({st})");
                }
            }
            if let Ok(mut c) = self.connect() {
                if let Ok(row) = c.query_one("SELECT version()", &[]) {
                    self.version = row.get(0);
                    return Ok(());
                }
            }
            if t0.elapsed() > timeout {
                bail!("not accepting connections after {} s", timeout.as_secs());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Is the server still running?
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Stop the server (a fast shutdown, SIGKILL after 30 s).
    pub fn stop(&mut self) {
        if self.child.is_some() {
            // SIGINT is PostgreSQL's fast shutdown: sessions are ended.
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid as i32), nix::sys::signal::Signal::SIGINT);
            let _ = crate::stop_pid(self.pid, self.child.as_mut());
            self.child = None;
        }
    }
}

impl Drop for PgSandbox {
    fn drop(&mut self) {
        self.stop();
        if !self.dir.as_os_str().is_empty() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}
