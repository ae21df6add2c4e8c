//! A recovering server's stacks reduced to what it spent its time on:
//! the busy thread-samples (on a CPU, or in uninterruptible sleep) by
//! innermost frame, by innermost frame of the server's binary, and by
//! what the frame classes say (reading, writing, syncing a file, waiting
//! for a lock, or working on a CPU).

use std::collections::BTreeMap;

use pileup_engine::frames::{first_class, FrameClass};
use pileup_engine::{Counted, Profile};

use crate::profile::{exe_name, server_frame, shares, unnamed};
use crate::recovery::report::RecoveryProfile;

/// What a busy sample was doing, by its frames.
fn class(c: &Counted) -> &'static str {
    match first_class(c.frames.iter().map(|f| f.label.as_str()), |_| true) {
        Some(FrameClass::DiskRead | FrameClass::PageRead) => "reading files",
        Some(FrameClass::DiskWrite | FrameClass::FileExtend) => "writing files",
        Some(FrameClass::DiskSync) => "syncing files",
        Some(FrameClass::AsyncIoWait) => "waiting for asynchronous I/O",
        Some(k) if k.is_wait() => "waiting for a lock or condition",
        Some(FrameClass::EventWait | FrameClass::ClientWait) => "waiting for an event",
        _ if c.state == 'D' => "in the kernel, uninterruptible",
        _ => "working on a CPU",
    }
}

/// Reduce the profiles of a point's sampled crashes (`seconds_to_answer`:
/// the sampled start's).
pub(crate) fn reduce(
    profiles: &[Profile],
    redo_log_bytes: u64,
    dirty_target: u64,
    seconds_to_answer: f64,
) -> RecoveryProfile {
    let captures = profiles.iter().map(|p| p.stops.samples).sum();
    let (mut innermost, mut server_fn, mut classes) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    let (mut thread_samples, mut running, mut disk_state, mut unnamed_n) = (0, 0, 0, 0);
    let mut notes = vec![];
    for p in profiles {
        let exe = exe_name(p);
        for c in &p.stacks {
            thread_samples += c.count;
            match c.state {
                'R' => running += c.count,
                'D' => disk_state += c.count,
                _ => continue,
            }
            let leaf = c.frames.first().map(|f| f.label.clone()).unwrap_or_else(|| "??".into());
            *innermost.entry(leaf).or_insert(0) += c.count;
            *classes.entry(class(c).to_string()).or_insert(0) += c.count;
            if let Some(label) = server_frame(c, &exe) {
                if unnamed(label) {
                    unnamed_n += c.count;
                }
                *server_fn.entry(label.to_string()).or_insert(0) += c.count;
            }
        }
        for n in &p.notes {
            if !notes.contains(n) {
                notes.push(n.clone());
            }
        }
    }
    let busy = running + disk_state;
    if busy == 0 {
        notes.push("no thread was seen busy: the start was shorter than the captures could see".into());
    }
    RecoveryProfile {
        redo_log_bytes,
        dirty_target,
        seconds_to_answer,
        captures,
        thread_samples,
        running,
        disk_state,
        busy_innermost: shares(innermost, busy),
        busy_server_function: shares(server_fn, busy),
        unnamed_share: unnamed_n as f64 / busy.max(1) as f64,
        // Eight classes at most: all kept, the shares add up to the whole.
        busy_classes: shares(classes, busy),
        notes,
    }
}
