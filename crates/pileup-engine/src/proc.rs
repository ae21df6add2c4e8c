//! Reading `/proc`: finding mysqld, listing its threads, its memory map and the
//! OS-level state of each thread. All of this happens before or after the
//! threads are stopped, never while they are.

use std::fs;
use std::path::PathBuf;

use crate::error::EngineError;

/// Names of server binaries we accept without `--any-process`.
pub const SERVER_NAMES: &[&str] = &["mariadbd", "mysqld", "mysqld-debug", "mariadbd-debug"];

/// The executable name of a process (from `/proc/PID/exe`, falling back to `comm`).
pub fn exe_name(pid: i32) -> Option<String> {
    if let Ok(p) = fs::read_link(format!("/proc/{pid}/exe")) {
        let s = p.file_name()?.to_string_lossy().into_owned();
        return Some(s.trim_end_matches(" (deleted)").to_string());
    }
    fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|s| s.trim().to_string())
}

/// Whether `name` is one of the server binary names accepted without `--any-process`.
pub fn is_server_name(name: &str) -> bool {
    SERVER_NAMES.contains(&name)
}

/// All processes running a MySQL-family server.
pub fn find_servers() -> Vec<(i32, String)> {
    let mut out = vec![];
    if let Ok(rd) = fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
            // comm is readable for every process, exe only for our own or with privileges
            let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let comm = comm.trim();
            let name = exe_name(pid).unwrap_or_else(|| comm.to_string());
            if is_server_name(&name) || is_server_name(comm) {
                out.push((pid, name));
            }
        }
    }
    out.sort();
    out
}

/// Resolve `--pid auto` to the single running server.
pub fn auto_pid() -> Result<i32, EngineError> {
    let s = find_servers();
    match s.len() {
        0 => Err(EngineError::NoServer),
        1 => Ok(s[0].0),
        _ => {
            Err(EngineError::SeveralServers(s.iter().map(|(p, n)| format!("{p} ({n})")).collect::<Vec<_>>().join(", ")))
        }
    }
}

/// The socket a server was started with (`--socket=` on its command line),
/// as this process sees it (through the server's root, so a server in a
/// container is reached too).
pub fn server_socket(pid: i32) -> Option<std::path::PathBuf> {
    let cmd = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let root = format!("/proc/{pid}/root");
    cmd.split(|&b| b == 0).find_map(|arg| {
        let arg = String::from_utf8_lossy(arg);
        let s = arg.strip_prefix("--socket=")?;
        let p = std::path::PathBuf::from(format!("{root}{s}"));
        p.exists().then_some(p)
    })
}

/// Which running server listens on this endpoint (a Unix socket path, or a
/// local TCP port)? Found from the kernel's socket tables
/// (`/proc/net/unix`, `/proc/net/tcp{,6}`) and each server's open file
/// descriptors, so with several servers on a host the one pileup connects
/// to is the one it traces.
pub fn server_listening_on(socket: Option<&std::path::Path>, port: Option<u16>) -> Listener {
    let mut inodes: Vec<u64> = vec![];
    if let Some(sock) = socket {
        let want = fs::canonicalize(sock).unwrap_or_else(|_| sock.to_path_buf());
        if let Ok(t) = fs::read_to_string("/proc/net/unix") {
            inodes.extend(
                unix_listeners(&t)
                    .into_iter()
                    .filter(|(_, p)| {
                        let p = std::path::Path::new(p);
                        p == sock || fs::canonicalize(p).map(|c| c == want).unwrap_or(false)
                    })
                    .map(|(i, _)| i),
            );
        }
    }
    if let Some(port) = port {
        for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
            if let Ok(t) = fs::read_to_string(f) {
                inodes.extend(tcp_listeners(&t).into_iter().filter(|(_, p)| *p == port).map(|(i, _)| i));
            }
        }
    }
    if inodes.is_empty() {
        return Listener::None;
    }
    let mut unreadable = false;
    for (pid, _) in find_servers() {
        let Ok(rd) = fs::read_dir(format!("/proc/{pid}/fd")) else {
            unreadable = true;
            continue;
        };
        for e in rd.flatten() {
            if let Ok(l) = fs::read_link(e.path()) {
                let l = l.to_string_lossy();
                if let Some(i) =
                    l.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')).and_then(|i| i.parse::<u64>().ok())
                {
                    if inodes.contains(&i) {
                        return Listener::Server(pid);
                    }
                }
            }
        }
    }
    if unreadable {
        Listener::Unknown
    } else {
        Listener::None
    }
}

