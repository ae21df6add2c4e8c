// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
//
// How one process's memory grows, seen from the kernel.
//
// * First touches of pages: the exceptions:page_fault_user tracepoint (a
//   BTF raw tracepoint: the faulting address, the user registers and the
//   error code). A fault on a page not present (error code bit 0 clear)
//   is a first touch, or a page coming back from swap; a protection fault
//   (copy-on-write, a write after a read of the zero page) is not counted.
//   The fault's mapping says whether the page is anonymous (malloc's
//   heaps, mmap'd chunks, stacks) or file-backed (code, mapped files).
//   Every fault is counted per thread, exactly. Faults are sampled by
//   bytes: a thread's faulted bytes accumulate, and when they pass its
//   next threshold (about `sample_period` bytes, jittered so that a
//   periodic pattern cannot line up with it) the fault that crossed it is
//   recorded with the thread's user registers and the top of its stack,
//   weighted by every byte since the last sample. Weights sum to the
//   exact total.
// * The address space: brk, mmap, mremap, mprotect (a PROT_NONE reserve
//   made writable: how glibc grows a thread arena's heap), munmap and
//   madvise(MADV_DONTNEED/MADV_FREE) from their syscall tracepoints,
//   counted per thread. Growth is recorded with its stack within the
//   budget; every release goes to user space as a range, without a stack,
//   so sampled pages can be followed to their release.
//
// Stacks are unwound in user space (the server has no frame pointers).
// Stack copies are limited per CPU per second (`cpu_budget`); past it a
// sample goes to user space without its stack (its thread and time still
// name the statement). Fault samples may spend three quarters of a
// second's budget; the last quarter is kept for address-space growth at
// least as large as a sample's period (a sort buffer's mmap, an arena's
// heap made writable), so a burst of faults cannot leave the mapping that
// explains them without its stack. Only the
// process in target_tgid is looked at: for every other task each probe is
// a comparison.

#include "pileup_bpf.h"
#include <bpf/bpf_core_read.h>


#define STACK_BYTES 16384
#define MAX_THREADS 65536
#define PAGE_BYTES 4096

// Record kinds (the first word of every ring buffer record).
#define REC_SAMPLE 1 // a sampled first touch, with its stack
#define REC_GROW 2 // address space grown, with its stack
#define REC_RELEASE 3 // a range given back, no stack
#define REC_NOSTACK 4 // a sample or growth over the stack budget, no stack

// What grew or was given back (the record's `what`).
#define W_FAULT_ANON 1
#define W_FAULT_FILE 2
#define W_MMAP 3
#define W_BRK 4
#define W_MREMAP 5
#define W_MPROTECT 6
#define W_MUNMAP 7
#define W_MADVISE 8
#define W_MMAP_FIXED 9

// mmap(2), mprotect(2), madvise(2) constants (x86-64).
#define PROT_WRITE 0x2
#define MAP_FIXED 0x10
#define MAP_ANONYMOUS 0x20
#define MADV_DONTNEED 4
#define MADV_FREE 8
#define MADV_REMOVE 9
#define MADV_DONTNEED_LOCKED 24

struct file;

struct mm_struct {
	unsigned long brk;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	struct mm_struct *mm;
} __attribute__((preserve_access_index));

struct vm_area_struct {
	struct file *vm_file;
} __attribute__((preserve_access_index));

// Set by user space before loading.
const volatile __u32 target_tgid = 0;
// Stacks recorded per second on each CPU.
const volatile __u64 cpu_budget = 100;

// Bytes between samples, kept by user space to the fault rate so that the
// stack budget is spent and not overrun (read at every threshold).
volatile __u64 sample_period = 1 << 20;

// A thread's exact counts (kept in sync with trace.rs).
struct thread_counts {
	__u64 anon_bytes;
	__u64 file_bytes;
	// Of anon_bytes + file_bytes, bytes whose sample was lost (the ring
	// buffer was full).
	__u64 lost;
	__u64 mapped; // brk, mmap, mremap and mprotect growth
	__u64 released; // munmap, madvise, brk and mremap shrinks
	__u64 pending; // bytes since the last sample
	__u64 next; // the next sample's threshold
};

struct sample_rec {
	__u64 kind;
	__u64 time;
	__u64 bytes;
	__u64 addr;
	__u32 tid;
	__u32 what;
	__u32 stack_len;
	__u32 pad;
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u8 stack[STACK_BYTES];
};

struct small_rec {
	__u64 kind;
	__u64 time;
	__u64 bytes;
	__u64 addr;
	__u32 tid;
	__u32 what;
};

