//! Helpers for end-to-end tests: real sandboxes, real sysbench, the real binary.
#![allow(dead_code)]

use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mysql::prelude::Queryable;

use pileup_sandbox::{Options, Sandbox};

pub fn sandbox() -> Sandbox {
    sandbox_with(vec![])
}

/// The sandboxes' base directory, shared by every test run (each sandbox
/// has its own directory below it, removed when it stops).
pub fn it_base() -> std::path::PathBuf {
    let base = std::env::temp_dir().join("pileup-it");
    std::fs::create_dir_all(&base).unwrap();
    base
}

/// A scratch directory removed when the value is dropped, even when the
/// test fails, unless PILEUP_TEST_KEEP is set: then a failing test's
/// scratch stays (its path on stderr) to be read; derefs to its path.
pub struct Scratch(Option<tempfile::TempDir>);

impl std::ops::Deref for Scratch {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        self.0.as_ref().expect("a scratch directory until dropped").path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() && std::env::var_os("PILEUP_TEST_KEEP").is_some() {
            if let Some(dir) = self.0.take() {
                eprintln!("kept: {}", dir.keep().display());
            }
        }
    }
}

pub fn scratch(name: &str) -> Scratch {
    Scratch(Some(tempfile::Builder::new().prefix(&format!("pileup-{name}-")).tempdir().unwrap()))
}

pub fn sandbox_with(cnf: Vec<(&str, &str)>) -> Sandbox {
    let base = it_base();
    Sandbox::start(Options {
        base_dir: Some(base),
        cnf: cnf.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..Default::default()
    })
    .expect("starting a sandbox")
}

pub fn pileup(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pileup")).args(args).env_remove("MYSQL_PWD").output().expect("running pileup")
}

/// jq reads `doc` (one JSON document, or a stream such as JSON Lines) as
/// one array of the values in it (`jq -s`), and `filter` holds for it; the
/// error says what jq said.
pub fn jq(filter: &str, doc: &[u8]) -> Result<(), String> {
    use std::io::Write;
    let mut c = Command::new("jq")
        .args(["-e", "-s", filter])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("jq (make deps)");
    c.stdin.take().unwrap().write_all(doc).unwrap();
    let o = c.wait_with_output().unwrap();
    match o.status.success() {
        true => Ok(()),
        false => {
            Err(format!("jq {filter}: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
        }
    }
}

/// JSON Lines as their readers take them: jq reads every value, each with
/// `schema_version` 1, and each line is one whole object.
pub fn json_lines(doc: &[u8]) -> Result<(), String> {
    jq("length > 0 and all(.schema_version == 1)", doc)?;
    match String::from_utf8_lossy(doc)
        .lines()
        .find(|l| !serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| v.is_object()))
    {
        Some(l) => Err(format!("not one JSON object on its line: {l}")),
        None => Ok(()),
    }
}

/// `xmllint --noout`: the file is well-formed XML.
pub fn xmllint(path: &std::path::Path) -> Result<(), String> {
    let o = Command::new("xmllint").arg("--noout").arg(path).output().expect("xmllint (libxml2-utils)");
    match o.status.success() {
        true => Ok(()),
        false => Err(format!("xmllint {}: {}", path.display(), String::from_utf8_lossy(&o.stderr))),
    }
}

/// pileup run as `nobody` (setpriv from util-linux): no privileges at all.
pub fn pileup_as_nobody(args: &[&str]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", env!("CARGO_BIN_EXE_pileup")])
        .args(args)
        .output()
        .expect("setpriv (util-linux)")
}

pub fn stacks_json(sb: &Sandbox, extra: &[&str]) -> serde_json::Value {
    let pid = sb.pid().to_string();
    let sock = sb.endpoint.socket.to_string_lossy().into_owned();
    let mut args = vec!["stacks", "--pid", &pid, "-S", &sock, "-u", "root", "--format", "json"];
    args.extend_from_slice(extra);
    let out = pileup(&args);
    assert!(out.status.success(), "pileup failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json output parses")
}

/// sysbench with `threads` connections on the sandbox, running in the background.
pub fn sysbench(sb: &Sandbox, test: &str, threads: u32, seconds: u32) -> Child {
    let base = sysbench_prepare(sb, test, 2, 2000);
    sysbench_start(test, &base, threads, seconds)
}

/// sysbench's tables prepared for `test` on the sandbox: the connection and
/// table arguments every later run takes.
pub fn sysbench_prepare(sb: &Sandbox, test: &str, tables: u32, rows: u32) -> Vec<String> {
    let base = vec![
        "--db-driver=mysql".to_string(),
        format!("--mysql-socket={}", sb.endpoint.socket.display()),
        "--mysql-user=root".into(),
        format!("--tables={tables}"),
        format!("--table-size={rows}"),
    ];
    sb.sql("CREATE DATABASE IF NOT EXISTS sbtest").unwrap();
    let prep = Command::new("sysbench")
        .arg(test)
        .args(&base)
        .arg("prepare")
        .output()
        .expect("sysbench is installed (make deps)");
    assert!(prep.status.success(), "sysbench prepare: {}", String::from_utf8_lossy(&prep.stderr));
    base
}

/// `sysbench test run` in the background on tables [`sysbench_prepare`] made.
pub fn sysbench_start(test: &str, base: &[String], threads: u32, seconds: u32) -> Child {
    Command::new("sysbench")
        .arg(test)
        .args(base)
        .arg(format!("--threads={threads}"))
        .arg(format!("--time={seconds}"))
        .arg("run")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Every thread's state letter from /proc/PID/task/*/stat.
pub fn thread_states(pid: u32) -> Vec<(i32, char)> {
    let mut v = vec![];
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let tid: i32 = e.file_name().to_string_lossy().parse().unwrap();
        if let Ok(s) = std::fs::read_to_string(e.path().join("stat")) {
            let st = s.rsplit_once(')').unwrap().1.trim_start().chars().next().unwrap();
            v.push((tid, st));
        }
    }
    v
}

pub fn labels(t: &serde_json::Value) -> Vec<String> {
    t["frames"].as_array().unwrap().iter().map(|f| f["label"].as_str().unwrap().to_string()).collect()
}

/// Render a page with headless Chromium into a screenshot: the console
/// messages it printed, and the PNG's bytes.
pub fn chromium_screenshot(page: &std::path::Path, scratch: &std::path::Path) -> (Vec<String>, Vec<u8>) {
    chromium_screenshot_url(&format!("file://{}", page.display()), scratch)
}

/// [`chromium_screenshot`] of a URL; the page's scripts get 5 s of virtual
/// time to fetch and draw.
pub fn chromium_screenshot_url(url: &str, scratch: &std::path::Path) -> (Vec<String>, Vec<u8>) {
    let shot = scratch.join("screenshot.png");
    let profile = scratch.join("chromium-profile");
    let c = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1300,2200",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--virtual-time-budget=5000")
        .arg(url)
        .output()
        .expect("chromium (make deps installs it)");
    assert!(c.status.success(), "chromium failed: {}", String::from_utf8_lossy(&c.stderr));
    let console =
        String::from_utf8_lossy(&c.stderr).lines().filter(|l| l.contains(":CONSOLE")).map(String::from).collect();
    (console, std::fs::read(&shot).unwrap())
}

