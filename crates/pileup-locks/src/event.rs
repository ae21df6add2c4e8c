//! One traced wait as the eBPF program records it (`struct record` in
//! `bpf/futex.bpf.c`), decoded from the ring buffer's bytes. Pure: tested
//! without a kernel.

/// Bytes before the futex word in [`Event::window`] (`WINDOW_BEFORE`).
pub const WINDOW_BEFORE: u64 = 16;
/// Bytes around the futex word read when the wait began (`WINDOW_BYTES`).
pub const WINDOW_BYTES: usize = 48;
/// The most stack copied above the waiter's stack pointer (`STACK_BYTES`).
pub const STACK_BYTES: usize = 8192;

const HEADER: usize = 72;
/// Size of one record.
pub const RECORD_BYTES: usize = HEADER + WINDOW_BYTES + STACK_BYTES;

/// Buckets of the per-lock log2 histogram (`HIST_BUCKETS`): bucket `i`
/// counts waits of `[2^i, 2^(i+1))` µs, bucket 0 also those under 1 µs.
pub const HIST_BUCKETS: usize = 32;

/// One contended wait that ended, with what is needed to unwind the waiter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// When the wait ended (CLOCK_MONOTONIC, ns).
    pub end_ns: u64,
    pub wait_ns: u64,
    /// The futex word waited on.
    pub uaddr: u64,
    pub tid: i32,
    /// futex operation (`FUTEX_WAIT_PRIVATE`, `FUTEX_WAIT_BITSET|…`).
    pub op: u32,
    /// The value the waiter expected in the futex word.
    pub val: u32,
    /// The system call's return (0 woken, -110 timed out, -11 value changed).
    pub ret: i32,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// [`WINDOW_BYTES`] bytes starting [`WINDOW_BEFORE`] before the futex
    /// word, read as the wait began (a mutex's owner field is there).
    pub window: [u8; WINDOW_BYTES],
    /// The copied top of the stack, starting at `sp` (empty if unreadable).
    pub stack: Vec<u8>,
}

impl Event {
    /// Decode a record; `None` if it is shorter than one.
    pub fn decode(b: &[u8]) -> Option<Event> {
        if b.len() < RECORD_BYTES {
            return None;
        }
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let stack_len = (u32_at(64) as usize).min(STACK_BYTES);
        Some(Event {
            end_ns: u64_at(0),
            wait_ns: u64_at(8),
            uaddr: u64_at(16),
            tid: u32_at(24) as i32,
            op: u32_at(28),
            val: u32_at(32),
            ret: u32_at(36) as i32,
            ip: u64_at(40),
            sp: u64_at(48),
            bp: u64_at(56),
            window: b[HEADER..HEADER + WINDOW_BYTES].try_into().unwrap(),
            stack: b[HEADER + WINDOW_BYTES..HEADER + WINDOW_BYTES + stack_len].to_vec(),
        })
    }

    /// Whether the wait timed out rather than being woken (a timed
    /// condition wait that expired, a lock wait with a timeout).
    pub fn timed_out(&self) -> bool {
        self.ret == -libc::ETIMEDOUT
    }
}

/// What the kernel side counted for one futex word over the whole trace:
/// every contended wait, whether or not its stack was recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WordStats {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    pub op: u32,
    pub hist: [u64; HIST_BUCKETS],
}

impl WordStats {
    /// Add another word's counts (two futex words of one lock).
    pub fn add(&mut self, o: &WordStats) {
        self.count += o.count;
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
        b[0..8].copy_from_slice(&5u64.to_le_bytes());
        b[8..16].copy_from_slice(&1500u64.to_le_bytes());
        b[16..24].copy_from_slice(&0x5555_0000_1234u64.to_le_bytes());
        b[24..28].copy_from_slice(&4242u32.to_le_bytes());
        b[28..32].copy_from_slice(&128u32.to_le_bytes());
        b[32..36].copy_from_slice(&2u32.to_le_bytes());
        b[36..40].copy_from_slice(&(-110i32).to_le_bytes());
        b[40..48].copy_from_slice(&0x7f00_0000_0010u64.to_le_bytes());
        b[48..56].copy_from_slice(&0x7ffd_0000_0000u64.to_le_bytes());
        b[64..68].copy_from_slice(&4096u32.to_le_bytes());
        b[HEADER + 16] = 2; // the lock word
        b[HEADER + WINDOW_BYTES] = 0xaa;
        let e = Event::decode(&b).unwrap();
        assert_eq!((e.end_ns, e.wait_ns, e.uaddr, e.tid, e.op, e.val), (5, 1500, 0x5555_0000_1234, 4242, 128, 2));
        assert!(e.timed_out());
        assert_eq!((e.ip, e.sp, e.bp), (0x7f00_0000_0010, 0x7ffd_0000_0000, 0));
        assert_eq!(e.window[WINDOW_BEFORE as usize], 2);
        assert_eq!(e.stack.len(), 4096);
        assert_eq!(e.stack[0], 0xaa);
        assert_eq!(Event::decode(&b[..RECORD_BYTES - 1]), None);
    }
}
