//! The format of a recorded fixture (`examples/record_fixture.rs` writes
//! it, `tests/replay.rs` reads it): `threads.json.zst` lists the modules
//! and the threads; each module's image is its own zstd file beside it.

use pileup_engine::Regs;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub struct Fixture {
    /// The process's name.
    pub exe: String,
    pub modules: Vec<ModuleEntry>,
    pub threads: Vec<ThreadEntry>,
}

/// One executable mapping of a module, and the file of its image.
#[derive(Serialize, Deserialize)]
pub struct ModuleEntry {
    pub path: String,
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub image: String,
}

/// One thread as captured, and what the engine made of it live.
#[derive(Serialize, Deserialize)]
pub struct ThreadEntry {
    pub name: String,
    pub state: char,
    /// Read where it slept (no frame pointer known) rather than stopped.
    pub read_asleep: bool,
    pub regs: Regs,
    pub stack_addr: u64,
    /// The stack copy, in hex.
    pub stack: String,
    /// Lookup addresses, innermost first.
    pub frames: Vec<u64>,
    pub labels: Vec<String>,
    /// Why unwinding stopped early, if it did.
    pub error: Option<String>,
}

impl ThreadEntry {
    #[allow(dead_code)] // the recorder does not ask
    pub fn has(&self, label: &str) -> bool {
        self.labels.iter().any(|l| l == label)
    }
}

#[allow(dead_code)] // the recorder writes, the replay reads
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex bytes")).collect()
}
