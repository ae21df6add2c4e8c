//! Throwaway `mariadbd` servers for tests, the demo, benchmarks and users
//! (`pileup sandbox start|stop|list`).
//!
//! Each sandbox lives in its own directory under [`base_dir`] (datadir, socket,
//! pid file, error log, `sandbox.json`), listens on 127.0.0.1 on a port of its
//! own, and is started with `--no-defaults` so no system option file or system
//! server is ever read or touched. A pristine datadir is initialised once per
//! server binary and copied for each new sandbox, which makes a start take
//! about a second instead of several.
//!
//! A [`Sandbox`] value stops its server and removes its directory when dropped.
//! With [`Options::die_with_parent`] (the default) the server is also killed by
//! the kernel if the owning process dies, so a crashed test run leaves nothing
//! behind.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::{bail, setup, Ctx, Result};
use mysql::prelude::Queryable;
use serde::{Deserialize, Serialize};

pub use error::SandboxError;
pub use pileup_conn::ConnSpec;

mod crash;
mod error;
pub mod flush;
pub mod pg;
pub mod planted;
pub mod report;
pub mod throttle;

/// How to start a sandbox.
#[derive(Debug, Clone)]
pub struct Options {
    /// Name (directory name under the base dir). Default: `sb-<pid>-<n>`.
    pub name: Option<String>,
    /// Where sandboxes live. Default: [`base_dir`].
    pub base_dir: Option<PathBuf>,
    /// TCP port on 127.0.0.1. Default: a free one.
    pub port: Option<u16>,
    /// Extra server options, as `--key=value` (`("innodb_buffer_pool_size", "128M")`).
    pub cnf: Vec<(String, String)>,
    /// Server id (replication needs distinct ones). Default: the port.
    pub server_id: Option<u32>,
    /// Write a binary log (needed to be a replication source).
    pub binlog: bool,
    /// Make this sandbox a replica of that one (which must have `binlog`).
    pub replica_of: Option<Endpoint>,
    /// The server binary. Default: `mariadbd` found on PATH or in /usr/sbin.
    pub mariadbd: Option<PathBuf>,
    /// Kill the server if this process dies (true for tests; `sandbox start`
    /// from the command line turns it off so the server outlives the command).
    pub die_with_parent: bool,
    /// Seconds to wait for the server to accept connections.
    pub ready_timeout: Duration,
    /// Start on the datadir an earlier sandbox of this name left (if there is
    /// one) instead of a fresh copy, and leave the directory in place when
    /// stopped: for benchmarks whose data takes minutes to load.
    pub reuse: bool,
    /// A program the server is started through, given the server's path and
    /// arguments (it must exec the server, which keeps its process id): a
    /// benchmark's profiler that starts its target (heaptrack). The
    /// datadir is made without it.
    pub launcher: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            name: None,
            base_dir: None,
            port: None,
            cnf: Vec::new(),
            server_id: None,
            binlog: false,
            replica_of: None,
            mariadbd: None,
            die_with_parent: true,
            ready_timeout: Duration::from_secs(60),
            reuse: false,
            launcher: None,
        }
    }
}

/// Where a running sandbox can be reached (what `sandbox.json` records).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Endpoint {
    pub name: String,
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub port: u16,
    pub pid: u32,
    pub server_id: u32,
    pub binlog: bool,
}

impl Endpoint {
    /// Connection spec for the sandbox's root account over its socket.
    pub fn conn_spec(&self) -> ConnSpec {
        ConnSpec {
            socket: Some(self.socket.clone()),
            host: None,
            port: self.port,
            user: Some("root".into()),
            password: None,
            database: None,
            timeout: Duration::from_secs(30),
            query_timeout: None,
            files_read: vec![],
            files_skipped: vec![],
        }
    }

