//! The unwind and symbolize stages replayed offline, as framehop and samply
//! test theirs: one consistent snapshot of a real `mariadbd` (MariaDB
//! 10.11.19, Debian 12's stripped build) under sysbench load, with a row
//! lock waited on, recorded by `examples/record_fixture.rs` into
//! `tests/fixtures/mariadbd-10.11/`: each thread's registers and stack copy,
//! the frames and names the engine gave it live, and the parts of each
//! module (unwind entries, code, symbols) those stacks touch. No server and
//! no installed build are needed: the stacks are unwound and named again
//! from the fixture and must come out as they did live.

use std::path::{Path, PathBuf};

use pileup_engine::frames::{class_of, FrameClass};
use pileup_engine::{ModuleFile, Resolver};

mod common;
use common::fixture::{unhex, Fixture, ThreadEntry as Thread};

struct Replayed<'a> {
    thread: &'a Thread,
    frames: Vec<u64>,
    labels: Vec<String>,
    error: Option<String>,
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mariadbd-10.11")
}

fn unzstd(path: &Path) -> Vec<u8> {
    let raw = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    zstd::decode_all(&raw[..]).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn load() -> Fixture {
    serde_json::from_slice(&unzstd(&fixture_dir().join("threads.json.zst"))).expect("the fixture's JSON")
}

/// Unwind and name every recorded thread from the fixture's modules alone.
fn replay<'a>(fx: &'a Fixture, dir: &Path) -> Vec<Replayed<'a>> {
    let mut files = vec![];
    for m in &fx.modules {
        let file = dir.join(m.image.trim_end_matches(".zst"));
        if !file.exists() {
            std::fs::write(&file, unzstd(&fixture_dir().join(&m.image))).unwrap();
        }
        files.push(ModuleFile { path: m.path.clone(), start: m.start, end: m.end, offset: m.offset, file });
    }
    let mut r = Resolver::open(&fx.exe, &files);
    assert!(r.notes.is_empty(), "{:?}", r.notes);
    fx.threads
        .iter()
        .map(|t| {
            let (frames, error) = r.unwind(&t.regs, t.stack_addr, &unhex(&t.stack));
            let labels = r.frames(&frames).into_iter().map(|f| f.label).collect();
            Replayed { thread: t, frames, labels, error }
        })
        .collect()
}

#[test]
fn every_recorded_thread_unwinds_and_is_named_as_it_was_live() {
    let fx = load();
    let dir = tempfile::tempdir().unwrap();
    let out = replay(&fx, dir.path());
    assert!(out.len() >= 10, "a server snapshot has many threads: {}", out.len());
    for r in &out {
        let t = r.thread;
        assert_eq!(r.frames, t.frames, "{}: frames", t.name);
        assert_eq!(r.labels, t.labels, "{}: names", t.name);
        assert_eq!(r.error, t.error, "{}: where unwinding stopped", t.name);
    }
}

#[test]
fn every_stack_reaches_its_threads_start() {
    let fx = load();
    let dir = tempfile::tempdir().unwrap();
    let out = replay(&fx, dir.path());
    // Kernel-side io_uring workers have no user stack to copy.
    let with_stack: Vec<&Replayed> = out.iter().filter(|r| !r.thread.stack.is_empty()).collect();
    let main: Vec<&&Replayed> = with_stack.iter().filter(|r| r.thread.has("mysqld_main")).collect();
    assert_eq!(main.len(), 1, "one main thread");
    assert_eq!(main[0].labels.last().map(String::as_str), Some("_start"));
    let roots: std::collections::BTreeSet<&str> = with_stack
        .iter()
        .filter(|r| !r.thread.has("mysqld_main"))
        .map(|r| r.labels.last().map(String::as_str).unwrap_or(""))
        .collect();
    assert_eq!(roots.len(), 1, "every other thread starts in the C library's thread start: {roots:?}");
    for r in &with_stack {
        assert_eq!(r.error, None, "{:?}", r.labels);
        assert!(r.labels.len() >= 4, "{:?}", r.labels);
    }
    // Most threads slept and were read without a stop, without a frame
    // pointer: their callers were found by the unwind tables and the search
    // for return addresses.
    let asleep = with_stack.iter().filter(|r| r.thread.read_asleep && r.thread.regs.bp == 0).count();
    assert!(asleep >= with_stack.len() / 2, "{asleep} of {}", with_stack.len());
}

#[test]
fn a_stack_copied_short_unwinds_to_a_prefix_of_its_frames_and_says_so() {
    let fx = load();
    let dir = tempfile::tempdir().unwrap();
    let mut files = vec![];
    for m in &fx.modules {
        let file = dir.path().join(m.image.trim_end_matches(".zst"));
        std::fs::write(&file, unzstd(&fixture_dir().join(&m.image))).unwrap();
        files.push(ModuleFile { path: m.path.clone(), start: m.start, end: m.end, offset: m.offset, file });
    }
    let mut r = Resolver::open(&fx.exe, &files);
    let mut cut_short = 0;
    for t in fx.threads.iter().filter(|t| t.frames.len() >= 8) {
        let full = unhex(&t.stack);
        for keep in [64usize, 512, 2048] {
            let (frames, error) = r.unwind(&t.regs, t.stack_addr, &full[..keep.min(full.len())]);
            assert!(t.frames.starts_with(&frames), "{}: {frames:x?} is not a prefix of {:x?}", t.name, t.frames);
            if frames.len() < t.frames.len() {
                cut_short += 1;
                assert!(error.is_some(), "a stack that ends early says why: {:?}", r.frames(&frames));
            }
        }
    }
    assert!(cut_short > 0);
}

#[test]
fn what_each_thread_waits_on_is_read_from_its_frames() {
    let fx = load();
    let first =
        |t: &Thread, want: fn(FrameClass) -> bool| t.labels.iter().filter_map(|l| class_of(l)).find(|c| want(*c));
    // Row lock waits: InnoDB's lock wait (unnamed in a stripped build)
    // under a handler read, on a condition variable.
    let row_waits = fx
        .threads
        .iter()
        .filter(|t| t.labels.iter().any(|l| l.contains("index_read")))
        .filter(|t| first(t, FrameClass::is_wait) == Some(FrameClass::CondWait))
        .count();
    assert!(row_waits >= 2, "{row_waits}");
    // SLEEP() waits on a condition too; the asynchronous I/O thread waits
    // for completions.
    let sleep = fx.threads.iter().find(|t| t.has("Item_func_sleep::val_int")).expect("the SLEEP() thread");
    assert_eq!(first(sleep, FrameClass::is_wait), Some(FrameClass::CondWait));
    assert!(fx.threads.iter().any(|t| first(t, FrameClass::is_disk) == Some(FrameClass::AsyncIoWait)));
    // A connection waiting for its client's next statement is idle, even
    // where /proc said it was running a moment before its stack was read.
    let idle: Vec<&Thread> = fx.threads.iter().filter(|t| t.has("vio_read") && t.has("do_command")).collect();
    assert!(idle.iter().any(|t| t.state == 'R'), "the snapshot has a connection that went idle as it was read");
    for t in idle {
        assert_eq!(first(t, |c| c == FrameClass::ClientWait), Some(FrameClass::ClientWait), "{:?}", t.labels);
    }
    // Threads running in the engine were stopped with their registers.
    assert!(fx.threads.iter().filter(|t| !t.read_asleep && t.has("handler::ha_index_read_idx_map")).count() >= 1);
}
