// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
//
// Contended futex waits of one process, seen from the scheduler.
//
// Every contended pthread mutex, rwlock and condition variable, and every
// InnoDB srw lock in MariaDB 10.6+, sleeps in futex(FUTEX_WAIT*). The fast
// paths never enter the kernel, so tracing the sleeps costs nothing where
// there is no contention.
//
// One probe, on the scheduler's sched_switch tracepoint (a BTF raw
// tracepoint): a thread that gives up its CPU of its own accord while
// inside futex(2), with a wait operation in its registers, is going to
// sleep on that futex word; when the scheduler hands a CPU back to it, its
// wait has ended. The syscall tracepoints would see the same waits, but
// turning them on sends every system call of every process on the host
// through the kernel's slow system-call path, and their probes run in the
// woken waiter's path back to its lock; a context switch is already a
// microsecond's work, and there are far fewer of them than system calls.
// A futex call that finds the word changed and returns at once never
// sleeps and is not counted: it did not wait.
//
// * Switching out (a wait starts): the thread's previous wait, ended
//   since, goes to this CPU's part of the wait log, which user space maps
//   and counts per word (into a per-CPU, per-address table in the kernel
//   if the log is full), so totals are exact. The new wait's start,
//   address, operation and expected value go in the thread's slot.
//   Within this CPU's share of the per-second stack budget, and for an
//   address not recorded before, a record with the thread's user
//   registers, the top of its user stack and the bytes around the futex
//   word (a mutex's owner field, read while the lock is still held) goes
//   to a ring buffer, to be unwound in user space (the server has no frame
//   pointers, so the kernel cannot walk its stacks). The thread is still
//   the current task here, so its stack is read in its own address space.
// * Switching in (the wait ended): the end time goes in the slot; for a
//   recorded wait a 32-byte record gives its length. This runs on the lock
//   handoff's path (the woken waiter is about to take its lock), so it
//   stores a time and nothing else.
//
// User space reads the slots when it detaches, for the waits that ended
// after their thread's last wait began. Only the process in target_tgid is
// looked at: for every other task each switch is two comparisons.
//
// Types come from pileup-engine' pileup_bpf.h (declared by hand, relocated
// by libbpf: no kernel headers are needed to build).

#include "pileup_bpf.h"


#define STACK_BYTES 16384
#define WINDOW_BEFORE 16
#define WINDOW_BYTES 48
#define HIST_BUCKETS 32
#define MAX_LOCKS 65536
#define SLOTS 65536
#define SEEN 65536

// Record kinds (the first word of every ring buffer record).
#define REC_START 1
#define REC_END 2

// futex(2)'s number on x86-64.
#define SYS_FUTEX 202

