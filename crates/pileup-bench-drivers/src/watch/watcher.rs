//! The watchers under test: starting one (`pileup watch` or pt-stalk),
//! what CPU it used, and stopping it with what it forked.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use pileup_sandbox::Sandbox;

/// sysbench's connection and table options for the server at `sock`.
pub(crate) fn sysbench_args(sock: &str) -> Vec<String> {
    vec![
        "--db-driver=mysql".into(),
        format!("--mysql-socket={sock}"),
        "--mysql-user=root".into(),
        "--tables=4".into(),
        "--table-size=10000".into(),
    ]
}

/// Start the watcher `kind` on `sb`, writing into `dir`, and give it 2 s to
/// start (no watcher for "none").
pub(crate) fn start_watcher(kind: &str, pileup: &str, sb: &Sandbox, dir: &Path) -> Result<Option<Child>> {
    let sock = sb.endpoint.socket.to_string_lossy().into_owned();
    let pid = sb.pid().to_string();
    std::fs::create_dir_all(dir)?;
    let c = match kind {
        "none" => return Ok(None),
        "pileup 1s" | "pileup 1s, no scan" | "pileup 100ms" => {
            let mut c = Command::new(pileup);
            c.args(["watch", "-S", &sock, "-u", "root", "--pid", &pid, "--data-dir", dir.to_str().unwrap()])
                .args(["--interval", if kind == "pileup 100ms" { "100ms" } else { "1s" }])
                .args(if kind.ends_with("no scan") { &["--scan-interval", "0"][..] } else { &[][..] })
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // PILEUP_BENCH_LOG keeps each watcher's debug log beside its captures.
            if std::env::var_os("PILEUP_BENCH_LOG").is_some() {
                c.arg("-vv").stderr(std::fs::File::create(dir.join("watch.log"))?);
            }
            c.spawn()?
        }
        "pt-stalk" | "pt-stalk gdb" => {
            let mut c = Command::new("pt-stalk");
            c.args([
                "--socket",
                &sock,
                "--user",
                "root",
                "--dest",
                dir.to_str().unwrap(),
                "--log",
                dir.join("pt-stalk.log").to_str().unwrap(),
            ]);
            c.args(["--pid", dir.join("pt-stalk.pid").to_str().unwrap(), "--iterations", "1"]);
            if kind == "pt-stalk gdb" {
                c.arg("--collect-gdb");
            }
            // Its own process group: stopping it stops the collectors it forks.
            use std::os::unix::process::CommandExt;
            c.process_group(0);
            c.stdout(Stdio::null()).stderr(Stdio::null()).spawn()?
        }
        _ => bail!("unknown watcher {kind}"),
    };
    std::thread::sleep(Duration::from_secs(2));
    Ok(Some(c))
}

/// CPU seconds a watcher and the children it has reaped used so far
/// (utime + stime + cutime + cstime from /proc/PID/stat): pt-stalk's work is
/// done by the `mysql` clients it starts each second.
pub(crate) fn cpu_secs(c: &Option<Child>) -> f64 {
    c.as_ref().map_or(0.0, |c| stat_cpu_secs(c.id(), 4))
}

/// CPU seconds of `pid` from /proc/PID/stat: its own (`fields` 2), or with
/// its reaped children's (4).
fn stat_cpu_secs(pid: u32, fields: usize) -> f64 {
    pileup_bench_drivers::stat_cpu(&format!("/proc/{pid}/stat"), fields)
}

/// A watcher stopped when this goes out of scope, an error's early
/// return included (a dropped `Child` is not killed: pt-stalk would go on).
pub(crate) struct Running(pub(crate) Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        stop(self.0.take());
    }
}

/// Stop a watcher and what it forked: SIGTERM, then SIGKILL after 10 s.
pub(crate) fn stop(c: Option<Child>) {
    if let Some(mut c) = c {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::Signal::SIGTERM);
        // pt-stalk runs in its own group: the collectors it forked too.
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::Signal::SIGTERM);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::Signal::SIGKILL);
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// The server binary under the name `mysqld`: pt-stalk looks for a process
/// called `mysqld` (`pidof mysqld`) and silently collects no stacks from one
/// called `mariadbd`, MariaDB's binary name since 10.5.
pub(crate) fn mysqld_named(root: &Path) -> Result<PathBuf> {
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin)?;
    let link = bin.join("mysqld");
    if !link.exists() {
        let real = ["/usr/sbin/mariadbd", "/usr/bin/mariadbd"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .ok_or_else(|| anyhow::anyhow!("mariadbd not found"))?;
        std::os::unix::fs::symlink(real, &link)?;
    }
    Ok(link)
}

/// CPU seconds a process has used (utime + stime).
pub(crate) fn proc_cpu_secs(pid: u32) -> f64 {
    stat_cpu_secs(pid, 2)
}
