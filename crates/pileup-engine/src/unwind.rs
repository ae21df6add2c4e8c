//! Unwinding: a pure function of registers, copied stack bytes and the
//! modules' unwind tables (DWARF CFI from `.eh_frame`/`.debug_frame`, with
//! framehop's frame-pointer and prologue/epilogue analysis as fallbacks).
//! It runs after the threads were resumed, so its cost is never the server's.

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{FrameAddress, Unwinder};

use crate::regs::Regs;

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

/// How far above a frame's stack pointer its return address is looked for
/// when its frame pointer is not known.
const SCAN_BYTES: u64 = 64 * 1024;

/// Frames that must unwind after a scanned frame for it to be taken.
const SCAN_CONFIRM: usize = 2;

/// Unwind one thread from its registers and a copy of its stack that starts
/// at `stack_addr`. `call_ok(ra, pc)` says whether `ra` can be the return
/// address of a call into the function holding `pc`: it lies in a loaded
/// module's code and, where the call before it is direct, calls that
/// function.
///
/// A thread read without stopping it (passive capture) has no frame
/// pointer (`regs.bp == 0`). Where a frame keeps its frame in `rbp` and no
/// inner frame saved it, its CFA cannot be computed from the rules alone;
/// then the frame's return address is searched above its stack pointer:
/// the ABI puts every CFA on a 16-byte boundary, the word below it must be
/// a return address into code whose call, where direct, is to this frame's
/// function (a stale return address left by an earlier call is not), and
/// the unwind from there must go on for
/// [`SCAN_CONFIRM`] more frames (or end at a thread's root) before the
/// frame is taken. Otherwise the stack ends there, marked truncated.
pub fn unwind<D: std::ops::Deref<Target = [u8]>>(
    unwinder: &UnwinderX86_64<D>,
    cache: &mut CacheX86_64,
    regs: &Regs,
    stack_addr: u64,
    stack: &[u8],
    call_ok: impl Fn(u64, u64) -> bool,
) -> Unwound {
    let mut read_stack = |addr: u64| -> Result<u64, ()> {
        let off = addr.checked_sub(stack_addr).ok_or(())? as usize;
        let b = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
        Ok(u64::from_le_bytes(b.try_into().unwrap()))
    };
    let mut fregs = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
    let mut addr = FrameAddress::from_instruction_pointer(regs.ip);
    let mut out = Unwound { frames: vec![raw(addr)], error: None };
    let push = |out: &mut Unwound, ra: u64| -> Option<FrameAddress> {
        let a = FrameAddress::from_return_address(ra)?;
        out.frames.push(raw(a));
        Some(a)
    };
    loop {
        if out.frames.len() >= MAX_FRAMES {
            out.error = Some(format!("more than {MAX_FRAMES} frames"));
            break;
        }
        let before = fregs;
        let (error, min_frames) = match unwinder.unwind_frame(addr, &mut fregs, cache, &mut read_stack) {
            Ok(Some(ra)) => {
                match push(&mut out, ra) {
                    Some(a) => addr = a,
                    None => {
                        out.error = Some("return address is null".into());
                        break;
                    }
                }
                continue;
            }
            // Without a frame pointer framehop also ends a stack where a
            // frame-pointer rule meets rbp = 0: look for the caller as for
            // an error, but take it only if it leads to at least one more
            // frame (a thread's root has none above it).
            Ok(None) => (None, 1),
            Err(e) => (Some(e.to_string()), 0),
        };
        let len = stack.len() as u64;
        let found = (before.bp() == 0)
            .then(|| scan(unwinder, cache, addr, &before, stack_addr, len, &mut read_stack, &call_ok, min_frames))
            .flatten();
        match found.and_then(|(ra, r)| Some((push(&mut out, ra)?, r))) {
            Some((a, r)) => {
                addr = a;
                fregs = r;
            }
            None => {
                out.error = error;
                break;
            }
        }
    }
    out
}

/// Whether the 8 bytes before a return address end with an x86-64 call
/// instruction: `Some(Some(rel))` for a direct `call rel32`, `Some(None)`
/// for an indirect `call r/m64` (through a register or memory, with or
/// without a REX prefix), `None` for no call. Decoded by hand: a disassembler
/// crate for one opcode's encodings is more than this needs.
pub fn call_before(b: &[u8; 8]) -> Option<Option<i32>> {
    if b[3] == 0xe8 {
        return Some(Some(i32::from_le_bytes([b[4], b[5], b[6], b[7]])));
    }
    // `ff /2`: the ModRM's reg field is 2; the instruction's length follows
    // from mod and rm (SIB byte, 8- or 32-bit displacement, RIP-relative).
    let len_of = |modrm: u8| -> Option<usize> {
        if modrm & 0x38 != 0x10 {
            return None;
        }
        let (md, rm) = (modrm >> 6, modrm & 7);
        let sib = usize::from(md != 3 && rm == 4);
        Some(
            2 + sib
                + match md {
                    0 if rm == 5 => 4,
                    0 | 3 => 0,
                    1 => 1,
                    _ => 4,
                },
        )
    };
    (2..=7).find_map(|len| {
        let at = 8 - len;
        let rex = at > 0 && (0x40..=0x4f).contains(&b[at - 1]);
        (b[at] == 0xff && len_of(b[at + 1]) == Some(len)).then(|| {
            let _ = rex; // a REX prefix before it changes nothing here
            None
        })
    })
}

