// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
//
// Allocations of chosen threads, sampled by bytes (as tcmalloc samples):
// uprobes on the allocator's malloc, calloc and realloc (and uretprobes
// for the address each returns), and on free.
//
// Every call of the server's process hits the probe (a uprobe is per
// process, not per thread); a thread not in `watched` returns at once. For
// a watched thread the bytes asked for accumulate, and the call that
// passes its next threshold (about `sample_period` bytes, jittered) is
// sampled, weighted by every byte since the last sample: its address and
// size, the thread's registers and the top of its stack (within the
// per-second budget) go to user space, and its address to `live`. A free
// of a live address, by any thread, removes it and tells user space: what
// is left at the end is what the sampled stacks still hold.

#include "pileup_bpf.h"


#define STACK_BYTES 16384

#define REC_ALLOC 1 // a sampled allocation, with its stack if within budget
#define REC_FREE 2 // a sampled allocation freed

struct task_struct {
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

const volatile __u32 target_tgid = 0;
const volatile __u64 cpu_budget = 100;

volatile __u64 sample_period = 512 << 10;

// One watched thread's state (kept in sync with malloc.rs).
struct thread_state {
	__u64 calls; // allocations by the thread
	__u64 bytes; // bytes they asked for
	__u64 acc; // bytes since the last sample
	__u64 next; // the next sample's threshold
	__u64 weight; // the sample in flight: its weight and size
	__u64 size;
	__u32 pending; // a sampled call has not returned yet
	__u32 pad;
};

struct live_alloc {
	__u64 weight;
	__u64 size;
};

struct alloc_rec {
	__u64 kind;
	__u64 time;
	__u64 addr;
	__u64 size;
	__u64 weight;
	__u32 tid;
	__u32 stack_len;
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u8 stack[STACK_BYTES];
};

struct free_rec {
	__u64 kind;
	__u64 time;
	__u64 addr;
	__u32 tid;
	__u32 pad;
};

_Static_assert(__builtin_offsetof(struct alloc_rec, stack) == 72, "alloc_rec header is 72 bytes");
_Static_assert(sizeof(struct free_rec) == 32, "free_rec is 32 bytes");
_Static_assert(sizeof(struct thread_state) == 56, "thread_state is 56 bytes");

// Counters (per CPU): allocation calls probed (every thread), sampled,
// sent with a stack, over budget, ring buffer full, live table full,
// frees matched, free calls probed.
#define C_HITS 0
#define C_SAMPLED 1
#define C_STACKS 2
#define C_BUDGET 3
#define C_RINGFULL 4
#define C_LIVEFULL 5
#define C_FREED 6
#define C_FREE_HITS 7
#define NCOUNTERS 8

PILEUP_WATCHED_THREADS_MAP;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct thread_state);
} threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 20);
	__type(key, __u64);
	__type(value, struct live_alloc);
} live SEC(".maps");

PILEUP_TRACER_MAPS(NCOUNTERS, 16 << 20)

static const struct thread_state zero_state = {};

static __always_inline __u64 next_threshold(void)
{
	__u64 p = sample_period;
	if (p < 64)
		p = 64;
	return p / 2 + (bpf_get_prandom_u32() % (p + 1));
}

// The calling thread of the target process, if watched.
static __always_inline struct thread_state *watched_state(__u32 *tid)
{
	__u64 id = bpf_get_current_pid_tgid();
	if ((__u32)(id >> 32) != target_tgid)
		return 0;
	*tid = (__u32)id;
	if (!bpf_map_lookup_elem(&watched, tid))
		return 0;
	struct thread_state *st = bpf_map_lookup_elem(&threads, tid);
	if (st)
		return st;
	bpf_map_update_elem(&threads, tid, &zero_state, BPF_NOEXIST);
	return bpf_map_lookup_elem(&threads, tid);
}

static __always_inline void freed(__u64 addr)
{
	if (!addr || !bpf_map_lookup_elem(&live, &addr))
		return;
	bpf_map_delete_elem(&live, &addr);
	count(C_FREED);
	struct free_rec *r = bpf_ringbuf_reserve(&events, sizeof(struct free_rec), 0);
	if (!r) {
		count(C_RINGFULL);
		return;
	}
	r->kind = REC_FREE;
	r->time = bpf_ktime_get_ns();
	r->addr = addr;
	r->tid = (__u32)bpf_get_current_pid_tgid();
	r->pad = 0;
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

// An allocation of `size` bytes begins.
static __always_inline void alloc_enter(__u64 size)
{
	__u32 tid;
	count(C_HITS);
	struct thread_state *st = watched_state(&tid);
	if (!st)
		return;
	st->calls++;
	st->bytes += size;
	st->acc += size;
	st->pending = 0;
	if (st->next == 0)
		st->next = next_threshold();
	if (st->acc < st->next)
		return;
	st->weight = st->acc;
	st->size = size;
	st->acc = 0;
	st->next = next_threshold();
	st->pending = 1;
}

// The allocation returns `addr`.
static __always_inline void alloc_exit(struct user_regs *regs)
{
	__u32 tid;
	__u64 id = bpf_get_current_pid_tgid();
	if ((__u32)(id >> 32) != target_tgid)
		return;
	tid = (__u32)id;
	struct thread_state *st = bpf_map_lookup_elem(&threads, &tid);
	if (!st || !st->pending)
		return;
	st->pending = 0;
	__u64 addr = regs->ax;
	if (!addr)
		return;
	count(C_SAMPLED);
	struct live_alloc la = { .weight = st->weight, .size = st->size };
	if (bpf_map_update_elem(&live, &addr, &la, 0) != 0)
		count(C_LIVEFULL);
	struct alloc_rec *r = bpf_ringbuf_reserve(&events, sizeof(struct alloc_rec), 0);
	if (!r) {
		count(C_RINGFULL);
		return;
	}
	r->kind = REC_ALLOC;
	r->time = bpf_ktime_get_ns();
	r->addr = addr;
	r->size = st->size;
	r->weight = st->weight;
	r->tid = tid;
	r->stack_len = 0;
	r->ip = regs->ip;
	r->sp = regs->sp;
	r->bp = regs->bp;
	if (pileup_spend(&budget, cpu_budget)) {
		r->stack_len = pileup_copy_stack(r->stack, STACK_BYTES, regs->sp);
		if (r->stack_len)
			count(C_STACKS);
	} else {
		count(C_BUDGET);
		r->ip = 0;
	}
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

SEC("uprobe")
int malloc_enter(struct user_regs *ctx)
{
	alloc_enter(ctx->di);
	return 0;
}

SEC("uprobe")
int calloc_enter(struct user_regs *ctx)
{
	alloc_enter(ctx->di * ctx->si);
	return 0;
}

SEC("uprobe")
int realloc_enter(struct user_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if ((__u32)(id >> 32) != target_tgid)
		return 0;
	// realloc(NULL, n) is malloc(n): the C library calls its malloc,
	// whose own probe counts it.
	if (!ctx->di) {
		count(C_HITS);
		return 0;
	}
	freed(ctx->di);
	alloc_enter(ctx->si);
	return 0;
}

SEC("uretprobe")
int alloc_return(struct user_regs *ctx)
{
	alloc_exit(ctx);
	return 0;
}

SEC("uprobe")
int free_enter(struct user_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if ((__u32)(id >> 32) != target_tgid)
		return 0;
	count(C_FREE_HITS);
	freed(ctx->di);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
