//! `pileup memory`: where a running server's memory went over a window.
//!
//! ```text
//! procmem (/proc: resident memory, mappings → glibc heaps, stacks, pool)
//!    ─┐
//! server (Memory_used, per-connection MEMORY_USED, the buffer pool) ─▶ sample ─▶ Report
//! ```
//!
//! Each interval the process's resident memory is read from `/proc` and
//! split by region, beside what the server says it allocated. The report
//! follows both over the window and names what they disagree on: heap
//! growth the accounting does not explain, and memory the server freed but
//! the allocator kept (resident, not returned to the kernel).

mod error;
pub mod procmem;
mod report;
mod server;

use std::time::{Duration, Instant};

pub use error::MemoryError;
pub use report::{Point, Report};
pub use server::{ConnectionMemory, ServerMemory};

/// What to watch, and for how long.
#[derive(Debug, Clone)]
pub struct MemoryOptions {
    pub pid: i32,
    pub duration: Duration,
    pub interval: Duration,
}

/// What the run reports as it goes.
pub trait Sink {
    /// A point of the timeline was read.
    fn point(&mut self, _p: &Point) {}
    /// Whether to stop early (Ctrl-C).
    fn stop(&mut self) -> bool {
        false
    }
}

/// Follow the server's memory for the window; `sql` reads its accounting
/// (none: `/proc` alone).
pub fn run(o: &MemoryOptions, mut sql: Option<mysql::Conn>, sink: &mut dyn Sink) -> Result<Report, MemoryError> {
    let exe = pileup_engine::process::check_target(o.pid, false)?;
    let mut server = match sql.as_mut() {
        Some(c) => Some(server::Reader::new(c)?),
        None => None,
    };
    let t0 = Instant::now();
    let mut proc = report::ProcReader::new(o.pid);
    let mut points = vec![];
    let mut notes = vec![];
    loop {
        let at = t0.elapsed().as_secs_f64();
        let s = match (server.as_mut(), sql.as_mut()) {
            (Some(r), Some(c)) => match r.read(c) {
                Ok(s) => Some(s),
                Err(e) => {
                    notes.push(format!("the server's accounting could not be read at {at:.1} s: {e}"));
                    sql = None;
                    None
                }
            },
            _ => None,
        };
        let pool_size = s.as_ref().map_or(0, |s| s.pool_size);
        let Some(p) = proc.read(at, pool_size, s) else {
            notes.push(format!("the server exited at {at:.1} s"));
            break;
        };
        sink.point(&p);
        points.push(p);
        if t0.elapsed() + o.interval > o.duration || sink.stop() {
            break;
        }
        std::thread::sleep(o.interval.saturating_sub(Duration::from_secs_f64(t0.elapsed().as_secs_f64() - at)));
    }
    if points.is_empty() {
        return Err(MemoryError::ProcessGone(o.pid));
    }
    Ok(Report::new(o.pid, exe, points, notes))
}
