//! Unwinding: a pure function of registers, copied stack bytes and the
//! modules' unwind tables (DWARF CFI from `.eh_frame`/`.debug_frame`, with
//! framehop's frame-pointer and prologue/epilogue analysis as fallbacks).
//! It runs after the threads were resumed, so its cost is never the server's.

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{FrameAddress, Unwinder};

use crate::capture::Regs;

/// Frames deeper than this are cut (mysqld stacks are far shallower; a
/// runaway unwind on garbage must not loop).
pub const MAX_FRAMES: usize = 512;

/// One unwound frame: the address and whether it is a return address (the
/// caller's lookup address is `addr - 1`, inside the call instruction).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RawFrame {
    pub addr: u64,
    pub is_return: bool,
}

impl RawFrame {
    /// The address to symbolize.
    pub fn lookup(&self) -> u64 {
        if self.is_return {
            self.addr.wrapping_sub(1)
        } else {
            self.addr
        }
    }
}

/// Outcome of unwinding one thread.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unwound {
    /// Innermost first.
    pub frames: Vec<RawFrame>,
    /// Why unwinding stopped early, if it did (for honest "truncated" marks).
    pub error: Option<String>,
}

/// Unwind one thread from its registers and a copy of its stack that starts
/// at `stack_addr`.
pub fn unwind<D: std::ops::Deref<Target = [u8]>>(
    unwinder: &UnwinderX86_64<D>,
    cache: &mut CacheX86_64,
    regs: &Regs,
    stack_addr: u64,
    stack: &[u8],
) -> Unwound {
    let mut read_stack = |addr: u64| -> Result<u64, ()> {
        let off = addr.checked_sub(stack_addr).ok_or(())? as usize;
        let b = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
        Ok(u64::from_le_bytes(b.try_into().unwrap()))
    };
    let fregs = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
    let mut it = unwinder.iter_frames(regs.ip, fregs, cache, &mut read_stack);
    let mut out = Unwound::default();
    loop {
        match it.next() {
            Ok(Some(f)) => {
                let rf = match f {
                    FrameAddress::InstructionPointer(a) => RawFrame { addr: a, is_return: false },
                    FrameAddress::ReturnAddress(a) => RawFrame { addr: a.get(), is_return: true },
                };
                out.frames.push(rf);
                if out.frames.len() >= MAX_FRAMES {
                    out.error = Some(format!("more than {MAX_FRAMES} frames"));
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                out.error = Some(e.to_string());
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use framehop::{ExplicitModuleSectionInfo, Module};

    /// A hand-made module with frame-pointer code (no CFI): framehop falls back
    /// to rbp chains, so a synthetic stack of [saved rbp, return addr] pairs
    /// must unwind to exactly those return addresses, and stop where the
    /// copied stack ends.
    #[test]
    fn frame_pointer_chain_from_copied_bytes() {
        let mut u: UnwinderX86_64<Vec<u8>> = UnwinderX86_64::new();
        let text_svma = 0x1000..0x2000;
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: Some(text_svma.clone()),
            text: Some(vec![0x90; 0x1000]),
            ..Default::default()
        };
        u.add_module(Module::new("fake".into(), 0x40_1000..0x40_2000, 0x40_0000, info));
        let mut cache = CacheX86_64::new();
        // stack at 0x7000: frame 1 at 0x7000 (rbp) -> [0x7010, ret 0x401234]; frame 2 at 0x7010 -> [0x7020, ret 0x401456]; frame 3 -> [0, 0]
        let sp = 0x7000u64;
        let mut st = vec![];
        for w in [0x7010u64, 0x40_1234, 0x7020, 0x40_1456, 0, 0] {
            st.extend_from_slice(&w.to_le_bytes());
        }
        let regs = Regs { ip: 0x40_1100, sp, bp: 0x7000, orig_ax: -1, ..Default::default() };
        let r = unwind(&u, &mut cache, &regs, sp, &st);
        let addrs: Vec<u64> = r.frames.iter().map(|f| f.addr).collect();
        assert_eq!(addrs, vec![0x40_1100, 0x40_1234, 0x40_1456]);
        assert!(!r.frames[0].is_return && r.frames[1].is_return);
        assert_eq!(r.frames[1].lookup(), 0x40_1233);

        // The same stack cut short after the first pair: unwinding stops there, with no invented frames.
        let r = unwind(&u, &mut cache, &regs, sp, &st[..16]);
        assert_eq!(r.frames.iter().map(|f| f.addr).collect::<Vec<_>>(), vec![0x40_1100, 0x40_1234]);
    }
}