_Static_assert(sizeof(struct thread_counts) == 56, "struct thread_counts is 56 bytes");
_Static_assert(__builtin_offsetof(struct sample_rec, stack) == 72, "sample_rec header is 72 bytes");
_Static_assert(sizeof(struct small_rec) == 40, "struct small_rec is 40 bytes");

// Counters (per CPU): samples sent, over budget, ring buffer full, stack
// unreadable, thread table full, faults whose mapping could not be looked
// up (counted as anonymous).
#define C_SENT 0
#define C_BUDGET 1
#define C_RINGFULL 2
#define C_NOSTACK 3
#define C_THREADSFULL 4
#define C_NOVMA 5
#define NCOUNTERS 6

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u32);
	__type(value, struct thread_counts);
} threads SEC(".maps");

PILEUP_TRACER_MAPS(NCOUNTERS, 16 << 20)

static const struct thread_counts zero_counts = {};

// The thread's counts, created empty if absent.
static __always_inline struct thread_counts *counts_of(__u32 tid)
{
	struct thread_counts *t = bpf_map_lookup_elem(&threads, &tid);
	if (t)
		return t;
	bpf_map_update_elem(&threads, &tid, &zero_counts, BPF_NOEXIST);
	t = bpf_map_lookup_elem(&threads, &tid);
	if (!t)
		count(C_THREADSFULL);
	return t;
}

// A record with the thread's registers and the top of its stack; 0 if the
// ring buffer was full.
static __always_inline int record_stack(__u64 kind, __u32 what, __u32 tid, __u64 bytes, __u64 addr,
					struct user_regs *regs)
{
	struct sample_rec *r = bpf_ringbuf_reserve(&events, sizeof(struct sample_rec), 0);
	if (!r) {
		count(C_RINGFULL);
		return 0;
	}
	r->kind = kind;
	r->time = bpf_ktime_get_ns();
	r->bytes = bytes;
	r->addr = addr;
	r->tid = tid;
	r->what = what;
	r->pad = 0;
	PILEUP_SUBMIT_WITH_STACK(r, regs, C_NOSTACK, C_SENT);
	return 1;
}

// A record without a stack: a release, or a sample or growth over the
// budget; 0 if the ring buffer was full.
static __always_inline int record_small(__u64 kind, __u32 what, __u32 tid, __u64 addr, __u64 bytes)
{
	struct small_rec *r = bpf_ringbuf_reserve(&events, sizeof(struct small_rec), 0);
	if (!r) {
		count(C_RINGFULL);
		return 0;
	}
	r->kind = kind;
	r->time = bpf_ktime_get_ns();
	r->bytes = bytes;
	r->addr = addr;
	r->tid = tid;
	r->what = what;
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
	return 1;
}

// The share of a second's stack budget that fault samples and small
// growth may spend: all but the quarter kept for large growth (at least
// one stack kept, unless the budget is one stack a second).
static __always_inline __u64 fault_budget(void)
{
	__u64 keep = cpu_budget / 4;
	if (keep == 0 && cpu_budget >= 2)
		keep = 1;
	return cpu_budget - keep;
}

// The next threshold: the period, jittered by ±50% (a uniform draw).
static __always_inline __u64 next_threshold(void)
{
	__u64 p = sample_period;
	if (p < PAGE_BYTES)
		p = PAGE_BYTES;
	return p / 2 + (bpf_get_prandom_u32() % (p + 1));
}

struct vma_ctx {
	int file;
};

static long vma_is_file(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct vma_ctx *c = data;
	c->file = vma->vm_file != 0;
	return 0;
}

// The task is ours: the current one, of the target process.
static __always_inline struct task_struct *ours(__u32 *tid)
{
	struct task_struct *task = bpf_get_current_task_btf();
	if ((__u32)task->tgid != target_tgid)
		return 0;
	*tid = (__u32)task->pid;
	return task;
}