    /// The server processes that use this sandbox's directory: the one
    /// its record names, and any other `mariadbd`/`mysqld` whose command
    /// line names a path inside the directory (a server restarted by hand,
    /// whose pid the record does not know).
    pub fn server_pids(&self) -> Vec<u32> {
        let inside = format!("{}/", self.dir.to_string_lossy().trim_end_matches('/'));
        let mut out = vec![];
        let Ok(rd) = fs::read_dir("/proc") else { return out };
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            let server = fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| {
                let n = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                n.starts_with("mariadbd") || n.starts_with("mysqld")
            });
            // Arguments are NUL-separated: each path argument ends there.
            let ours = server
                && fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.split(|b| *b == 0).any(|a| String::from_utf8_lossy(a).contains(&inside)));
            if ours && proc_state(pid) != Some('Z') {
                out.push(pid);
            }
        }
        // The recorded one first.
        out.sort_by_key(|p| (*p != self.pid, *p));
        out
    }

    /// Is a server using this sandbox's directory?
    pub fn is_running(&self) -> bool {
        !self.server_pids().is_empty()
    }
}

/// A running throwaway server. Dropping it stops the server and removes its files.
pub struct Sandbox {
    pub endpoint: Endpoint,
    child: Option<Child>,
    keep: bool,
    /// How the server was started, for [`Sandbox::restart`].
    launch: Option<(PathBuf, Vec<std::ffi::OsString>, bool, Duration)>,
}

/// Default base directory: `$PILEUP_SANDBOX_DIR`, else `$TMPDIR/pileup-sandboxes`.
pub fn base_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PILEUP_SANDBOX_DIR") {
        return PathBuf::from(d);
    }
    std::env::temp_dir().join("pileup-sandboxes")
}

/// Where a server binary may be, in the order [`find_mariadbd`] looks.
fn server_candidates() -> Vec<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.extend(["/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin"].map(PathBuf::from));
    dirs.iter().flat_map(|d| ["mariadbd", "mysqld"].map(|n| d.join(n))).collect()
}