/// eBPF programs loaded in the kernel with this name.
pub fn programs_named(name: &str) -> usize {
    libbpf_rs::query::ProgInfoIter::default().filter(|p| p.name.to_str() == Some(name)).count()
}

/// `n` connections running `sql` in a loop until [`stop`].
pub fn storm(sb: &Sandbox, n: usize, sql: &'static str) -> (Arc<AtomicBool>, Vec<std::thread::JoinHandle<u64>>) {
    let go = Arc::new(AtomicBool::new(true));
    let handles = (0..n)
        .map(|_| {
            let mut c = sb.connect().unwrap();
            let go = go.clone();
            std::thread::spawn(move || {
                let mut done = 0;
                while go.load(Ordering::Relaxed) {
                    let _: Vec<mysql::Row> = c.query(sql).unwrap();
                    done += 1;
                }
                done
            })
        })
        .collect();
    (go, handles)
}

/// Stop a [`storm`]: the statements its connections ran.
pub fn stop(go: Arc<AtomicBool>, handles: Vec<std::thread::JoinHandle<u64>>) -> u64 {
    go.store(false, Ordering::Relaxed);
    handles.into_iter().map(|h| h.join().unwrap()).sum()
}

/// A small filesystem of its own, to fill (`sized`), or one that cannot
/// allocate space without writing it (`no_fallocate`), as ext3,
/// ZFS before 2.2 and NFSv3 cannot: ext4 without extents (its `fallocate`
/// answers EOPNOTSUPP) in an image on a loop device, mounted under the
/// tests' base directory; unmounted and removed when dropped.
pub struct LoopFs {
    image: std::path::PathBuf,
    pub mount: std::path::PathBuf,
    loop_dev: String,
}

impl LoopFs {
    pub fn no_fallocate(gib: u32) -> LoopFs {
        LoopFs::sized(u64::from(gib) << 30, "nofalloc")
    }

    /// One of `bytes`, under a directory named for `what`.
    pub fn sized(bytes: u64, what: &str) -> LoopFs {
        let base = it_base().join(format!("{what}-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        let (image, mount) = (base.join("fs.img"), base.join("mnt"));
        std::fs::create_dir_all(&mount).unwrap();
        std::fs::File::create(&image).unwrap().set_len(bytes).unwrap();
        let run = |cmd: &str, args: &[&str]| {
            let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e} (make deps)"));
            assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        let img = image.to_str().unwrap();
        run("mkfs.ext4", &["-q", "-F", "-O", "^extent,^64bit", img]);
        let loop_dev = run("losetup", &["--find", "--show", img]);
        run("mount", &[&loop_dev, mount.to_str().unwrap()]);
        LoopFs { image, mount, loop_dev }
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
        let _ = Command::new("losetup").args(["-d", &self.loop_dev]).status();
        let _ = std::fs::remove_dir_all(self.image.parent().unwrap());
    }
}

impl LoopFs {
    /// Fill it to the last block (root writes into the reserved ones too).
    pub fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let filler = self.mount.join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 1 << 20];
        while f.write_all(&block).is_ok() {}
        let small = vec![0u8; 4096];
        while f.write_all(&small).is_ok() {}
        let _ = f.sync_all();
        filler
    }
}

/// A sandbox that logs every statement with every detail to `log`.
pub fn slow_logging(log: &std::path::Path) -> Sandbox {
    sandbox_with(vec![
        ("slow_query_log", "ON"),
        ("long_query_time", "0"),
        ("log_slow_verbosity", "full"),
        ("slow_query_log_file", log.to_str().unwrap()),
    ])
}

/// `pileup digest --format json ARGS`, which must succeed: its report.
pub fn digest_json(args: &[&str]) -> serde_json::Value {
    let mut a = vec!["digest", "--format", "json"];
    a.extend_from_slice(args);
    let out = pileup(&a);
    assert!(out.status.success(), "pileup digest {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON report")
}