// The two fields read of a task, relocated by libbpf to where the running
// kernel's BTF puts them (CO-RE).
struct task_struct {
	unsigned int __state;
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

// Task states (include/linux/sched.h): a futex or PI-lock wait sleeps
// TASK_INTERRUPTIBLE; page-fault and I/O sleeps are uninterruptible, stops
// TASK_STOPPED or TASK_TRACED.
#define TASK_INTERRUPTIBLE 0x1

// Set by user space before loading.
const volatile __u32 target_tgid = 0;
// sched_switch passes the state prev switched out in (Linux 5.18+);
// earlier, prev->__state is read.
const volatile __u32 has_prev_state = 0;
// Waits recorded with their stack per second on each CPU (user space
// divides its budget among the CPUs); the others are counted only.
const volatile __u64 cpu_budget = 1000;
// First waits on a word not seen before, recorded with their stack per
// second on each CPU beyond cpu_budget.
const volatile __u64 fresh_budget = 1000;
// Entries per CPU in wait_log (a power of two), and the stride between
// CPUs' parts (entries + the header).
const volatile __u32 log_entries = 1;
const volatile __u32 log_stride = 2;
// With --focus: only the threads in `watched` are followed.
const volatile __u32 filter_threads = 0;

// One thread's wait, in its slot. Read by user space at the end (kept in
// sync with capture.rs).
struct slot {
	__u64 start;
	__u64 end;
	__u64 uaddr;
	__u32 tid;
	__u32 op;
	__u32 recorded;
	__u32 pad;
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

// A recorded wait as it starts (kept in sync with event.rs).
struct start_rec {
	__u64 kind;
	__u64 start;
	__u64 uaddr;
	__u32 tid;
	__u32 op;
	__u32 val;
	__u32 stack_len;
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u8 window[WINDOW_BYTES];
	__u8 stack[STACK_BYTES];
};

// A recorded wait's end.
struct end_rec {
	__u64 kind;
	__u64 start;
	__u64 end;
	__u32 tid;
	__u32 pad;
};

// The layouts user space decodes (event.rs, capture.rs).
_Static_assert(sizeof(struct slot) == 40, "struct slot is 40 bytes");
_Static_assert(sizeof(struct lock_stats) == 288, "struct lock_stats is 288 bytes");
_Static_assert(sizeof(struct start_rec) == 64 + WINDOW_BYTES + STACK_BYTES, "struct start_rec layout");
_Static_assert(sizeof(struct end_rec) == 32, "struct end_rec is 32 bytes");
_Static_assert(__builtin_offsetof(struct start_rec, window) == 64, "start_rec header is 64 bytes");

// Counters (per CPU): waits counted, records sent, over budget, ring
// buffer full, per-address table full, stack unreadable, a wait not
// followed because another thread's took its slot, a wait counted in the
// kernel's table because the log was full.
#define C_WAITS 0
#define C_SENT 1
#define C_BUDGET 2
#define C_RINGFULL 3
#define C_LOCKSFULL 4
#define C_NOSTACK 5
#define C_SHARED 6
#define C_LOGFULL 7
#define NCOUNTERS 8

// The wait in progress or last ended, per thread, in a slot picked by the
// thread id's low bits: an array lookup is a bounds check and an address,
// inlined by the verifier (task storage and hashes cost a lock or a busy
// counter per call). Two threads of the process whose ids share those bits
// and wait at once share a slot: the slot records whose wait it holds, and
// the other's is not counted (C_SHARED).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SLOTS);
	__type(key, __u32);
	__type(value, struct slot);
} slots SEC(".maps");

// Per CPU: no atomics, no cache line shared between CPUs. Not
// preallocated: a preallocated table would take MAX_LOCKS entries on every
// possible CPU from the host's memory at load; entries are made as words
// are first seen, at the start of a wait.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_LOCKS);
	__type(key, __u64);
	__type(value, struct lock_stats);
} locks SEC(".maps");

// A finished wait, as logged for user space.
struct logged_wait {
	__u64 uaddr;
	__u64 start;
	__u64 end;
	__u32 op;
	__u32 pad;
};

// The wait log: for each CPU, a header element (head: waits written, in
// uaddr; tail: waits user space has read, in start) followed by
// log_entries entries, a ring. Only the CPU's own probe writes its part
// (the probe runs with preemption off), and user space, which maps the
// array, reads it and moves the tail: no lock, no atomic operation, no
// cache line shared between CPUs. Sized by user space at load.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct logged_wait);
} wait_log SEC(".maps");

// Futex words with a recorded wait, direct-mapped by a hash of the
// address: a word whose entry holds another address is taken as new, and
// its wait recorded with a stack (within fresh_budget), so every lock gets
// a stack to be named by.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SEEN);
	__type(key, __u32);
	__type(value, __u64);
} seen SEC(".maps");

// The threads followed when filter_threads is set (user space keeps the
// set current as threads come and go); looked up only for a thread going
// to sleep in a futex wait.
PILEUP_WATCHED_THREADS_MAP;

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

// This CPU's stack budgets: the current second and what was spent in it.
struct budget {
	__u64 second;
	__u64 spent;
	__u64 fresh;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct budget);
} budget SEC(".maps");

static __always_inline void count(__u32 which)
{
	pileup_count(&counters, which);
}

static __always_inline int is_wait(__u32 op)
{
	__u32 cmd = op & ~(128 | 256); // FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME
	// FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI,
	// FUTEX_LOCK_PI2
	return cmd == 0 || cmd == 6 || cmd == 9 || cmd == 11 || cmd == 13;
}

