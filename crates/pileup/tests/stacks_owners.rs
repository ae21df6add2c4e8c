//! Lock owners: a process of our own making holds a glibc pthread mutex and a
//! write-locked pthread rwlock while other threads queue on them; pileup must
//! name the right holders.
//!
//! This file has its own `main` (no test harness, Cargo.toml says so): run
//! with PILEUP_LOCK_HELPER=1 it is that process, and otherwise it runs the
//! test, which starts this same binary as the helper. The helper is not a
//! test, so nothing passes by returning early.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

fn main() {
    if std::env::var_os("PILEUP_LOCK_HELPER").is_some() {
        return lock_helper();
    }
    // As libtest does: `--list`, and name filters (other flags such as
    // --test-threads mean nothing to one test).
    const NAME: &str = "names_the_holder_of_a_mutex_and_of_a_write_locked_rwlock";
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        return println!("{NAME}: test");
    }
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    if !filters.is_empty() && !filters.iter().any(|f| NAME.contains(f.as_str())) {
        return println!("test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 1 filtered out");
    }
    names_the_holder_of_a_mutex_and_of_a_write_locked_rwlock();
    println!("test {NAME} ... ok");
}

/// Hold the locks, print `READY <mutex holder tid> <rwlock holder tid>`,
/// then sleep for a minute.
fn lock_helper() {
    use std::sync::atomic::{AtomicI32, Ordering};
    static MUTEX_HOLDER: AtomicI32 = AtomicI32::new(0);
    static RW_HOLDER: AtomicI32 = AtomicI32::new(0);
    // Leaked so their addresses stay valid for every thread.
    let m: &'static mut libc::pthread_mutex_t = Box::leak(Box::new(libc::PTHREAD_MUTEX_INITIALIZER));
    let rw: &'static mut libc::pthread_rwlock_t = Box::leak(Box::new(libc::PTHREAD_RWLOCK_INITIALIZER));
    let (mp, rwp) = (m as *mut _ as usize, rw as *mut _ as usize);
    let hold = |f: Box<dyn FnOnce() + Send>| std::thread::spawn(f);
    hold(Box::new(move || unsafe {
        libc::pthread_mutex_lock(mp as *mut libc::pthread_mutex_t);
        MUTEX_HOLDER.store(libc::gettid(), Ordering::SeqCst);
        std::thread::sleep(Duration::from_secs(60));
    }));
    hold(Box::new(move || unsafe {
        libc::pthread_rwlock_wrlock(rwp as *mut libc::pthread_rwlock_t);
        RW_HOLDER.store(libc::gettid(), Ordering::SeqCst);
        std::thread::sleep(Duration::from_secs(60));
    }));
    while MUTEX_HOLDER.load(Ordering::SeqCst) == 0 || RW_HOLDER.load(Ordering::SeqCst) == 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
    for _ in 0..5 {
        std::thread::spawn(move || unsafe {
            libc::pthread_mutex_lock(mp as *mut libc::pthread_mutex_t);
        });
    }
    for _ in 0..3 {
        std::thread::spawn(move || unsafe {
            libc::pthread_rwlock_rdlock(rwp as *mut libc::pthread_rwlock_t);
        });
    }
    std::thread::sleep(Duration::from_millis(300));
    println!("READY {} {}", MUTEX_HOLDER.load(Ordering::SeqCst), RW_HOLDER.load(Ordering::SeqCst));
    std::thread::sleep(Duration::from_secs(60));
}

fn names_the_holder_of_a_mutex_and_of_a_write_locked_rwlock() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env("PILEUP_LOCK_HELPER", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut r = BufReader::new(child.stdout.take().unwrap());
    loop {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "helper ended early");
        if line.starts_with("READY ") {
            break;
        }
    }
    let ids: Vec<i64> = line.split_whitespace().skip(1).map(|s| s.parse().unwrap()).collect();
    let (mutex_holder, rw_holder) = (ids[0], ids[1]);
    let pid = child.id().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["stacks", "--pid", &pid, "--any-process", "--no-sql", "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let locks = j["locks"].as_array().unwrap();
    let mutex =
        locks.iter().find(|l| l["kind"] == "pthread-mutex").unwrap_or_else(|| panic!("no mutex group in {locks:?}"));
    assert_eq!(mutex["waiters"].as_array().unwrap().len(), 5);
    assert_eq!(mutex["owner_tid"].as_i64(), Some(mutex_holder));
    let rw =
        locks.iter().find(|l| l["kind"] == "pthread-rwlock").unwrap_or_else(|| panic!("no rwlock group in {locks:?}"));
    assert_eq!(rw["waiters"].as_array().unwrap().len(), 3);
    assert_eq!(rw["owner_tid"].as_i64(), Some(rw_holder));
    // The text report says it in words, with the holder's stack.
    let out = Command::new(env!("CARGO_BIN_EXE_pileup"))
        .args(["stacks", "--pid", &pid, "--any-process", "--no-sql"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("# lock: 5 threads wait on pthread mutex")
            && text.contains(&format!("held by tid {mutex_holder}")),
        "{text}"
    );
    assert!(text.contains("holder stack:") && text.contains("sleep"), "{text}");
    let _ = child.kill();
    let _ = child.wait();
}