// ctx: address, the user registers, error code.
SEC("tp_btf/page_fault_user")
int growth_fault(__u64 *ctx)
{
	__u32 tid;
	struct task_struct *task = ours(&tid);
	if (!task)
		return 0;
	// Bit 0 of the error code: the page was present (a protection fault).
	if (ctx[2] & 1)
		return 0;
	__u64 addr = ctx[0];
	struct vma_ctx vc = { .file = 0 };
	if (bpf_find_vma(task, addr, vma_is_file, &vc, 0) != 0)
		count(C_NOVMA);
	struct thread_counts *t = counts_of(tid);
	if (!t)
		return 0;
	if (vc.file)
		t->file_bytes += PAGE_BYTES;
	else
		t->anon_bytes += PAGE_BYTES;
	t->pending += PAGE_BYTES;
	if (t->next == 0)
		t->next = next_threshold();
	if (t->pending < t->next)
		return 0;
	__u64 weight = t->pending;
	t->pending = 0;
	t->next = next_threshold();
	__u32 what = vc.file ? W_FAULT_FILE : W_FAULT_ANON;
	int sent;
	if (pileup_spend(&budget, fault_budget())) {
		sent = record_stack(REC_SAMPLE, what, tid, weight, addr, (struct user_regs *)ctx[1]);
	} else {
		count(C_BUDGET);
		sent = record_small(REC_NOSTACK, what, tid, addr, weight);
	}
	if (!sent)
		t->lost += weight;
	return 0;
}

// The address space grew by `bytes` at `addr` (0 when not yet known).
static __always_inline void grew(__u32 what, __u32 tid, __u64 addr, __u64 bytes, struct task_struct *task)
{
	struct thread_counts *t = counts_of(tid);
	if (!t)
		return;
	t->mapped += bytes;
	if (pileup_spend(&budget, bytes >= sample_period ? cpu_budget : fault_budget())) {
		record_stack(REC_GROW, what, tid, bytes, addr, (struct user_regs *)bpf_task_pt_regs(task));
	} else {
		count(C_BUDGET);
		record_small(REC_NOSTACK, what, tid, addr, bytes);
	}
}

static __always_inline void released(__u32 what, __u32 tid, __u64 addr, __u64 bytes)
{
	struct thread_counts *t = counts_of(tid);
	if (!t)
		return;
	t->released += bytes;
	record_small(REC_RELEASE, what, tid, addr, bytes);
}

// A syscall tracepoint's record: the syscall number, then its arguments.
struct syscall_enter {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__u64 args[6];
};

SEC("tracepoint/syscalls/sys_enter_mmap")
int growth_mmap(struct syscall_enter *ctx)
{
	__u32 tid;
	struct task_struct *task = ours(&tid);
	if (!task)
		return 0;
	__u64 addr = ctx->args[0], len = ctx->args[1], prot = ctx->args[2], flags = ctx->args[3];
	// Mapping over a range replaces what was there (glibc shrinks a
	// thread arena's heap this way, with PROT_NONE).
	if (flags & MAP_FIXED)
		released(W_MMAP_FIXED, tid, addr, len);
	// Only writable anonymous memory can hold what the server allocates: a
	// PROT_NONE reserve grows when made writable (mprotect).
	if ((flags & MAP_ANONYMOUS) && (prot & PROT_WRITE))
		grew(W_MMAP, tid, addr, len, task);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_munmap")
int growth_munmap(struct syscall_enter *ctx)
{
	__u32 tid;
	if (!ours(&tid))
		return 0;
	released(W_MUNMAP, tid, ctx->args[0], ctx->args[1]);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_mremap")
int growth_mremap(struct syscall_enter *ctx)
{
	__u32 tid;
	struct task_struct *task = ours(&tid);
	if (!task)
		return 0;
	__u64 addr = ctx->args[0], old_len = ctx->args[1], new_len = ctx->args[2];
	if (new_len > old_len)
		grew(W_MREMAP, tid, addr + old_len, new_len - old_len, task);
	else if (new_len < old_len)
		released(W_MREMAP, tid, addr + new_len, old_len - new_len);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_mprotect")
int growth_mprotect(struct syscall_enter *ctx)
{
	__u32 tid;
	struct task_struct *task = ours(&tid);
	if (!task)
		return 0;
	if (ctx->args[2] & PROT_WRITE)
		grew(W_MPROTECT, tid, ctx->args[0], ctx->args[1], task);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_madvise")
int growth_madvise(struct syscall_enter *ctx)
{
	__u32 tid;
	if (!ours(&tid))
		return 0;
	__u64 advice = ctx->args[2];
	if (advice == MADV_DONTNEED || advice == MADV_FREE || advice == MADV_REMOVE || advice == MADV_DONTNEED_LOCKED)
		released(W_MADVISE, tid, ctx->args[0], ctx->args[1]);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_brk")
int growth_brk(struct syscall_enter *ctx)
{
	__u32 tid;
	struct task_struct *task = ours(&tid);
	if (!task)
		return 0;
	__u64 want = ctx->args[0];
	__u64 now = BPF_CORE_READ(task, mm, brk);
	if (want == 0 || now == 0)
		return 0;
	if (want > now)
		grew(W_BRK, tid, now, want - now, task);
	else if (want < now)
		released(W_BRK, tid, want, now - want);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