/// Who listens on an endpoint, as far as pileup can see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The server with this pid has the socket open.
    Server(i32),
    /// No server process has that socket open.
    None,
    /// Some server's descriptors could not be read (no permission).
    Unknown,
}

/// Listening Unix sockets in `/proc/net/unix`: (inode, path).
pub fn unix_listeners(text: &str) -> Vec<(u64, String)> {
    const SO_ACCEPTCON: u32 = 0x10000;
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let flags = u32::from_str_radix(f.get(3)?, 16).ok()?;
            let path = f.get(7)?;
            (flags & SO_ACCEPTCON != 0).then(|| Some((f.get(6)?.parse().ok()?, path.to_string())))?
        })
        .collect()
}

/// Listening TCP sockets in `/proc/net/tcp` or `tcp6`: (inode, port).
pub fn tcp_listeners(text: &str) -> Vec<(u64, u16)> {
    const LISTEN: &str = "0A";
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if *f.get(3)? != LISTEN {
                return None;
            }
            let port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            Some((f.get(9)?.parse().ok()?, port))
        })
        .collect()
}

/// Is `pid` a live process? A process that exited but is not yet reaped
/// (a zombie: its parent has not waited for it) is not: its threads and
/// memory are gone.
pub fn alive(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| parse_stat(&s))
        .is_some_and(|s| !matches!(s.1, 'Z' | 'X'))
}

/// Check that `pid` exists and is a server (unless `any` is set).
pub fn check_target(pid: i32, any: bool) -> Result<String, EngineError> {
    if !PathBuf::from(format!("/proc/{pid}")).exists() {
        return Err(EngineError::NoSuchProcess(pid));
    }
    let name = exe_name(pid).unwrap_or_else(|| "?".into());
    if !any && !is_server_name(&name) {
        return Err(EngineError::NotAServer { pid, name });
    }
    Ok(name)
}

/// Thread ids of a process, sorted.
pub fn tids(pid: i32) -> Result<Vec<i32>, EngineError> {
    let rd = fs::read_dir(format!("/proc/{pid}/task")).map_err(|_| EngineError::NoSuchProcess(pid))?;
    let mut v: Vec<i32> = rd.flatten().filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok())).collect();
    v.sort_unstable();
    Ok(v)
}

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    /// Start address of the mapping.
    pub start: u64,
    /// End address of the mapping (exclusive).
    pub end: u64,
    /// Permissions as the file shows them (`r-xp`).
    pub perms: String,
    /// Offset of the mapping in its file.
    pub offset: u64,
    /// Inode of the mapped file (0 for an anonymous mapping).
    pub inode: u64,
    /// The mapped file's path or a pseudo-path (`[stack]`, `[vdso]`); empty for
    /// an anonymous mapping.
    pub path: String,
}

impl MapEntry {
    /// Whether the mapping is executable.
    pub fn is_exec(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }
}

/// Parse the text of a maps file.
pub fn parse_maps(text: &str) -> Vec<MapEntry> {
    let mut out = vec![];
    for line in text.lines() {
        let mut it = line.splitn(6, ' ');
        let (Some(range), Some(perms), Some(off), Some(_dev), Some(inode)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let path = it.next().unwrap_or("").trim_start().to_string();
        let Some((s, e)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end), Ok(offset)) =
            (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16), u64::from_str_radix(off, 16))
        else {
            continue;
        };
        out.push(MapEntry { start, end, perms: perms.to_string(), offset, inode: inode.parse().unwrap_or(0), path });
    }
    out
}

/// Read and parse `/proc/PID/maps`; unreadable maps are a permission error, a
/// missing file a process that is gone.
pub fn read_maps(pid: i32) -> Result<Vec<MapEntry>, EngineError> {
    let t = fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => {
            EngineError::Permission { pid, detail: "cannot read /proc/PID/maps".into() }
        }
        _ => EngineError::NoSuchProcess(pid),
    })?;
    Ok(parse_maps(&t))
}

/// Find the mapping containing `addr` (maps are sorted by address).
pub fn find_map(maps: &[MapEntry], addr: u64) -> Option<&MapEntry> {
    let i = maps.partition_point(|m| m.end <= addr);
    maps.get(i).filter(|m| m.start <= addr)
}