// floor(log2(v)) (0 for 0 and 1), at most HIST_BUCKETS - 1: six steps of
// a binary search.
static __always_inline __u32 log2_bucket(__u64 v)
{
	__u32 b = 0;
	if (v >> 32) {
		v >>= 32;
		b += 32;
	}
	if (v >> 16) {
		v >>= 16;
		b += 16;
	}
	if (v >> 8) {
		v >>= 8;
		b += 8;
	}
	if (v >> 4) {
		v >>= 4;
		b += 4;
	}
	if (v >> 2) {
		v >>= 2;
		b += 2;
	}
	if (v >> 1)
		b += 1;
	return b < HIST_BUCKETS ? b : HIST_BUCKETS - 1;
}

// The entry for a futex word (this CPU's copy), created empty if absent;
// *fresh says whether the word had not been seen before.
static __always_inline struct lock_stats *stats_of(__u64 uaddr, __u32 op, int *fresh)
{
	struct lock_stats *ls = bpf_map_lookup_elem(&locks, &uaddr);
	*fresh = 0;
	if (ls)
		return ls;
	bpf_map_update_elem(&locks, &uaddr, &zero_stats, BPF_NOEXIST);
	ls = bpf_map_lookup_elem(&locks, &uaddr);
	if (!ls) {
		count(C_LOCKSFULL);
		return 0;
	}
	ls->op = op;
	*fresh = 1;
	return ls;
}

// Whether this CPU's budget has room for one more stack this second: the
// sampled waits' budget, or for a word not seen before the fresh one.
static __always_inline int within_budget(__u64 now, int fresh)
{
	__u32 zero = 0;
	struct budget *bg = bpf_map_lookup_elem(&budget, &zero);
	if (!bg)
		return 0;
	__u64 second = now / 1000000000ULL;
	if (bg->second != second) {
		bg->second = second;
		bg->spent = 0;
		bg->fresh = 0;
	}
	if (bg->spent < cpu_budget) {
		bg->spent++;
		return 1;
	}
	if (fresh && bg->fresh < fresh_budget) {
		bg->fresh++;
		return 1;
	}
	return 0;
}

// The word's entry in `seen` (Fibonacci hashing: the top 16 bits of the
// product).
static __always_inline __u64 *seen_entry(__u64 uaddr)
{
	__u32 k = (__u32)((uaddr * 0x9E3779B97F4A7C15ULL) >> 48) & (SEEN - 1);
	return bpf_map_lookup_elem(&seen, &k);
}

// Log a finished wait for user space; 0 if this CPU's log is full (user
// space is behind), and the wait must be counted in the kernel's table.
static __always_inline int log_wait(__u64 uaddr, __u64 start, __u64 end, __u32 op)
{
	__u32 hk = bpf_get_smp_processor_id() * log_stride;
	struct logged_wait *h = bpf_map_lookup_elem(&wait_log, &hk);
	if (!h)
		return 0;
	__u64 head = h->uaddr;
	__u64 tail = *(volatile __u64 *)&h->start;
	if (head - tail >= log_entries)
		return 0;
	__u32 k = hk + 1 + (__u32)(head & (log_entries - 1));
	struct logged_wait *e = bpf_map_lookup_elem(&wait_log, &k);
	if (!e)
		return 0;
	e->uaddr = uaddr;
	e->start = start;
	e->end = end;
	e->op = op;
	// The entry is written before the head moves past it: x86-64 keeps
	// stores in order, so a compiler barrier is all it takes.
	asm volatile("" ::: "memory");
	*(volatile __u64 *)&h->uaddr = head + 1;
	return 1;
}

// The waiter's registers and the top of its stack, with the bytes around
// the futex word, to the ring buffer.
static __always_inline int record_start(__u64 now, __u64 uaddr, __u32 tid, __u32 op, __u32 val,
					struct user_regs *regs)
{
	struct start_rec *r = bpf_ringbuf_reserve(&events, sizeof(struct start_rec), 0);
	if (!r) {
		count(C_RINGFULL);
		return 0;
	}
	r->kind = REC_START;
	r->start = now;
	r->uaddr = uaddr;
	r->tid = tid;
	r->op = op;
	r->val = val;
	if (bpf_probe_read_user(r->window, WINDOW_BYTES, (void *)(uaddr - WINDOW_BEFORE)) != 0)
		__builtin_memset(r->window, 0, WINDOW_BYTES);
	PILEUP_SUBMIT_WITH_STACK(r, regs, C_NOSTACK, C_SENT);
	return 1;
}

