// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
//
// Contended futex waits of one process, seen from the kernel.
//
// Every contended pthread mutex, rwlock and condition variable, and every
// InnoDB srw lock in MariaDB 10.6+, sleeps in futex(FUTEX_WAIT*). The fast
// paths never enter the kernel, so tracing the futex system call costs
// nothing where there is no contention.
//
// * sys_enter_futex: a wait starts. Its start time, address, operation and
//   expected value are kept in the thread's task storage. If the wait is
//   within this CPU's share of the per-second stack budget, the bytes
//   around the futex word are read too (a mutex's owner field, read while
//   the lock is still held) and the wait is marked to be recorded.
// * sys_exit_futex: the wait ended. Every wait is counted in a per-CPU,
//   per-address table (count, total and longest wait, log2 histogram), so
//   totals are exact; a marked wait, and the first wait on an address seen
//   by a CPU, goes to a ring buffer with the thread's user registers and
//   the top of its user stack, to be unwound in user space (the server has
//   no frame pointers, so the kernel cannot walk its stacks).
//
// The work sits on the lock handoff's path (a woken waiter runs the exit
// probe before it takes the lock), so it is kept to per-thread and per-CPU
// data: no shared cache line is written, no lock taken, for a wait that is
// only counted.
//
// Only the process in target_tgid is looked at: for every other process
// each probe is a comparison and a return.
//
// Declared by hand instead of generated from vmlinux.h: the tracepoint
// records' layout is the stable syscall tracepoint ABI and pt_regs is the
// x86-64 user register layout, so no kernel headers are needed to build.

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

#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_HASH 5
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_RINGBUF 27
#define BPF_MAP_TYPE_TASK_STORAGE 29
#define BPF_F_NO_PREALLOC 1
#define BPF_LOCAL_STORAGE_GET_F_CREATE 1
#define BPF_ANY 0
#define BPF_NOEXIST 1

#define STACK_BYTES 8192
#define WINDOW_BEFORE 16
#define WINDOW_BYTES 48
#define HIST_BUCKETS 32
#define MAX_LOCKS 65536

struct sys_enter_rec {
	__u64 common;
	__s64 id;
	__u64 args[6];
};

struct sys_exit_rec {
	__u64 common;
	__s64 id;
	__s64 ret;
};

// x86-64 struct pt_regs (arch/x86/include/asm/ptrace.h).
struct user_regs {
	__u64 r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	__u64 ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

struct task_struct;

// Set by user space before loading.
const volatile __u32 target_tgid = 0;
// Waits recorded with their stack per second on each CPU (user space
// divides its budget among the CPUs); the others are counted only.
const volatile __u64 cpu_budget = 1000;

struct start {
	__u64 ts;
	__u64 uaddr;
	__u32 op;
	__u32 val;
	__u32 record;
	__u32 pad;
	__u8 window[WINDOW_BYTES];
};

struct lock_stats {
	__u64 count;
	__u64 total_ns;
	__u64 max_ns;
	__u32 op;
	__u32 pad;
	__u64 hist[HIST_BUCKETS];
};

static const struct lock_stats zero_stats = {};

// What user space reads for each recorded wait. Kept in sync with
// event.rs.
struct record {
	__u64 ts_end;
	__u64 wait_ns;
	__u64 uaddr;
	__u32 tid;
	__u32 op;
	__u32 val;
	__s32 ret;
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u32 stack_len;
	__u32 pad;
	__u8 window[WINDOW_BYTES];
	__u8 stack[STACK_BYTES];
};

// Counters (per CPU): waits seen, records sent, over budget, ring buffer
// full, per-address table full, stack unreadable, no task storage.
#define C_WAITS 0
#define C_SENT 1
#define C_BUDGET 2
#define C_RINGFULL 3
#define C_LOCKSFULL 4
#define C_NOSTACK 5
#define C_NOSTORAGE 6
#define NCOUNTERS 8

// The wait in progress, per thread: task storage hangs off the thread's
// task_struct, so finding it is a pointer away (a hash keyed by tid would
// take a bucket lock on every update and delete).
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct start);
} starts SEC(".maps");

// Per CPU: no atomics, no cache line shared between CPUs.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, MAX_LOCKS);
	__type(key, __u64);
	__type(value, struct lock_stats);
} locks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 32 << 20);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NCOUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// This CPU's stack budget: the current second and what was spent in it.
struct budget {
	__u64 second;
	__u64 spent;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct budget);
} budget SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &which);
	if (c)
		*c += 1;
}

static __always_inline int is_wait(__u32 op)
{
	__u32 cmd = op & ~(128 | 256); // FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME
	// FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI,
	// FUTEX_LOCK_PI2
	return cmd == 0 || cmd == 6 || cmd == 9 || cmd == 11 || cmd == 13;
}

