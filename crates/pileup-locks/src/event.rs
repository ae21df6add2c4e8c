//! One traced wait as the eBPF program records it (`struct record` in
//! `bpf/futex.bpf.c`), decoded from the ring buffer's bytes. Pure: tested
//! without a kernel.

/// Bytes before the futex word in [`Event::window`] (`WINDOW_BEFORE`).
pub const WINDOW_BEFORE: u64 = 16;
/// Bytes around the futex word read when the wait began (`WINDOW_BYTES`).
pub const WINDOW_BYTES: usize = 48;
/// The most stack copied above the waiter's stack pointer (`STACK_BYTES`).
pub const STACK_BYTES: usize = 16384;

const HEADER: usize = 64;
/// Size of a recorded wait's start (`struct start_rec`).
pub const RECORD_BYTES: usize = HEADER + WINDOW_BYTES + STACK_BYTES;
/// Size of a recorded wait's end (`struct end_rec`).
pub const END_BYTES: usize = 32;

const REC_START: u64 = 1;
const REC_END: u64 = 2;

/// Buckets of the per-lock log2 histogram (`HIST_BUCKETS`): bucket `i`
/// counts waits of `[2^i, 2^(i+1))` µs, bucket 0 also those under 1 µs.
pub const HIST_BUCKETS: usize = 32;

/// One contended wait, with what is needed to unwind the waiter. Its
/// length is known once its end arrives (or the trace ends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// When the wait began (CLOCK_MONOTONIC, ns).
    pub start_ns: u64,
    pub wait_ns: u64,
    /// The futex word waited on.
    pub uaddr: u64,
    pub tid: i32,
    /// futex operation (`FUTEX_WAIT_PRIVATE`, `FUTEX_WAIT_BITSET|…`).
    pub op: u32,
    /// The value the waiter expected in the futex word.
    pub val: u32,
    /// The wait had not ended when the trace did: `wait_ns` is the time
    /// waited so far.
    pub in_progress: bool,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// [`WINDOW_BYTES`] bytes starting [`WINDOW_BEFORE`] before the futex
    /// word, read as the wait began (a mutex's owner field is there).
    pub window: [u8; WINDOW_BYTES],
    /// The copied top of the stack, starting at `sp` (empty if unreadable).
    pub stack: Vec<u8>,
}

/// A ring buffer record: a recorded wait's start, or its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Start(Event),
    End { tid: i32, start_ns: u64, end_ns: u64 },
}

impl Record {
    /// Decode a record; `None` if it is of no known kind or too short.
    pub fn decode(b: &[u8]) -> Option<Record> {
        let u64_at = |o: usize| b.get(o..o + 8).map(|x| u64::from_le_bytes(x.try_into().unwrap()));
        let u32_at = |o: usize| b.get(o..o + 4).map(|x| u32::from_le_bytes(x.try_into().unwrap()));
        match u64_at(0)? {
            REC_END if b.len() >= END_BYTES => {
                Some(Record::End { start_ns: u64_at(8)?, end_ns: u64_at(16)?, tid: u32_at(24)? as i32 })
            }
            REC_START if b.len() >= RECORD_BYTES => {
                let stack_len = (u32_at(36)? as usize).min(STACK_BYTES);
                Some(Record::Start(Event {
                    start_ns: u64_at(8)?,
                    wait_ns: 0,
                    uaddr: u64_at(16)?,
                    tid: u32_at(24)? as i32,
                    op: u32_at(28)?,
                    val: u32_at(32)?,
                    in_progress: false,
                    ip: u64_at(40)?,
                    sp: u64_at(48)?,
                    bp: u64_at(56)?,
                    window: b[HEADER..HEADER + WINDOW_BYTES].try_into().unwrap(),
                    stack: b[HEADER + WINDOW_BYTES..HEADER + WINDOW_BYTES + stack_len].to_vec(),
                }))
            }
            _ => None,
        }
    }
}

