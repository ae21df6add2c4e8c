//! `pileup stacks` names a stripped program's functions from its separate
//! debug info, found the ways gdb finds it: a build-id directory, a
//! `.gnu_debuglink` (CRC checked) and MiniDebugInfo (`.gnu_debugdata`).
//! The program is built here with gcc and split with binutils.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use common::*;

/// main → outer → middle → leaf, which waits in pause(): none of the four
/// is exported, so a stripped build names none of them by itself.
const PROGRAM: &str = r#"
#include <unistd.h>
__attribute__((noinline)) static void pileup_leaf(void) { for (;;) pause(); }
__attribute__((noinline)) static void pileup_middle(void) { pileup_leaf(); __asm__ volatile(""); }
__attribute__((noinline)) static void pileup_outer(void) { pileup_middle(); __asm__ volatile(""); }
int main(void) { pileup_outer(); return 0; }
"#;

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e} (make deps installs build-essential)"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Build `source` with debug info and a build-id; returns the full
/// build's path.
fn build(dir: &Path, source: &str) -> PathBuf {
    std::fs::write(dir.join("prog.c"), source).unwrap();
    let full = dir.join("prog.full");
    run(Command::new("gcc").args(["-g", "-O1", "-pthread", "-Wl,--build-id", "-o"]).arg(&full).arg(dir.join("prog.c")));
    full
}

/// A scratch directory with the program built (`prog.full`) and stripped (`prog`).
fn stripped_build(name: &str) -> (Scratch, PathBuf, PathBuf) {
    stripped_build_of(name, PROGRAM)
}

fn stripped_build_of(name: &str, source: &str) -> (Scratch, PathBuf, PathBuf) {
    let dir = scratch(name);
    let full = build(&dir, source);
    let exe = dir.join("prog");
    stripped(&full, &exe);
    (dir, full, exe)
}

fn stripped(full: &Path, to: &Path) {
    run(Command::new("strip").args(["--strip-all", "-o"]).arg(to).arg(full));
}

fn build_id(file: &Path) -> String {
    let out = Command::new("readelf").arg("-n").arg(file).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).expect("a build-id note");
    id.trim().to_string()
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(exe: &Path) -> Running {
    let c = Command::new(exe).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    Running(c)
}

/// The program's one thread's frame labels and the symbols line of its
/// module (an empty debuginfod cache in `dir`, no server).
fn names(dir: &Path, pid: u32, extra: &[&str]) -> (Vec<String>, String) {
    let (l, sym, _) = names_with_cache(pid, &dir.join("cache"), extra);
    (l, sym)
}

fn named(labels: &[String]) -> bool {
    ["pileup_leaf", "pileup_middle", "pileup_outer", "main"].iter().all(|f| labels.iter().any(|l| l == f))
}

#[test]
fn a_build_id_directory_names_a_stripped_programs_functions() {
    let (dir, full, exe) = stripped_build("dbg-buildid");
    let p = start(&exe);
    // Stripped and alone: none of its own functions has a name.
    let (l, sym) = names(&dir, p.0.id(), &["--debug-dir", dir.join("none").to_str().unwrap()]);
    assert!(!l.iter().any(|x| x == "pileup_middle"), "{l:?}");
    assert!(sym.contains("stripped"), "{sym}");
    // Its debug file where Debian's -dbgsym puts it, under a debug directory.
    let id = build_id(&full);
    let debug = dir.join("debug/.build-id").join(&id[..2]);
    std::fs::create_dir_all(&debug).unwrap();
    run(Command::new("objcopy").arg("--only-keep-debug").arg(&full).arg(debug.join(format!("{}.debug", &id[2..]))));
    let (l, sym) = names(&dir, p.0.id(), &["--debug-dir", dir.join("debug").to_str().unwrap()]);
    assert!(named(&l), "{l:?}");
    assert!(sym.starts_with("debug file by build-id"), "{sym}");
    // With DWARF: source lines of the program's own frames.
    let out = pileup(&[
        "stacks",
        "--pid",
        &p.0.id().to_string(),
        "--any-process",
        "--no-sql",
        "--format",
        "json",
        "--debug-info",
        "--debug-dir",
        dir.join("debug").to_str().unwrap(),
    ]);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let frames = j["samples"][0]["threads"][0]["frames"].as_array().unwrap();
    let leaf = frames.iter().find(|f| f["label"] == "pileup_leaf").expect("leaf frame");
    assert!(leaf["file"].as_str().unwrap_or("").ends_with("prog.c"), "{leaf}");
}

