// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
//
// What pileup's eBPF programs share (this crate's and pileup-locks'): the
// kernel's fixed-width types and libbpf's helpers, and the x86-64 user
// register layout. Declared by hand instead of generated from vmlinux.h:
// the task fields a program reads are declared where it reads them and
// relocated by libbpf (CO-RE), so no kernel headers are needed to build.

#ifndef PILEUP_BPF_H
#define PILEUP_BPF_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef int __s32;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u64 __be64;
typedef __u32 __wsum;

#include <bpf/bpf_helpers.h>

// x86-64 struct pt_regs (arch/x86/include/asm/ptrace.h).
struct user_regs {
	__u64 r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	__u64 ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

#endif