/// Find the server binary.
pub fn find_mariadbd() -> Result<PathBuf> {
    if let Some(p) = server_candidates().into_iter().find(|p| p.is_file()) {
        return Ok(p);
    }
    bail!("no mariadbd found on PATH or in /usr/sbin; install it with `apt-get install mariadb-server-core`")
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

impl Sandbox {
    /// Start a server and wait until it accepts connections.
    pub fn start(opts: Options) -> Result<Sandbox> {
        let mariadbd = match &opts.mariadbd {
            Some(p) => p.clone(),
            None => find_mariadbd()?,
        };
        let base = opts.base_dir.clone().unwrap_or_else(base_dir);
        fs::create_dir_all(&base).with_ctx(|| format!("creating {}", base.display()))?;
        let name = opts
            .name
            .clone()
            .unwrap_or_else(|| format!("sb-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::SeqCst)));
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            bail!("sandbox name {name:?} must be a plain file name");
        }
        let dir = base.join(&name);
        if let Some(old) = read_endpoint(&dir) {
            if old.is_running() {
                bail!(
                    "sandbox {name} is already running (pid {}); stop it first with `pileup sandbox stop {name}`",
                    old.pid
                );
            }
        }
        let reusing = opts.reuse && dir.join("data").join("mysql").is_dir();
        if dir.exists() && !reusing {
            fs::remove_dir_all(&dir).with_ctx(|| format!("removing stale {}", dir.display()))?;
        }
        fs::create_dir_all(dir.join("tmp"))?;
        let socket = dir.join("mysql.sock");
        if socket.as_os_str().len() > 100 {
            bail!("socket path {} is too long for a Unix socket; use a shorter PILEUP_SANDBOX_DIR", socket.display());
        }
        if !reusing {
            let template = template_datadir(&mariadbd, &template_dir())?;
            copy_dir(&template, &dir.join("data")).ctx("copying the template datadir")?;
        }

        let mut last_err = None;
        for _attempt in 0..5 {
            let port = match opts.port {
                Some(p) => p,
                None => free_port()?,
            };
            let server_id = opts.server_id.unwrap_or(port as u32);
            let mut cmd = server_command(&mariadbd, &dir, &socket, port, server_id, &opts);
            cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
            let launch = (
                mariadbd.clone(),
                cmd.get_args().map(|a| a.to_os_string()).collect::<Vec<_>>(),
                opts.die_with_parent,
                opts.ready_timeout,
            );
            let child = spawn(cmd, opts.die_with_parent)?;
            let endpoint = Endpoint {
                name: name.clone(),
                dir: dir.clone(),
                socket: socket.clone(),
                port,
                pid: child.id(),
                server_id,
                binlog: opts.binlog,
            };
            let mut sb = Sandbox { endpoint, child: Some(child), keep: opts.reuse, launch: Some(launch) };
            match sb.wait_ready(opts.ready_timeout) {
                Ok(()) => {
                    write_endpoint(&sb.endpoint)?;
                    if opts.binlog {
                        sb.sql("CREATE USER IF NOT EXISTS 'repl'@'127.0.0.1'; GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'repl'@'127.0.0.1'")?;
                    }
                    if let Some(src) = &opts.replica_of {
                        sb.sql(&format!(
                            "STOP SLAVE; CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={}, MASTER_USER='repl', MASTER_USE_GTID=slave_pos; START SLAVE",
                            src.port
                        ))?;
                    }
                    return Ok(sb);
                }
                Err(e) => {
                    let log = fs::read_to_string(dir.join("error.log")).unwrap_or_default();
                    let port_clash = log.contains("Address already in use") || log.contains("Can't start server: Bind");
                    sb.keep = true; // keep the dir for the next attempt / the error message
                    sb.kill();
                    if port_clash && opts.port.is_none() {
                        last_err = Some(e);
                        continue;
                    }
                    let tail: Vec<&str> = log.lines().rev().take(8).collect();
                    let tail: Vec<&str> = tail.into_iter().rev().collect();
                    if !opts.reuse {
                        let _ = fs::remove_dir_all(&dir);
                    }
                    bail!("sandbox {name} did not start: {e}\nlast lines of its error log:\n{}", tail.join("\n"));
                }
            }
        }
        if !opts.reuse {
            let _ = fs::remove_dir_all(&dir);
        }
        Err(last_err.unwrap_or_else(|| setup!("could not find a free port")))
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let t0 = Instant::now();
        let spec = self.endpoint.conn_spec();
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Some(st) = c.try_wait()? {
                    bail!("mariadbd exited during start-up ({st})");
                }
            }
            if self.endpoint.socket.exists() {
                if let Ok(mut c) = spec.connect() {
                    if c.query_drop("DO 1").is_ok() {
                        return Ok(());
                    }
                }
            }
            if t0.elapsed() > timeout {
                bail!("not accepting connections after {:?}", timeout);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stop the server cleanly and start it again on the same datadir,
    /// socket and port (a new pid). Replication settings persist in the datadir.
    pub fn restart(&mut self) -> Result<()> {
        self.restart_after(std::time::Duration::ZERO)
    }

    /// Stop the server, leave it down for `down`, and start it again.
    pub fn restart_after(&mut self, down: std::time::Duration) -> Result<()> {
        if self.launch.is_none() {
            bail!("this sandbox was not started here");
        }
        stop_pid(self.endpoint.pid, self.child.as_mut())?;
        self.child = None;
        std::thread::sleep(down);
        self.start_again()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.endpoint.pid
    }

    pub fn conn_spec(&self) -> ConnSpec {
        self.endpoint.conn_spec()
    }

    /// A new root connection over the socket.
    pub fn connect(&self) -> Result<mysql::Conn> {
        Ok(self.conn_spec().connect()?)
    }

    /// Wait until this replica's IO thread has received everything
    /// `primary` has binlogged so far (by GTID, or by file and position
    /// for a replica that does not replicate by GTID).
    pub fn wait_received(&self, primary: &Sandbox, within: Duration) -> Result<()> {
        let mut p = primary.connect()?;
        let pos: String = p.query_first("SELECT @@gtid_binlog_pos")?.unwrap_or_default();
        let (file, offset): (String, u64) = p
            .query_first::<mysql::Row, _>("SHOW MASTER STATUS")?
            .map(|r| (r.get(0).unwrap_or_default(), r.get(1).unwrap_or_default()))
            .ctx("the primary writes no binlog")?;
        let t0 = Instant::now();
        let mut c = self.connect()?;
        loop {
            let st: mysql::Row = c.query_first("SHOW SLAVE STATUS")?.ctx("not a replica")?;
            let by_gtid = st.get::<Option<String>, _>("Gtid_IO_Pos").flatten().as_deref() == Some(pos.as_str());
            let read: (Option<String>, Option<u64>) = (st.get("Master_Log_File"), st.get("Read_Master_Log_Pos"));
            if by_gtid || read == (Some(file.clone()), Some(offset)) {
                return Ok(());
            }
            if t0.elapsed() > within {
                bail!("replica {}: the IO thread did not receive {pos} within {within:?}", self.endpoint.name);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Wait until this replica has applied everything `primary` has
    /// binlogged so far; returns how long that took. Waits in one-second
    /// steps: every sandbox connection has a statement time limit.
    pub fn wait_caught_up(&self, primary: &Sandbox, within: Duration) -> Result<Duration> {
        let t0 = Instant::now();
        let pos: String = primary.connect()?.query_first("SELECT @@gtid_binlog_pos")?.unwrap_or_default();
        let mut c = self.connect()?;
        loop {
            let r: Option<i64> = c.query_first(format!("SELECT MASTER_GTID_WAIT('{pos}', 1)"))?;
            if r == Some(0) {
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > within {
                bail!("replica {} did not apply {pos} within {within:?}", self.endpoint.name);
            }
        }
    }

    /// Run statements (separated by `;`) and discard results.
    pub fn sql(&self, statements: &str) -> Result<()> {
        let mut c = self.connect()?;
        c.query_drop(statements).with_ctx(|| format!("running {statements:?}"))?;
        Ok(())
    }

    /// Leave the server running (and its directory) when this value is dropped.
    pub fn keep(mut self) -> Endpoint {
        self.keep = true;
        if let Some(c) = self.child.take() {
            std::mem::forget(c);
        }
        self.endpoint.clone()
    }

    /// Stop the server (SIGTERM, then SIGKILL after 30 s) and remove its files.
    pub fn stop(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        stop_pid(self.endpoint.pid, self.child.as_mut())?;
        self.child = None;
        if !self.keep {
            let _ = fs::remove_dir_all(&self.endpoint.dir);
        }
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.shutdown();
        }
    }
}

/// Stop a server by pid: SIGTERM, wait, SIGKILL after 30 s.
fn stop_pid(pid: u32, child: Option<&mut Child>) -> Result<()> {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let p = Pid::from_raw(pid as i32);
    let _ = kill(p, Signal::SIGTERM);
    let t0 = Instant::now();
    let mut child = child;
    loop {
        let gone = match child.as_deref_mut() {
            Some(c) => c.try_wait()?.is_some(),
            None => gone(pid),
        };
        if gone {
            return Ok(());
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let _ = kill(p, Signal::SIGKILL);
            if let Some(c) = child.as_deref_mut() {
                let _ = c.wait();
            }
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a process has exited: no longer there, or a zombie its parent
/// has not reaped.
fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists() || proc_state(pid) == Some('Z')
}

fn proc_state(pid: u32) -> Option<char> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Stop a sandbox recorded on disk (used by `pileup sandbox stop NAME`).
pub fn stop_by_name(name: &str, base: Option<&Path>) -> Result<()> {
    let base = base.map(Path::to_path_buf).unwrap_or_else(base_dir);
    let dir = base.join(name);
    let ep = read_endpoint(&dir)
        .ok_or_else(|| setup!("no sandbox named {name} under {} (see `pileup sandbox list`)", base.display()))?;
    // Every server on the directory, whatever the record's pid says.
    for pid in ep.server_pids() {
        stop_pid(pid, None)?;
    }
    // A killed process is gone a moment after the signal.
    let t0 = Instant::now();
    while !ep.server_pids().is_empty() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    if let Some(pid) = ep.server_pids().first() {
        return Err(setup!(
            "sandbox {name}: its server (pid {pid}) is still running after SIGKILL; its directory {} is kept",
            dir.display()
        ));
    }
    fs::remove_dir_all(&dir).with_ctx(|| format!("removing {}", dir.display()))?;
    Ok(())
}

/// All sandboxes recorded under the base dir, with whether each is running.
pub fn list(base: Option<&Path>) -> Result<Vec<(Endpoint, bool)>> {
    let base = base.map(Path::to_path_buf).unwrap_or_else(base_dir);
    let mut out = Vec::new();
    let rd = match fs::read_dir(&base) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_ctx(|| format!("reading {}", base.display())),
    };
    for e in rd.flatten() {
        if let Some(mut ep) = read_endpoint(&e.path()) {
            // The process that holds the directory, when the record's is gone.
            let pids = ep.server_pids();
            if let Some(p) = pids.first() {
                ep.pid = *p;
            }
            out.push((ep, !pids.is_empty()));
        }
    }
    out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    Ok(out)
}

/// The sandbox whose server uses this datadir (as `SELECT @@datadir`
/// gives it), if it is one of pileup's on this host.
pub fn sandbox_of_datadir(datadir: &Path) -> Option<Endpoint> {
    let dir = datadir.components().as_path().parent()?;
    read_endpoint(dir).filter(|e| e.dir.join("data") == datadir.components().as_path())
}

fn read_endpoint(dir: &Path) -> Option<Endpoint> {
    let b = fs::read(dir.join("sandbox.json")).ok()?;
    serde_json::from_slice(&b).ok()
}

fn write_endpoint(ep: &Endpoint) -> Result<()> {
    let p = ep.dir.join("sandbox.json");
    let mut f = fs::File::create(&p)?;
    let json = serde_json::to_string_pretty(ep).map_err(|e| setup!("describing the sandbox: {e}"))?;
    f.write_all(json.as_bytes())?;
    Ok(())
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").ctx("finding a free port")?;
    Ok(l.local_addr()?.port())
}

/// Spawn the server. With `die_with_parent`, the child gets PR_SET_PDEATHSIG
/// and is spawned from one long-lived thread: the kernel sends the signal
/// when the *thread* that forked exits, so forking from a short-lived test
/// thread would kill the server early.
fn spawn(mut cmd: Command, die_with_parent: bool) -> Result<Child> {
    if !die_with_parent {
        use std::os::unix::process::CommandExt;
        // New session: a Ctrl-C in the user's terminal must not reach the server.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        return cmd.spawn().ctx("starting mariadbd");
    }
    type Req = (Command, mpsc::Sender<std::io::Result<Child>>);
    static KEEPER: OnceLock<Mutex<mpsc::Sender<Req>>> = OnceLock::new();
    let tx = KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Req>();
        std::thread::Builder::new()
            .name("sandbox-keeper".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    use std::os::unix::process::CommandExt;
                    unsafe {
                        cmd.pre_exec(|| {
                            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                            Ok(())
                        });
                    }
                    let _ = reply.send(cmd.spawn());
                }
                // The channel's sender lives in a static and is never dropped,
                // so this thread lives as long as the process.
            })
            .expect("spawning the sandbox keeper thread");
        Mutex::new(tx)
    });
    let (rtx, rrx) = mpsc::channel();
    tx.lock().unwrap().send((cmd, rtx)).map_err(|_| setup!("sandbox keeper thread is gone"))?;
    rrx.recv()?.ctx("starting mariadbd")
}

/// Where pristine datadirs are cached: one place for every sandbox base
/// directory, so test runs with their own base directories share one
/// template instead of leaving one behind each.
fn template_dir() -> PathBuf {
    std::env::var_os("PILEUP_TEMPLATE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("pileup-sandbox-templates"))
}

/// The command line a sandbox's server starts with: its own datadir,
/// socket, port and logs, small buffers, and what `opts` asks for.
fn server_command(mariadbd: &Path, dir: &Path, socket: &Path, port: u16, server_id: u32, opts: &Options) -> Command {
    let mut cmd = match &opts.launcher {
        Some(l) => {
            let mut c = Command::new(l);
            c.arg(mariadbd);
            c
        }
        None => Command::new(mariadbd),
    };
    cmd.arg("--no-defaults")
        .arg(format!("--datadir={}", dir.join("data").display()))
        .arg(format!("--socket={}", socket.display()))
        .arg(format!("--port={port}"))
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--pid-file={}", dir.join("mysqld.pid").display()))
        .arg(format!("--log-error={}", dir.join("error.log").display()))
        .arg(format!("--tmpdir={}", dir.join("tmp").display()))
        .arg(format!("--secure-file-priv={}", dir.join("tmp").display()))
        .arg(format!("--server-id={server_id}"))
        .arg("--skip-name-resolve")
        .arg("--max-connections=3000")
        .arg("--innodb-buffer-pool-size=128M")
        .arg("--innodb-log-file-size=64M")
        .arg("--innodb-flush-log-at-trx-commit=2")
        .arg("--skip-log-bin");
    if Path::new("/usr/share/mariadb").is_dir() {
        cmd.arg("--lc-messages-dir=/usr/share/mariadb");
    }
    if opts.binlog {
        cmd.arg(format!("--log-bin={}", dir.join("data").join("binlog").display()));
        cmd.arg("--binlog-format=ROW");
    }
    if opts.replica_of.is_some() {
        cmd.arg(format!("--relay-log={}", dir.join("data").join("relay").display()));
        cmd.arg("--skip-slave-start");
    }
    if nix::unistd::geteuid().is_root() {
        cmd.arg("--user=root");
    }
    for (k, v) in &opts.cnf {
        cmd.arg(format!("--{}={v}", k.trim_start_matches('-')));
    }
    cmd
}

/// Initialise (once per server binary) a pristine datadir to copy from,
/// removing the templates of server binaries that are no longer installed.
fn template_datadir(mariadbd: &Path, base: &Path) -> Result<PathBuf> {
    let meta = fs::metadata(mariadbd).with_ctx(|| format!("reading {}", mariadbd.display()))?;
    let mtime = meta.modified()?.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let name = format!(".template-{}-{}", meta.len(), mtime);
    let tdir = base.join(&name);
    if tdir.join("ready").exists() {
        return Ok(tdir.join("data"));
    }
    fs::create_dir_all(base).with_ctx(|| format!("creating {}", base.display()))?;
    // Serialise initialisation across processes with a lock file.
    let lock = fs::OpenOptions::new().create(true).write(true).truncate(false).open(base.join(".template.lock"))?;
    let _guard = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| setup!("locking template: {e}"))?;
    if tdir.join("ready").exists() {
        return Ok(tdir.join("data"));
    }
    // Templates of other binaries: a server upgrade leaves one; 80 MB each.
    if let Ok(rd) = fs::read_dir(base) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with(".template-") && n != name && !template_in_use(&e.path(), &n) {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
    let _ = fs::remove_dir_all(&tdir);
    fs::create_dir_all(&tdir)?;
    let install = find_install_db(mariadbd)?;
    let mut cmd = Command::new(&install);
    cmd.arg("--no-defaults")
        .arg(format!("--datadir={}", tdir.join("data").display()))
        .arg("--auth-root-authentication-method=normal")
        .arg("--skip-test-db")
        .arg("--innodb-log-file-size=64M");
    if nix::unistd::geteuid().is_root() {
        cmd.arg("--user=root");
    }
    // A server outside /usr/sbin: point the script at its installation tree.
    if mariadbd.parent() != Some(Path::new("/usr/sbin")) {
        if let Some(root) = mariadbd.parent().and_then(Path::parent) {
            cmd.arg(format!("--basedir={}", root.display()));
        }
    }
    let out = cmd.output().with_ctx(|| format!("running {}", install.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}{}",
            install.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    fs::write(tdir.join("ready"), b"")?;
    Ok(tdir.join("data"))
}

/// Whether a template named `.template-LEN-MTIME` may still be wanted: its
/// server binary is on this machine, or it was made within the last day (a
/// server started from an explicit path).
fn template_in_use(dir: &Path, name: &str) -> bool {
    let recent = fs::metadata(dir)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_none_or(|age| age < Duration::from_secs(86_400));
    recent
        || server_candidates().iter().filter_map(|c| fs::metadata(c).ok()).any(|m| {
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs())
                .unwrap_or(0);
            name == format!(".template-{}-{}", m.len(), mtime)
        })
}

fn find_install_db(mariadbd: &Path) -> Result<PathBuf> {
    let mut cands = vec![];
    if let Some(d) = mariadbd.parent() {
        cands.push(d.join("mariadb-install-db"));
        if let Some(p) = d.parent() {
            cands.push(p.join("bin/mariadb-install-db"));
            cands.push(p.join("scripts/mariadb-install-db"));
        }
    }
    cands.push("/usr/bin/mariadb-install-db".into());
    cands.push("/usr/bin/mysql_install_db".into());
    cands
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| setup!("mariadb-install-db not found; install it with `apt-get install mariadb-server-core`"))
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to)?;
    for e in fs::read_dir(from)? {
        let e = e?;
        let ty = e.file_type()?;
        let dst = to.join(e.file_name());
        if ty.is_dir() {
            copy_dir(&e.path(), &dst)?;
        } else if ty.is_file() {
            fs::copy(e.path(), &dst)?;
            let mode = e.metadata()?.permissions().mode();
            fs::set_permissions(&dst, fs::Permissions::from_mode(mode))?;
        }
    }
    Ok(())
}