#[test]
fn a_debuglink_is_followed_only_when_its_crc_matches() {
    let dir = scratch("dbg-link");
    let full = build(&dir, PROGRAM);
    // The debug file next to the program's directory, in .debug/, named by the link.
    let dbg = dir.join("prog.debug");
    run(Command::new("objcopy").arg("--only-keep-debug").arg(&full).arg(&dbg));
    let exe = dir.join("prog");
    stripped(&full, &exe);
    run(Command::new("objcopy").arg(format!("--add-gnu-debuglink={}", dbg.display())).arg(&exe));
    std::fs::create_dir_all(dir.join(".debug")).unwrap();
    let none = dir.join("none");
    let none = none.to_str().unwrap();

    // A debug file of another build under the link's name: its CRC differs,
    // so it is not used (it would name the wrong functions).
    std::fs::write(dir.join("other.c"), PROGRAM.replace("pileup_", "other_")).unwrap();
    run(Command::new("gcc").args(["-g", "-O1", "-o"]).arg(dir.join("other")).arg(dir.join("other.c")));
    run(Command::new("objcopy").arg("--only-keep-debug").arg(dir.join("other")).arg(dir.join(".debug/prog.debug")));
    std::fs::remove_file(&dbg).unwrap();
    let p = start(&exe);
    let (l, sym) = names(&dir, p.0.id(), &["--debug-dir", none]);
    assert!(!l.iter().any(|x| x.starts_with("other_") || x == "pileup_middle"), "{l:?}");
    assert!(!sym.contains("debuglink"), "{sym}");

    // The right one: named.
    run(Command::new("objcopy").arg("--only-keep-debug").arg(&full).arg(dir.join(".debug/prog.debug")));
    let (l, sym) = names(&dir, p.0.id(), &["--debug-dir", none]);
    assert!(named(&l), "{l:?}");
    assert!(sym.starts_with("debug file by .gnu_debuglink"), "{sym}");
}

#[test]
fn minidebuginfo_names_a_stripped_programs_functions() {
    let (dir, full, exe) = stripped_build("dbg-mini");
    // Fedora's recipe: the functions' symbols, without debug info,
    // xz-compressed into .gnu_debugdata.
    let mini = dir.join("mini.debug");
    run(Command::new("objcopy").arg("--only-keep-debug").arg(&full).arg(&mini));
    run(Command::new("objcopy")
        .args(["-S", "--remove-section", ".gdb_index", "--remove-section", ".comment"])
        .args(["--keep-symbol=pileup_leaf", "--keep-symbol=pileup_middle", "--keep-symbol=pileup_outer"])
        .args(["--keep-symbol=main"])
        .arg(&mini));
    run(Command::new("xz").arg("-f").arg(&mini));
    run(Command::new("objcopy").arg(format!("--add-section=.gnu_debugdata={}.xz", mini.display())).arg(&exe));
    let p = start(&exe);
    let (l, sym) = names(&dir, p.0.id(), &["--debug-dir", dir.join("none").to_str().unwrap()]);
    assert!(named(&l), "{l:?}");
    assert!(sym.starts_with("MiniDebugInfo"), "{sym}");
}

