// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
//
// The user registers of a thread that is not running: a BPF task iterator,
// attached for one thread at a time (the iterator's tid filter), writes
// the registers the kernel saved when the thread last entered it (a system
// call, an interrupt that preempted it, a page fault). For a thread that
// waits for a CPU they are where its user code stands; for one that is
// running they are stale: the thread's on_cpu flag and its context switch
// counts, given with them with its CPU, tell user space whether it is on a CPU now and,
// read again after its stack is copied, whether it ran in between.

#include "pileup_bpf.h"

// The CPU a task runs on, or last ran on (x86-64 keeps it in thread_info).
struct thread_info {
	unsigned int cpu;
} __attribute__((preserve_access_index));

struct task_struct {
	struct thread_info thread_info;
	int on_cpu;
	int pid;
	unsigned long nvcsw;
	unsigned long nivcsw;
} __attribute__((preserve_access_index));

struct bpf_iter_meta {
	struct seq_file *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
} __attribute__((preserve_access_index));

// What one thread gives (kept in sync with capture/queued.rs).
struct out {
	__u64 tid;
	__u64 on_cpu;
	__u64 switches;
	__u64 ip, sp, bp, ax, orig_ax, di, si, dx;
	__u64 cpu;
};

SEC("iter/task")
int task_regs(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (!task)
		return 0;
	struct user_regs *regs = (struct user_regs *)bpf_task_pt_regs(task);
	if (!regs)
		return 0;
	struct out o = {
		.tid = (__u64)task->pid,
		.on_cpu = (__u64)task->on_cpu,
		.switches = (__u64)task->nvcsw + (__u64)task->nivcsw,
		.ip = regs->ip,
		.sp = regs->sp,
		.bp = regs->bp,
		.ax = regs->ax,
		.orig_ax = regs->orig_ax,
		.di = regs->di,
		.si = regs->si,
		.dx = regs->dx,
		.cpu = (__u64)task->thread_info.cpu,
	};
	bpf_seq_write(ctx->meta->seq, &o, sizeof(o));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