// A thread of the server goes to sleep in a futex wait: the previous wait
// in its slot (ended since) is counted, and the new one noted.
static __always_inline void wait_began(__u32 tid, struct user_regs *regs)
{
	__u32 op = (__u32)regs->si;
	if (!is_wait(op))
		return;
	__u32 key = tid & (SLOTS - 1);
	struct slot *s = bpf_map_lookup_elem(&slots, &key);
	if (!s)
		return;
	__u64 uaddr = regs->di;
	if (s->tid != tid && s->start != 0 && s->end == 0) {
		// Another thread (its id shares the slot) is waiting: its wait
		// will not be followed.
		count(C_SHARED);
	} else if (s->start != 0 && s->end >= s->start) {
		// The previous wait in this slot, ended since: this thread's, or
		// another's that shares the slot. To user space through the log,
		// or, if user space is behind, into the kernel's table.
		if (!log_wait(s->uaddr, s->start, s->end, s->op)) {
			int fresh = 0;
			struct lock_stats *ls = stats_of(s->uaddr, s->op, &fresh);
			__u64 wait = s->end - s->start;
			if (ls) {
				ls->count++;
				ls->total_ns += wait;
				if (wait > ls->max_ns)
					ls->max_ns = wait;
				ls->hist[log2_bucket(wait / 1000)]++;
			}
			count(C_LOGFULL);
		}
		count(C_WAITS);
	}
	__u64 now = bpf_ktime_get_ns();
	__u32 val = (__u32)regs->dx;
	s->tid = tid;
	s->uaddr = uaddr;
	s->op = op;
	s->end = 0;
	s->start = now;
	s->recorded = 0;
	// A word is new until a wait on it has been recorded (or its entry in
	// `seen` was taken by another word since).
	__u64 *seen_at = seen_entry(uaddr);
	int fresh = seen_at && *seen_at != uaddr;
	if (within_budget(now, fresh))
		s->recorded = record_start(now, uaddr, tid, op, val, regs);
	else
		count(C_BUDGET);
	if (s->recorded && seen_at)
		*seen_at = uaddr;
}

// A thread of the server gets its CPU back: if it was in a futex wait,
// the wait ended.
static __always_inline void wait_ended(__u32 tid)
{
	__u32 key = tid & (SLOTS - 1);
	struct slot *s = bpf_map_lookup_elem(&slots, &key);
	if (!s || s->tid != tid || s->start == 0 || s->end != 0)
		return;
	__u64 now = bpf_ktime_get_ns();
	s->end = now;
	if (!s->recorded)
		return;
	// Only a recorded wait pays for a record here, within the budget.
	struct end_rec *r = bpf_ringbuf_reserve(&events, sizeof(struct end_rec), 0);
	if (!r)
		return;
	r->kind = REC_END;
	r->start = s->start;
	r->end = now;
	r->tid = tid;
	r->pad = 0;
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

// The scheduler switches from prev to next (ctx: bool preempt, prev, next;
// the task pointers typed by the kernel's BTF, so their fields are read
// directly). Runs with the CPU's run queue locked: only stores and
// lookups here, and a stack copy within the budget.
SEC("tp_btf/sched_switch")
int futex_switch(__u64 *ctx)
{
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	if ((__u32)next->tgid == target_tgid)
		wait_ended((__u32)next->pid);
	// A thread that gives up its CPU of its own accord (not preempted),
	// in an interruptible sleep, inside futex(2), is going to sleep in it.
	// (A woken waiter rescheduled on its way back to user space, or one
	// that sleeps on a page fault reading the futex word, is not waiting.)
	if ((__u32)prev->tgid != target_tgid || (__u8)ctx[0])
		return 0;
	__u32 state = has_prev_state ? (__u32)ctx[3] : prev->__state;
	if (!(state & TASK_INTERRUPTIBLE))
		return 0;
	struct user_regs *regs = (struct user_regs *)bpf_task_pt_regs(prev);
	if (!regs || regs->orig_ax != SYS_FUTEX)
		return 0;
	__u32 tid = (__u32)prev->pid;
	if (filter_threads && !bpf_map_lookup_elem(&watched, &tid))
		return 0;
	wait_began(tid, regs);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