/// `pileup stacks` with its debuginfod cache in `cache`: frame labels of
/// the program's thread, its module's symbols line, and the notes.
fn names_with_cache(pid: u32, cache: &Path, extra: &[&str]) -> (Vec<String>, String, Vec<String>) {
    let pid = pid.to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["stacks", "--pid", &pid, "--any-process", "--no-sql", "--format", "json"])
        .args(extra)
        .env("DEBUGINFOD_CACHE_PATH", cache)
        .env_remove("DEBUGINFOD_URLS")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = j["modules"].as_array().unwrap().iter().find(|m| m["name"].as_str().unwrap().starts_with("prog")).cloned();
    let notes = j["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
    (
        labels(&j["samples"][0]["threads"][0]),
        m.map(|m| m["symbols"].as_str().unwrap().to_string()).unwrap_or_default(),
        notes,
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A real debuginfod server (elfutils) indexing the unstripped build
/// `full`, once it serves `id`'s debug file; and its URL.
fn serve(dir: &Path, full: &Path, id: &str) -> (Running, String) {
    let srv = dir.join("srv");
    std::fs::create_dir_all(&srv).unwrap();
    std::fs::copy(full, srv.join("prog.full")).unwrap();
    let port = free_port();
    let server = Running(
        Command::new("debuginfod")
            .arg("-F")
            .arg(&srv)
            .args(["-p", &port.to_string(), "-t", "0", "-g", "0", "-d"])
            .arg(dir.join("db.sqlite"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("debuginfod (Debian package debuginfod; make deps installs it)"),
    );
    let url = format!("http://127.0.0.1:{port}");
    let t = std::time::Instant::now();
    loop {
        let ok = Command::new("curl")
            .args(["-sf", "-o", "/dev/null", &format!("{url}/buildid/{id}/debuginfo")])
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "debuginfod did not index the program within 60 s");
        std::thread::sleep(Duration::from_millis(300));
    }
    (server, url)
}

/// Three threads taking turns on one pthread mutex, each holding it a
/// millisecond: every wait is in `pileup_contend`, which a stripped build
/// does not name.
const CONTENDED: &str = r#"
#include <pthread.h>
#include <unistd.h>
static pthread_mutex_t pileup_mutex = PTHREAD_MUTEX_INITIALIZER;
__attribute__((noinline)) static void pileup_contend(void) {
    pthread_mutex_lock(&pileup_mutex);
    usleep(1000);
    pthread_mutex_unlock(&pileup_mutex);
    __asm__ volatile("");
}
static void *pileup_worker(void *arg) { (void)arg; for (;;) pileup_contend(); return 0; }
int main(void) {
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], 0, pileup_worker, 0);
    pthread_join(t[0], 0);
    return 0;
}
"#;

#[test]
fn locks_names_a_stripped_programs_waiters_from_debuginfod() {
    let (dir, full, exe) = stripped_build_of("dbg-locks", CONTENDED);
    let id = build_id(&full);
    let (_server, url) = serve(&dir, &full, &id);
    let p = start(&exe);
    let none = dir.join("none");
    let waiters = |cache: &str, extra: &[&str]| -> (Vec<String>, Vec<String>, Vec<String>) {
        let out = Command::new(env!("CARGO_BIN_EXE_pileup"))
            .args(["locks", "--pid", &p.0.id().to_string(), "--any-process", "--no-sql", "--format", "json"])
            .args(["--duration", "1s", "--debug-dir", none.to_str().unwrap()])
            .args(extra)
            .env("DEBUGINFOD_CACHE_PATH", dir.join(cache))
            .env_remove("DEBUGINFOD_URLS")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let frames = j["locks"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|l| l["stacks"].as_array().unwrap().iter())
            .flat_map(|s| s["frames"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_string()))
            .collect();
        let notes = j["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
        let locks = j["locks"].as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap().to_string()).collect();
        (frames, notes, locks)
    };
    // Without its debug file the waiters' own frames are module+offset.
    // Without its debug file the waiters' own frames are module+offset,
    // and the mutex (a static, not exported) is named by its section.
    let (f, _, l) = waiters("cache0", &["--no-debuginfod"]);
    assert!(f.iter().any(|x| x.starts_with("prog+0x")) && !f.iter().any(|x| x == "pileup_contend"), "{f:?}");
    assert!(!l.iter().any(|x| x == "pileup_mutex"), "{l:?}");
    // Fetched from debuginfod before tracing: the waiters and the mutex named.
    let (f, notes, l) = waiters("cache1", &["--debuginfod", &url]);
    assert!(f.iter().any(|x| x == "pileup_contend") && f.iter().any(|x| x == "pileup_worker"), "{f:?} {notes:?}");
    assert!(l.iter().any(|x| x == "pileup_mutex"), "{l:?}");
    assert!(notes.iter().any(|n| n.contains("fetched from debuginfod")), "{notes:?}");
    assert!(dir.join("cache1").join(&id).join("debuginfo").is_file());
    // The cache alone names them next time.
    let (f, _, l) = waiters("cache1", &["--no-debuginfod"]);
    assert!(f.iter().any(|x| x == "pileup_contend") && l.iter().any(|x| x == "pileup_mutex"), "{f:?} {l:?}");
}

#[test]
fn debuginfod_fetches_once_into_the_shared_cache_and_a_silent_server_holds_nothing_up() {
    let (dir, full, exe) = stripped_build("dbg-debuginfod");
    let id = build_id(&full);
    let (server, url) = serve(&dir, &full, &id);
    let p = start(&exe);
    let cache = dir.join("cache");
    let none = dir.join("none");
    let args = ["--debug-dir", none.to_str().unwrap(), "--debuginfod", &url];
    let (l, sym, notes) = names_with_cache(p.0.id(), &cache, &args);
    assert!(named(&l), "{l:?} {notes:?}");
    assert!(sym.starts_with("debug file from debuginfod"), "{sym}");
    assert!(notes.iter().any(|n| n.contains("fetched from debuginfod")), "{notes:?}");
    assert!(cache.join(&id).join("debuginfo").is_file(), "kept in the client cache, as elfutils keeps it");
    // What `pileup watch` does at start: fill the cache for the captures.
    let filled = dir.join("cache-watch");
    let o = pileup_engine::debug_files::DebuginfodOptions {
        cache_dir: filled.clone(),
        timeout: Duration::from_secs(30),
        ..pileup_debuginfod::for_servers(std::slice::from_ref(&url)).unwrap()
    };
    let notes = pileup_engine::debug_files::fill_cache(p.0.id() as i32, std::slice::from_ref(&none), &o);
    assert!(notes.iter().any(|n| n.contains("debug info for prog fetched")), "{notes:?}");
    let (l, sym, _) = names_with_cache(p.0.id(), &filled, &["--debug-dir", none.to_str().unwrap(), "--no-debuginfod"]);
    assert!(named(&l) && sym.starts_with("debug file from debuginfod"), "the cache alone names it: {l:?} {sym}");
    // The server gone: the cache names it, nothing is fetched again.
    drop(server);
    let (l, sym, notes) = names_with_cache(p.0.id(), &cache, &args);
    assert!(named(&l) && sym.starts_with("debug file from debuginfod"), "{l:?} {sym}");
    assert!(!notes.iter().any(|n| n.contains("fetched")), "{notes:?}");

    // A server that accepts and never answers: the capture still happens,
    // on time, with module+offset labels and one line saying why.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://127.0.0.1:{}", silent.local_addr().unwrap().port());
    let held = std::thread::spawn(move || {
        let conns: Vec<_> = silent.incoming().take(4).flatten().collect();
        std::thread::sleep(Duration::from_secs(30));
        drop(conns);
    });
    let t = std::time::Instant::now();
    let fresh = dir.join("cache2");
    let (l, _, notes) = names_with_cache(
        p.0.id(),
        &fresh,
        &["--debug-dir", none.to_str().unwrap(), "--debuginfod", &silent_url, "--debuginfod-timeout", "2s"],
    );
    assert!(t.elapsed() < Duration::from_secs(15), "a silent server held the capture {:?}", t.elapsed());
    assert!(!l.iter().any(|x| x == "pileup_middle") && l.iter().any(|x| x.starts_with("prog+0x")), "{l:?}");
    let why: Vec<_> = notes.iter().filter(|n| n.contains("debuginfod")).collect();
    assert_eq!(why.len(), 1, "{notes:?}");
    assert!(why[0].contains(&silent_url) && why[0].contains("prog+0xFUNCSTART"), "{why:?}");
    drop(held);

    // A slow server and a run of many samples: sampling starts at once and
    // the names are applied to everything sampled once the file arrives.
    let slow = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let slow_url = format!("http://127.0.0.1:{}", slow.local_addr().unwrap().port());
    let body = std::fs::read(&full).unwrap();
    let id2 = id.clone();
    std::thread::spawn(move || {
        let id = id2;
        use std::io::{Read, Write};
        for mut c in slow.incoming().flatten() {
            let mut req = [0u8; 4096];
            let n = c.read(&mut req).unwrap_or(0);
            if !String::from_utf8_lossy(&req[..n]).contains(&format!("/buildid/{id}/")) {
                let _ = write!(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                continue;
            }
            std::thread::sleep(Duration::from_secs(2));
            let _ = write!(c, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
            let _ = c.write_all(&body);
        }
    });
    let asked = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let out = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["stacks", "--pid", &p.0.id().to_string(), "--any-process", "--no-sql", "--format", "json"])
        .args(["--samples", "10", "--interval-ms", "100", "--debug-dir", none.to_str().unwrap()])
        .args(["--debuginfod", &slow_url])
        .env("DEBUGINFOD_CACHE_PATH", dir.join("cache3"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = j["stops"]["first_unix_ms"].as_u64().unwrap();
    assert!(first < asked + 1500, "the first sample waited for the server: {} ms", first - asked);
    for c in j["stacks"].as_array().unwrap() {
        let l: Vec<&str> = c["frames"].as_array().unwrap().iter().map(|f| f["label"].as_str().unwrap()).collect();
        assert!(l.contains(&"pileup_middle"), "a stack counted before the names arrived is named: {l:?}");
    }
    assert!(named(&labels(&j["samples"][0]["threads"][0])));
}