/// OS-level state of a thread, read from `/proc` just before the capture.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct OsThread {
    /// Thread name (`comm`).
    pub name: String,
    /// One-letter state: R running, S sleeping, D disk wait, …
    pub state: char,
    /// Kernel function the thread sleeps in, if any.
    pub wchan: Option<String>,
    /// User and system CPU time so far, in clock ticks.
    pub utime: u64,
    /// System CPU time so far, in clock ticks.
    pub stime: u64,
    /// A kernel io_uring worker (PF_IO_WORKER): it has no user-space stack.
    pub io_worker: bool,
}

pub fn state_label(c: char) -> &'static str {
    match c {
        'R' => "running",
        'S' => "sleeping",
        'D' => "disk wait",
        'T' => "stopped",
        't' => "tracing stop",
        'Z' => "zombie",
        'X' => "dead",
        'I' => "idle",
        'P' => "parked",
        _ => "unknown",
    }
}

/// Parse `/proc/PID/task/TID/stat` (the name may contain spaces and parentheses).
pub fn parse_stat(s: &str) -> Option<(String, char, u64, u64, u64)> {
    let (name, rest) = stat_fields(s)?;
    let name = name.to_string();
    let state = rest.first()?.chars().next()?;
    // fields after the name: state(0) ppid(1) … utime is field 14 overall → index 11 here
    let utime = rest.get(11)?.parse().ok()?;
    let stime = rest.get(12)?.parse().ok()?;
    let flags = rest.get(6)?.parse().ok()?;
    Some((name, state, utime, stime, flags))
}

/// A `stat` file's command name and the fields after it (the name may
/// hold spaces and parentheses: it ends at the last `)`).
fn stat_fields(s: &str) -> Option<(&str, Vec<&str>)> {
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    Some((&s[open + 1..close], s[close + 1..].split_whitespace().collect()))
}

/// CPU seconds a process or thread has used, from its `stat` file
/// (`/proc/PID/stat` or `/proc/PID/task/TID/stat`): user and system time,
/// and with `reaped` that of the children it has waited for.
pub fn cpu_seconds(stat_path: &std::path::Path, reaped: bool) -> Option<f64> {
    let s = fs::read_to_string(stat_path).ok()?;
    let (_, rest) = stat_fields(&s)?;
    // utime, stime, cutime, cstime: fields 14 to 17, 11 to 14 after the name.
    let n = if reaped { 4 } else { 2 };
    let ticks: u64 = rest.get(11..11 + n)?.iter().map(|f| f.parse::<u64>().ok()).sum::<Option<u64>>()?;
    // SAFETY: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks as f64 / hz)
}

/// A thread's state letter alone (one read of its `stat`).
pub fn state(pid: i32, tid: i32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    parse_stat(&stat).map(|s| s.1)
}

/// Whether a thread is gone or on its way out (a zombie, or still running
/// its exit: `PF_EXITING` in its flags): one that cannot stop for a tracer
/// because it is ending, not because it is stuck.
pub fn exiting(pid: i32, tid: i32) -> bool {
    const PF_EXITING: u64 = 0x4;
    match fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok().and_then(|s| parse_stat(&s)) {
        None => true,
        Some((_, state, _, _, flags)) => matches!(state, 'Z' | 'X') || flags & PF_EXITING != 0,
    }
}

/// A thread's [`OsThread`] from its `stat` and `wchan` files (`None` when it is gone).
pub fn os_thread(pid: i32, tid: i32) -> Option<OsThread> {
    let stat = fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    let (name, state, utime, stime, flags) = parse_stat(&stat)?;
    const PF_IO_WORKER: u64 = 0x10;
    let wchan = fs::read_to_string(format!("/proc/{pid}/task/{tid}/wchan"))
        .ok()
        .map(|w| w.trim().to_string())
        .filter(|w| !w.is_empty() && w != "0");
    Some(OsThread { name, state, wchan, utime, stime, io_worker: flags & PF_IO_WORKER != 0 })
}

/// A file operation a thread was in: the syscall, the file (from the
/// descriptor, read as the sample is taken: a descriptor closed and reused
/// in between would name the new file, which data and log files, open for
/// the server's life, are not) and the bytes asked for, where the call
/// takes a count.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FileIo {
    /// The system call (`pread64`, `fsync`, …).
    pub syscall: &'static str,
    /// The file the descriptor names.
    pub path: String,
    /// Bytes asked for, by a call that takes a count (`read`, `write`, `pread64`, `pwrite64`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// The file operation `regs` show a thread in or just leaving (a thread in