fn raw(f: FrameAddress) -> RawFrame {
    match f {
        FrameAddress::InstructionPointer(a) => RawFrame { addr: a, is_return: false },
        FrameAddress::ReturnAddress(a) => RawFrame { addr: a.get(), is_return: true },
    }
}

/// The return address of frame `addr` and the registers after it, found by
/// trying each 16-byte aligned CFA above the frame's stack pointer as its
/// frame pointer + 16 (see [`unwind`]).
#[allow(clippy::too_many_arguments)]
fn scan<D: std::ops::Deref<Target = [u8]>, F: FnMut(u64) -> Result<u64, ()>>(
    unwinder: &UnwinderX86_64<D>,
    cache: &mut CacheX86_64,
    addr: FrameAddress,
    regs: &UnwindRegsX86_64,
    stack_addr: u64,
    stack_len: u64,
    read_stack: &mut F,
    call_ok: &impl Fn(u64, u64) -> bool,
    min_frames: usize,
) -> Option<(u64, UnwindRegsX86_64)> {
    let top = stack_addr.saturating_add(stack_len).min(regs.sp().saturating_add(SCAN_BYTES));
    let mut cfa = (regs.sp() + 8 + 15) & !15;
    while cfa <= top {
        let ra = read_stack(cfa - 8).ok()?;
        if call_ok(ra, raw(addr).lookup()) {
            let mut r = *regs;
            r.set_bp(cfa - 16);
            if let Ok(Some(got)) = unwinder.unwind_frame(addr, &mut r, cache, read_stack) {
                if got == ra && confirms(unwinder, cache, ra, &r, read_stack, call_ok, min_frames) {
                    return Some((ra, r));
                }
            }
        }
        cfa += 16;
    }
    None
}

/// Whether the unwind from return address `ra` goes on for
/// [`SCAN_CONFIRM`] frames in code, or reaches a root after `min_frames`.
fn confirms<D: std::ops::Deref<Target = [u8]>, F: FnMut(u64) -> Result<u64, ()>>(
    unwinder: &UnwinderX86_64<D>,
    cache: &mut CacheX86_64,
    ra: u64,
    regs: &UnwindRegsX86_64,
    read_stack: &mut F,
    call_ok: &impl Fn(u64, u64) -> bool,
    min_frames: usize,
) -> bool {
    let mut r = *regs;
    let Some(mut a) = FrameAddress::from_return_address(ra) else { return false };
    for i in 0..SCAN_CONFIRM {
        match unwinder.unwind_frame(a, &mut r, cache, read_stack) {
            Ok(Some(next)) if call_ok(next, raw(a).lookup()) => match FrameAddress::from_return_address(next) {
                Some(n) => a = n,
                None => return false,
            },
            Ok(None) => return i >= min_frames,
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_told_from_other_code() {
        // call rel32 (+0x10)
        assert_eq!(call_before(&[0x90, 0x90, 0x90, 0xe8, 0x10, 0, 0, 0]), Some(Some(0x10)));
        // call *%rax; call *0x18(%rbx); call *0x200(%rip); call *%r12 (REX.B)
        assert_eq!(call_before(&[0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0xff, 0xd0]), Some(None));
        assert_eq!(call_before(&[0x90, 0x90, 0x90, 0x90, 0x90, 0xff, 0x53, 0x18]), Some(None));
        assert_eq!(call_before(&[0x90, 0x90, 0xff, 0x15, 0, 2, 0, 0]), Some(None));
        assert_eq!(call_before(&[0x90, 0x90, 0x90, 0x90, 0x90, 0x41, 0xff, 0xd4]), Some(None));
        // syscall; jmp *%rax (ff /4); plain data
        assert_eq!(call_before(&[0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x0f, 0x05]), None);
        assert_eq!(call_before(&[0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0xff, 0xe0]), None);
        assert_eq!(call_before(&[0; 8]), None);
    }
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
        let r = unwind(&u, &mut cache, &regs, sp, &st, |_, _| true);
        let addrs: Vec<u64> = r.frames.iter().map(|f| f.addr).collect();
        assert_eq!(addrs, vec![0x40_1100, 0x40_1234, 0x40_1456]);
        assert!(!r.frames[0].is_return && r.frames[1].is_return);
        assert_eq!(r.frames[1].lookup(), 0x40_1233);

        // The same stack cut short after the first pair: unwinding stops there, with no invented frames.
        let r = unwind(&u, &mut cache, &regs, sp, &st[..16], |_, _| true);
        assert_eq!(r.frames.iter().map(|f| f.addr).collect::<Vec<_>>(), vec![0x40_1100, 0x40_1234]);
    }
}
