// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
//
// One thread's system calls, counted and timed exactly: the sys_enter and
// sys_exit raw tracepoints (BTF-typed, so no tracefs is needed), filtered
// to the thread in target_tid. At entry the call's number and time are kept (a thread
// is in one call at a time); at exit the call is counted and its time
// added, by number. A call under way when tracing began has no entry and
// is not counted; one under way when it ends is read by user space from
// `inflight`. Every system call on the host runs the probes while they
// are attached; for every other task they compare its id and return.

#include "pileup_bpf.h"

// x86-64 has about 460 system calls; larger numbers are counted as one.
#define MAX_NR 512

// Set by user space before loading: the thread traced (its kernel id).
const volatile __u32 target_tid = 0;

// A number's calls and their time (kept in sync with syscalls.rs).
struct tally {
	__u64 calls;
	__u64 ns;
};

// The call under way: its number and when it began (0: none).
struct inflight {
	__u64 nr;
	__u64 start;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_NR);
	__type(key, __u32);
	__type(value, struct tally);
} tallies SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct inflight);
} inflight SEC(".maps");

static __always_inline int ours(void)
{
	return (__u32)bpf_get_current_pid_tgid() == target_tid;
}

// ctx: the user registers, the call's number.
SEC("tp_btf/sys_enter")
int syscall_enter(__u64 *ctx)
{
	if (!ours())
		return 0;
	__u32 zero = 0;
	struct inflight *f = bpf_map_lookup_elem(&inflight, &zero);
	if (!f)
		return 0;
	__s64 id = (__s64)ctx[1];
	f->nr = id < 0 || id >= MAX_NR ? MAX_NR - 1 : (__u64)id;
	f->start = bpf_ktime_get_ns();
	return 0;
}

// ctx: the user registers, the return value.
SEC("tp_btf/sys_exit")
int syscall_exit(__u64 *ctx)
{
	if (!ours())
		return 0;
	__u32 zero = 0;
	struct inflight *f = bpf_map_lookup_elem(&inflight, &zero);
	if (!f || f->start == 0)
		return 0;
	__u32 nr = (__u32)f->nr;
	__u64 took = bpf_ktime_get_ns() - f->start;
	f->start = 0;
	if (nr >= MAX_NR)
		return 0;
	struct tally *t = bpf_map_lookup_elem(&tallies, &nr);
	if (!t)
		return 0;
	t->calls += 1;
	t->ns += took;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