/// disk wait stops only as its syscall returns: `orig_ax` still holds the
/// call and the argument registers are preserved across it).
pub fn file_io(pid: i32, regs: &crate::regs::Regs) -> Option<FileIo> {
    let (syscall, counted) = match regs.orig_ax {
        0 => ("read", true),
        1 => ("write", true),
        17 => ("pread64", true),
        18 => ("pwrite64", true),
        19 => ("readv", false),
        20 => ("writev", false),
        74 => ("fsync", false),
        75 => ("fdatasync", false),
        277 => ("sync_file_range", false),
        285 => ("fallocate", false),
        295 => ("preadv", false),
        296 => ("pwritev", false),
        327 => ("preadv2", false),
        328 => ("pwritev2", false),
        _ => return None,
    };
    let fd = i32::try_from(regs.di).ok()?;
    let path = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    let path = path.to_string_lossy().into_owned();
    // Sockets and pipes are the network, not the disk.
    if !path.starts_with('/') {
        return None;
    }
    Some(FileIo { syscall, path, bytes: counted.then_some(regs.dx) })
}

/// What `/proc/PID/task/TID/syscall` says of a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyscallState {
    /// On a CPU or waiting for one: its registers cannot be read this way.
    Running,
    /// Blocked in system call `nr` (-1: blocked outside one, in a page
    /// fault say) with these arguments, user stack pointer and program
    /// counter. The kernel reads them only once the thread is off its CPU.
    Blocked { nr: i64, args: [u64; 6], sp: u64, pc: u64 },
}

/// Parse `/proc/PID/task/TID/syscall`: `running`, `-1 SP PC`, or
/// `NR ARG1 … ARG6 SP PC` (the numbers after NR in hex).
pub fn parse_syscall(s: &str) -> Option<SyscallState> {
    let s = s.trim();
    if s == "running" {
        return Some(SyscallState::Running);
    }
    let f: Vec<&str> = s.split_whitespace().collect();
    let nr: i64 = f.first()?.parse().ok()?;
    let hex = |t: &str| u64::from_str_radix(t.trim_start_matches("0x"), 16).ok();
    let (args, rest) = match f.len() {
        3 if nr == -1 => ([0; 6], &f[1..]),
        9 => {
            let mut a = [0u64; 6];
            for (i, v) in a.iter_mut().enumerate() {
                *v = hex(f[1 + i])?;
            }
            (a, &f[7..])
        }
        _ => return None,
    };
    Some(SyscallState::Blocked { nr, args, sp: hex(rest[0])?, pc: hex(rest[1])? })
}

/// The thread's scheduler counters (`/proc/PID/task/TID/schedstat`: CPU
/// time, run-queue wait, time slices). Unchanged between two reads means
/// the thread did not run in between.
pub fn schedstat(pid: i32, tid: i32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()
}

/// A thread's time on a CPU and runnable waiting for one, so far (ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedTimes {
    /// Time on a CPU so far (ns).
    pub on_cpu_ns: u64,
    /// Time runnable, waiting for a CPU, so far (ns).
    pub waiting_ns: u64,
}

/// The thread's [`SchedTimes`], from its schedstat.
pub fn sched_times(pid: i32, tid: i32) -> Option<SchedTimes> {
    parse_sched_times(&schedstat(pid, tid)?)
}

fn parse_sched_times(s: &str) -> Option<SchedTimes> {
    let mut it = s.split_whitespace().map(|f| f.parse::<u64>().ok());
    Some(SchedTimes { on_cpu_ns: it.next()??, waiting_ns: it.next()?? })
}

pub const SYS_FUTEX: u64 = 202;

/// Context switches on the whole machine since boot (`ctxt` in
/// /proc/stat).
pub fn context_switches() -> Option<u64> {
    let stat = fs::read_to_string("/proc/stat").ok()?;
    stat.lines().find_map(|l| l.strip_prefix("ctxt ")).and_then(|n| n.trim().parse().ok())
}

