//! Copies of another process's memory: a thread's stack and the words
//! around a lock, read with `process_vm_readv` (no stop needed).

use std::io::IoSliceMut;

use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;

use crate::proc::{find_map, MapEntry};

/// A thread's stack from `sp` up to the end of its mapping, at most
/// `stack_bytes`.
pub(crate) fn copy_stack(pid: i32, sp: u64, maps: &[MapEntry], stack_bytes: usize) -> Vec<u8> {
    let end = find_map(maps, sp).map(|m| m.end).unwrap_or(sp.saturating_add(stack_bytes as u64));
    let len = (end.saturating_sub(sp) as usize).min(stack_bytes);
    let mut stack = vec![0u8; len];
    let got = read_mem(pid, sp, &mut stack);
    stack.truncate(got);
    stack
}

/// Copy remote memory; returns how many bytes were read (partial at a fault).
pub fn read_mem(pid: i32, addr: u64, buf: &mut [u8]) -> usize {
    if buf.is_empty() {
        return 0;
    }
    let len = buf.len();
    let mut local = [IoSliceMut::new(buf)];
    let remote = [RemoteIoVec { base: addr as usize, len }];
    process_vm_readv(Pid::from_raw(pid), &mut local, &remote).unwrap_or(0)
}