/// What the kernel side counted for one futex word over the whole trace:
/// every contended wait, whether or not its stack was recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WordStats {
    pub count: u64,
    /// Of `count`, waits still in progress when the trace ended (counted
    /// with the time waited so far).
    pub in_progress: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    pub op: u32,
    pub hist: [u64; HIST_BUCKETS],
}

impl WordStats {
    /// Count one wait of `ns`.
    pub fn add_wait(&mut self, ns: u64, in_progress: bool) {
        self.count += 1;
        self.in_progress += in_progress as u64;
        self.total_ns += ns;
        self.max_ns = self.max_ns.max(ns);
        let us = ns / 1000;
        let b = if us < 2 { 0 } else { (63 - us.leading_zeros()) as usize };
        self.hist[b.min(HIST_BUCKETS - 1)] += 1;
    }

    /// Add another word's counts (two futex words of one lock).
    pub fn add(&mut self, o: &WordStats) {
        self.count += o.count;
        self.in_progress += o.in_progress;
        self.total_ns += o.total_ns;
        self.max_ns = self.max_ns.max(o.max_ns);
        for (a, b) in self.hist.iter_mut().zip(o.hist.iter()) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_decode_at_the_kernel_layout() {
        let mut b = vec![0u8; RECORD_BYTES];
        b[0..8].copy_from_slice(&1u64.to_le_bytes());
        b[8..16].copy_from_slice(&5u64.to_le_bytes());
        b[16..24].copy_from_slice(&0x5555_0000_1234u64.to_le_bytes());
        b[24..28].copy_from_slice(&4242u32.to_le_bytes());
        b[28..32].copy_from_slice(&128u32.to_le_bytes());
        b[32..36].copy_from_slice(&2u32.to_le_bytes());
        b[36..40].copy_from_slice(&4096u32.to_le_bytes());
        b[40..48].copy_from_slice(&0x7f00_0000_0010u64.to_le_bytes());
        b[48..56].copy_from_slice(&0x7ffd_0000_0000u64.to_le_bytes());
        b[HEADER + 16] = 2; // the lock word
        b[HEADER + WINDOW_BYTES] = 0xaa;
        let Some(Record::Start(e)) = Record::decode(&b) else { panic!("a start record") };
        assert_eq!((e.start_ns, e.uaddr, e.tid, e.op, e.val), (5, 0x5555_0000_1234, 4242, 128, 2));
        assert_eq!((e.ip, e.sp, e.bp), (0x7f00_0000_0010, 0x7ffd_0000_0000, 0));
        assert_eq!(e.window[WINDOW_BEFORE as usize], 2);
        assert_eq!(e.stack.len(), 4096);
        assert_eq!(e.stack[0], 0xaa);
        assert_eq!(Record::decode(&b[..RECORD_BYTES - 1]), None);

        let mut b = vec![0u8; END_BYTES];
        b[0..8].copy_from_slice(&2u64.to_le_bytes());
        b[8..16].copy_from_slice(&5u64.to_le_bytes());
        b[16..24].copy_from_slice(&1505u64.to_le_bytes());
        b[24..28].copy_from_slice(&4242u32.to_le_bytes());
        assert_eq!(Record::decode(&b), Some(Record::End { tid: 4242, start_ns: 5, end_ns: 1505 }));
        b[0] = 9;
        assert_eq!(Record::decode(&b), None);
    }

    #[test]
    fn waits_fall_in_log2_buckets_of_microseconds() {
        let mut w = WordStats::default();
        for ns in [500, 1_999, 2_000, 3_999, 4_000, 1_000_000] {
            w.add_wait(ns, false);
        }
        w.add_wait(10_000, true);
        assert_eq!((w.count, w.in_progress, w.max_ns), (7, 1, 1_000_000));
        assert_eq!(&w.hist[..4], &[2, 2, 1, 1]);
        // 1 ms = 1,000 µs: 2^9 ≤ it < 2^10.
        assert_eq!(w.hist[9], 1);
    }
}
