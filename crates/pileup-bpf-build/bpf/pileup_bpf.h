// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
//
// What pileup's eBPF programs share (the engine's, pileup-growth's,
// pileup-bench's, pileup-locks' and pileup-memory's): the kernel's
// fixed-width types and libbpf's helpers, the map types they use, the
// x86-64 user register layout, and the stack copy, counters, per-second
// budget and event ring every tracer uses. Declared by hand instead of generated from vmlinux.h:
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

// Map types and flags (include/uapi/linux/bpf.h), for the programs' map
// definitions and updates.
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_HASH 5
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_RINGBUF 27
#define BPF_NOEXIST 1
#define BPF_RB_NO_WAKEUP 1
#define BPF_F_NO_PREALLOC 1
#define BPF_F_MMAPABLE 1024

// x86-64 struct pt_regs (arch/x86/include/asm/ptrace.h).
struct user_regs {
	__u64 r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	__u64 ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

// Copy the top of a user stack, from its pointer `sp` up, into `dst`: as
// much of `max` bytes (a constant) as is mapped, trying shorter copies
// where the stack ends closer than that above its pointer. Returns the
// bytes copied, 0 if none could be.
static __always_inline __u32 pileup_copy_stack(__u8 *dst, __u32 max, __u64 sp)
{
	if (bpf_probe_read_user(dst, max, (void *)sp) == 0)
		return max;
	if (max > 8192 && bpf_probe_read_user(dst, 8192, (void *)sp) == 0)
		return 8192;
	if (max > 4096 && bpf_probe_read_user(dst, 4096, (void *)sp) == 0)
		return 4096;
	if (max > 1024 && bpf_probe_read_user(dst, 1024, (void *)sp) == 0)
		return 1024;
	return 0;
}

// Add one to counter `which` of a per-CPU array of counters.
static __always_inline void pileup_count(void *counters, __u32 which)
{
	__u64 *c = bpf_map_lookup_elem(counters, &which);
	if (c)
		*c += 1;
}

// A per-CPU budget of stacks a second: the current second and what was
// spent in it.
struct pileup_budget {
	__u64 second;
	__u64 spent;
};

// Whether this CPU's budget (the only element of the per-CPU array
// `budgets`) has room for one more stack this second, out of `limit`; if
// so it is spent.
static __always_inline int pileup_spend(void *budgets, __u64 limit)
{
	__u32 zero = 0;
	struct pileup_budget *bg = bpf_map_lookup_elem(budgets, &zero);
	if (!bg)
		return 0;
	__u64 second = bpf_ktime_get_ns() / 1000000000ULL;
	if (bg->second != second) {
		bg->second = second;
		bg->spent = 0;
	}
	if (bg->spent >= limit)
		return 0;
	bg->spent++;
	return 1;
}

// The maps every stack tracer declares: `events`, a ring buffer of
// `ring_bytes` (resized by the loader before it loads the program),
// `counters`, a per-CPU array of `ncounters` counters, and `budget`, the
// per-CPU budget of stacks a second; and `count(which)`, which adds one to
// a counter.
#define PILEUP_TRACER_MAPS(ncounters, ring_bytes)                              \
	struct {                                                               \
		__uint(type, BPF_MAP_TYPE_RINGBUF);                            \
		__uint(max_entries, ring_bytes);                               \
	} events SEC(".maps");                                                 \
	struct {                                                               \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                       \
		__uint(max_entries, ncounters);                                \
		__type(key, __u32);                                            \
		__type(value, __u64);                                          \
	} counters SEC(".maps");                                               \
	struct {                                                               \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                       \
		__uint(max_entries, 1);                                        \
		__type(key, __u32);                                            \
		__type(value, struct pileup_budget);                           \
	} budget SEC(".maps");                                                 \
	static __always_inline void count(__u32 which)                         \
	{                                                                      \
		pileup_count(&counters, which);                                \
	}

// Give ring record `r` the user registers `regs` point at and the top of
// that thread's stack (its `stack` array, `stack_len` set), submit it, and
// count it: `count(nostack)` when no stack could be copied, then
// `count(sent)`. A macro: each tracer's record has its own type.
#define PILEUP_SUBMIT_WITH_STACK(r, regs, nostack, sent)                       \
	do {                                                                   \
		__u64 sp__ = (regs)->sp;                                       \
		(r)->ip = (regs)->ip;                                          \
		(r)->sp = sp__;                                                \
		(r)->bp = (regs)->bp;                                          \
		(r)->stack_len = pileup_copy_stack((r)->stack, sizeof((r)->stack), sp__); \
		if (!(r)->stack_len)                                           \
			count(nostack);                                        \
		bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);                       \
		count(sent);                                                   \
	} while (0)

// `watched`: the threads a tracer follows (user space keeps the set
// current as threads come and go), by thread id.
#define PILEUP_WATCHED_THREADS_MAP                                             \
	struct {                                                               \
		__uint(type, BPF_MAP_TYPE_HASH);                               \
		__uint(map_flags, BPF_F_NO_PREALLOC);                          \
		__uint(max_entries, 65536);                                    \
		__type(key, __u32);                                            \
		__type(value, __u8);                                           \
	} watched SEC(".maps")

#endif