/// This process's CPU time so far, user and system (microseconds).
pub fn own_cpu_us() -> u64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0;
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(u.ru_utime) + us(u.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_process_is_alive_and_an_exited_one_is_not_reaped_or_not() {
        assert!(alive(std::process::id() as i32));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        // Exited but not reaped: a zombie, which serves nothing.
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!alive(pid));
        child.wait().unwrap();
        assert!(!alive(pid));
    }

    #[test]
    fn schedstat_gives_cpu_and_run_queue_time() {
        assert_eq!(parse_sched_times("1234 567 89\n"), Some(SchedTimes { on_cpu_ns: 1234, waiting_ns: 567 }));
        assert_eq!(parse_sched_times("x"), None);
    }

    #[test]
    fn cpu_seconds_read_a_stat_file_whose_name_has_spaces_and_parentheses() {
        let d = std::env::temp_dir().join(format!("pileup-stat-{}", std::process::id()));
        std::fs::write(&d, "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 150 30 20 20 0 1 0").unwrap();
        // SAFETY: sysconf reads a constant.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        assert_eq!(cpu_seconds(&d, false), Some(400.0 / hz));
        assert_eq!(cpu_seconds(&d, true), Some(450.0 / hz));
        assert_eq!(parse_stat(&std::fs::read_to_string(&d).unwrap()).unwrap().0, "a (b) c");
        std::fs::remove_file(&d).unwrap();
        assert_eq!(cpu_seconds(&d, false), None);
    }

    #[test]
    fn syscall_files() {
        assert_eq!(parse_syscall("running\n"), Some(SyscallState::Running));
        assert_eq!(
            parse_syscall("202 0x560ab54c88f8 0x89 0x0 0x7716e95fecb0 0x0 0xffffffff 0x7716e95feba0 0x7f17068a3f16\n"),
            Some(SyscallState::Blocked {
                nr: 202,
                args: [0x560ab54c88f8, 0x89, 0, 0x7716e95fecb0, 0, 0xffffffff],
                sp: 0x7716e95feba0,
                pc: 0x7f17068a3f16
            })
        );
        assert_eq!(
            parse_syscall("-1 0x7ffc473a5d40 0x7f170691a26f"),
            Some(SyscallState::Blocked { nr: -1, args: [0; 6], sp: 0x7ffc473a5d40, pc: 0x7f170691a26f })
        );
        assert_eq!(parse_syscall("7 0x1 0x2"), None);
        assert_eq!(parse_syscall(""), None);
    }

    #[test]
    fn socket_tables() {
        let unix = "Num       RefCount Protocol Flags    Type St Inode Path\n\
                    000000005f388a69: 00000003 00000000 00000000 0001 03  1521\n\
                    000000009f5075c4: 00000002 00000000 00010000 0001 01 185277 /tmp/sb/mysql.sock\n\
                    00000000aaaaaaaa: 00000003 00000000 00000000 0001 03 185300 /tmp/sb/mysql.sock\n";
        assert_eq!(
            unix_listeners(unix),
            vec![(185277, "/tmp/sb/mysql.sock".to_string())],
            "connected sockets and unnamed ones are not listeners"
        );
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
                      0: 0100007F:AC55 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 185276 1 0 100 0 0 10 0\n\
                      1: 0100007F:AC55 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 185999 1 0 100 0 0 10 0\n";
        assert_eq!(tcp_listeners(tcp), vec![(185276, 0xAC55)]);
    }

    #[test]
    fn a_live_thread_is_not_exiting_and_a_gone_one_is() {
        let me = std::process::id() as i32;
        assert!(!exiting(me, me));
        let h = std::thread::spawn(|| nix::unistd::gettid().as_raw());
        let gone = h.join().unwrap();
        let t0 = std::time::Instant::now();
        while !exiting(me, gone) {
            assert!(t0.elapsed() < std::time::Duration::from_secs(5), "a joined thread is still there");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn maps_and_lookup() {
        let t = "55d0c0000000-55d0c0100000 r--p 00000000 fd:01 1234 /usr/sbin/mariadbd\n\
                 55d0c0100000-55d0c0900000 r-xp 00100000 fd:01 1234 /usr/sbin/mariadbd\n\
                 7f0000000000-7f0000021000 rw-p 00000000 00:00 0 \n\
                 7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]\n";
        let m = parse_maps(t);
        assert_eq!(m.len(), 4);
        assert!(m[1].is_exec() && !m[0].is_exec());
        assert_eq!(m[1].offset, 0x100000);
        assert_eq!(m[2].path, "");
        assert_eq!(m[3].path, "[stack]");
        assert_eq!(find_map(&m, 0x55d0c0100010).unwrap().perms, "r-xp");
        assert!(find_map(&m, 0x1000).is_none());
        assert!(find_map(&m, 0x7f0000021000).is_none());
    }

    #[test]
    fn stat_with_odd_name() {
        let s = "1234 (my (odd) name) S 1 2 3 4 5 16 7 8 9 10 42 17 0 0 20 0 5 0";
        let (n, st, u, sy, fl) = parse_stat(s).unwrap();
        assert_eq!((n.as_str(), st, u, sy, fl), ("my (odd) name", 'S', 42, 17, 16));
    }
}
