//! What the growth probe sends (`bpf/growth.bpf.c`), decoded from the ring
//! buffer's bytes. Pure: tested without a kernel.

/// The most stack copied above a thread's stack pointer (`STACK_BYTES`).
pub const STACK_BYTES: usize = 16384;
const SAMPLE_HEADER: usize = 72;
const SMALL_BYTES: usize = 40;

const REC_SAMPLE: u64 = 1;
const REC_GROW: u64 = 2;
const REC_RELEASE: u64 = 3;
const REC_NOSTACK: u64 = 4;

/// What grew or was given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum What {
    /// First touches of anonymous pages (heap, mmap'd chunks, stacks).
    FaultAnon,
    /// First touches of file-backed pages (code, mapped files).
    FaultFile,
    Mmap,
    Brk,
    Mremap,
    /// A PROT_NONE reserve made writable (a glibc arena's heap growing).
    Mprotect,
    Munmap,
    Madvise,
    /// A mapping placed over a range (glibc shrinking an arena's heap).
    MmapFixed,
}

impl What {
    fn from_code(c: u32) -> Option<What> {
        Some(match c {
            1 => What::FaultAnon,
            2 => What::FaultFile,
            3 => What::Mmap,
            4 => What::Brk,
            5 => What::Mremap,
            6 => What::Mprotect,
            7 => What::Munmap,
            8 => What::Madvise,
            9 => What::MmapFixed,
            _ => return None,
        })
    }

    /// A first touch of pages (resident growth), not address space.
    pub fn is_fault(self) -> bool {
        matches!(self, What::FaultAnon | What::FaultFile)
    }

    pub fn name(self) -> &'static str {
        match self {
            What::FaultAnon => "first touch (anonymous)",
            What::FaultFile => "first touch (file)",
            What::Mmap => "mmap",
            What::Brk => "brk",
            What::Mremap => "mremap",
            What::Mprotect => "mprotect",
            What::Munmap => "munmap",
            What::Madvise => "madvise",
            What::MmapFixed => "mmap over a range",
        }
    }
}

/// One event: what happened, to how many bytes, where, by which thread and
/// when, with the thread's registers and stack when they were copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// CLOCK_MONOTONIC, ns.
    pub time_ns: u64,
    pub tid: i32,
    pub what: What,
    /// A sample's weight (bytes since the thread's last sample), or the
    /// bytes mapped or given back.
    pub bytes: u64,
    pub addr: u64,
    /// A range given back, not growth.
    pub release: bool,
    /// Registers and the stack's top, when copied.
    pub regs: Option<StackCopy>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackCopy {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// From `sp` up; empty if unreadable.
    pub stack: Vec<u8>,
}

impl Event {
    /// Decode a record; `None` if it is of no known kind or too short.
    pub fn decode(b: &[u8]) -> Option<Event> {
        let u64_at = |o: usize| b.get(o..o + 8).map(|x| u64::from_le_bytes(x.try_into().unwrap()));
        let u32_at = |o: usize| b.get(o..o + 4).map(|x| u32::from_le_bytes(x.try_into().unwrap()));
        let kind = u64_at(0)?;
        if b.len() < SMALL_BYTES {
            return None;
        }
        let mut e = Event {
            time_ns: u64_at(8)?,
            bytes: u64_at(16)?,
            addr: u64_at(24)?,
            tid: u32_at(32)? as i32,
            what: What::from_code(u32_at(36)?)?,
            release: kind == REC_RELEASE,
            regs: None,
        };
        match kind {
            REC_RELEASE | REC_NOSTACK => {}
            REC_SAMPLE | REC_GROW if b.len() >= SAMPLE_HEADER => {
                let len = (u32_at(40)? as usize).min(STACK_BYTES).min(b.len() - SAMPLE_HEADER);
                e.regs = Some(StackCopy {
                    ip: u64_at(48)?,
                    sp: u64_at(56)?,
                    bp: u64_at(64)?,
                    stack: b[SAMPLE_HEADER..SAMPLE_HEADER + len].to_vec(),
                });
            }
            _ => return None,
        }
        Some(e)
    }
}

/// A thread's exact counts over the trace (`struct thread_counts`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ThreadCounts {
    /// Anonymous pages first touched, bytes.
    pub anon_bytes: u64,
    /// File-backed pages first touched, bytes.
    pub file_bytes: u64,
    /// Of those, bytes whose sample was lost (the ring buffer was full).
    pub lost: u64,
    /// Address space grown (brk, mmap, mremap, mprotect), bytes.
    pub mapped: u64,
    /// Address space given back (munmap, madvise, brk, mremap), bytes.
    pub released: u64,
}

impl ThreadCounts {
    pub fn decode(v: &[u8]) -> Option<ThreadCounts> {
        let u64_at = |o: usize| v.get(o..o + 8).map(|x| u64::from_le_bytes(x.try_into().unwrap()));
        Some(ThreadCounts {
            anon_bytes: u64_at(0)?,
            file_bytes: u64_at(8)?,
            lost: u64_at(16)?,
            mapped: u64_at(24)?,
            released: u64_at(32)?,
        })
    }

    pub fn add(&mut self, o: &ThreadCounts) {
        self.anon_bytes += o.anon_bytes;
        self.file_bytes += o.file_bytes;
        self.lost += o.lost;
        self.mapped += o.mapped;
        self.released += o.released;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: u64, what: u32, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        b[0..8].copy_from_slice(&kind.to_le_bytes());
        b[8..16].copy_from_slice(&1_000u64.to_le_bytes());
        b[16..24].copy_from_slice(&(1u64 << 20).to_le_bytes());
        b[24..32].copy_from_slice(&0x7f00_0000_1000u64.to_le_bytes());
        b[32..36].copy_from_slice(&4242u32.to_le_bytes());
        b[36..40].copy_from_slice(&what.to_le_bytes());
        b
    }

    #[test]
    fn samples_carry_their_stack_and_releases_none() {
        let mut b = header(REC_SAMPLE, 1, SAMPLE_HEADER + STACK_BYTES);
        b[40..44].copy_from_slice(&4096u32.to_le_bytes());
        b[48..56].copy_from_slice(&0x5555u64.to_le_bytes());
        b[56..64].copy_from_slice(&0x7ffe_0000u64.to_le_bytes());
        b[SAMPLE_HEADER] = 0xaa;
        let e = Event::decode(&b).unwrap();
        assert_eq!((e.tid, e.what, e.bytes, e.release), (4242, What::FaultAnon, 1 << 20, false));
        let r = e.regs.unwrap();
        assert_eq!((r.ip, r.sp, r.stack.len(), r.stack[0]), (0x5555, 0x7ffe_0000, 4096, 0xaa));

        let e = Event::decode(&header(REC_RELEASE, 7, SMALL_BYTES)).unwrap();
        assert_eq!((e.what, e.release, e.regs), (What::Munmap, true, None));
        let e = Event::decode(&header(REC_NOSTACK, 2, SMALL_BYTES)).unwrap();
        assert_eq!((e.what, e.release, e.regs), (What::FaultFile, false, None));
    }

    #[test]
    fn short_or_unknown_records_are_refused() {
        assert_eq!(Event::decode(&header(REC_SAMPLE, 1, 50)), None);
        assert_eq!(Event::decode(&header(9, 1, SMALL_BYTES)), None);
        assert_eq!(Event::decode(&header(REC_RELEASE, 99, SMALL_BYTES)), None);
        assert_eq!(Event::decode(&[1, 0, 0]), None);
    }
}