static __always_inline __u32 log2_bucket(__u64 v)
{
	__u32 b = 0;
#pragma unroll
	for (int i = 0; i < HIST_BUCKETS - 1; i++) {
		if (v > 1) {
			v >>= 1;
			b++;
		}
	}
	return b;
}

// Whether this CPU's budget has room for one more stack this second.
static __always_inline int within_budget(__u64 now)
{
	__u32 zero = 0;
	struct budget *bg = bpf_map_lookup_elem(&budget, &zero);
	if (!bg)
		return 0;
	__u64 second = now / 1000000000ULL;
	if (bg->second != second) {
		bg->second = second;
		bg->spent = 0;
	}
	if (bg->spent >= cpu_budget)
		return 0;
	bg->spent++;
	return 1;
}

SEC("tracepoint/syscalls/sys_enter_futex")
int futex_enter(struct sys_enter_rec *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if ((__u32)(id >> 32) != target_tgid)
		return 0;
	__u32 op = (__u32)ctx->args[1];
	if (!is_wait(op))
		return 0;
	struct start *s = bpf_task_storage_get(&starts, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!s) {
		count(C_NOSTORAGE);
		return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	s->uaddr = ctx->args[0];
	s->op = op;
	s->val = (__u32)ctx->args[2];
	s->record = within_budget(now);
	if (s->record && bpf_probe_read_user(s->window, WINDOW_BYTES, (void *)(s->uaddr - WINDOW_BEFORE)) != 0)
		__builtin_memset(s->window, 0, WINDOW_BYTES);
	s->ts = now;
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_futex")
int futex_exit(struct sys_exit_rec *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if ((__u32)(id >> 32) != target_tgid)
		return 0;
	struct start *s = bpf_task_storage_get(&starts, bpf_get_current_task_btf(), 0, 0);
	if (!s || s->ts == 0)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 wait = now - s->ts;
	__u64 uaddr = s->uaddr;
	s->ts = 0;
	count(C_WAITS);

	int first = 0;
	struct lock_stats *ls = bpf_map_lookup_elem(&locks, &uaddr);
	if (!ls) {
		bpf_map_update_elem(&locks, &uaddr, &zero_stats, BPF_NOEXIST);
		ls = bpf_map_lookup_elem(&locks, &uaddr);
		if (ls)
			ls->op = s->op;
	}
	if (ls) {
		// A word's first wait on this CPU is recorded whatever the
		// budget: every lock seen gets a stack to be named by.
		first = ls->count == 0;
		ls->count++;
		ls->total_ns += wait;
		if (wait > ls->max_ns)
			ls->max_ns = wait;
		__u32 b = log2_bucket(wait / 1000);
		if (b < HIST_BUCKETS)
			ls->hist[b]++;
	} else {
		count(C_LOCKSFULL);
	}
	if (!s->record && !first) {
		count(C_BUDGET);
		return 0;
	}

	struct record *r = bpf_ringbuf_reserve(&events, sizeof(struct record), 0);
	if (!r) {
		count(C_RINGFULL);
		return 0;
	}
	r->ts_end = now;
	r->wait_ns = wait;
	r->uaddr = uaddr;
	r->tid = (__u32)id;
	r->op = s->op;
	r->val = s->val;
	r->ret = (__s32)ctx->ret;
	if (s->record)
		__builtin_memcpy(r->window, s->window, WINDOW_BYTES);
	else
		__builtin_memset(r->window, 0, WINDOW_BYTES);
	r->ip = 0;
	r->sp = 0;
	r->bp = 0;
	r->stack_len = 0;
	struct task_struct *task = bpf_get_current_task_btf();
	struct user_regs *regs = (struct user_regs *)bpf_task_pt_regs(task);
	struct user_regs u;
	if (regs && bpf_probe_read_kernel(&u, sizeof(u), regs) == 0) {
		r->ip = u.ip;
		r->sp = u.sp;
		r->bp = u.bp;
		// The top of the stack: as much of STACK_BYTES as is mapped (a
		// thread's stack can end closer than that above its pointer).
		if (bpf_probe_read_user(r->stack, STACK_BYTES, (void *)u.sp) == 0)
			r->stack_len = STACK_BYTES;
		else if (bpf_probe_read_user(r->stack, 4096, (void *)u.sp) == 0)
			r->stack_len = 4096;
		else if (bpf_probe_read_user(r->stack, 1024, (void *)u.sp) == 0)
			r->stack_len = 1024;
		else
			count(C_NOSTACK);
	} else {
		count(C_NOSTACK);
	}
	bpf_ringbuf_submit(r, 0);
	count(C_SENT);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
