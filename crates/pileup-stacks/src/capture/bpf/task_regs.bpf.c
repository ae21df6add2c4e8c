// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
//
// The user registers of a thread that is not running: a BPF task iterator,
// attached for one thread at a time (the iterator's tid filter), writes
// the registers the kernel saved when the thread last entered it (a system
// call, an interrupt that preempted it, a page fault). For a thread that
// waits for a CPU they are where its user code stands; for one that is
// running they are stale: the thread's on_cpu flag and its context switch
// counts, given with them, tell user space whether it is on a CPU now and,
// read again after its stack is copied, whether it ran in between.
//
// Types are declared by hand instead of generated from vmlinux.h: pt_regs
// is the x86-64 user register layout, and the iterator's context and the
// task fields read are relocated by libbpf (CO-RE), so no kernel headers
// are needed to build.

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

struct task_struct {
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

// x86-64 struct pt_regs (arch/x86/include/asm/ptrace.h).
struct user_regs {
	__u64 r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	__u64 ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

// What one thread gives (kept in sync with capture/queued.rs).
struct out {
	__u64 tid;
	__u64 on_cpu;
	__u64 switches;
	__u64 ip, sp, bp, ax, orig_ax, di, si, dx;
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
	};
	bpf_seq_write(ctx->meta->seq, &o, sizeof(o));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
