//! Errors a user can act on: each names the problem in the engine's terms
//! (which process, which permission). A front end adds how its user names
//! the fix (its flags): [`EngineError::fix`] says what that fix is.

use thiserror::Error;

/// An error about the target process: finding it, permission to trace it, or it going away.
#[derive(Debug, Error)]
pub enum EngineError {
    /// No process has the pid given.
    #[error("no process with pid {0}")]
    NoSuchProcess(i32),
    /// The process is not a MariaDB or MySQL server, and any process was not allowed.
    #[error("pid {pid} is '{name}', not mariadbd/mysqld")]
    NotAServer {
        /// The process's id.
        pid: i32,
        /// Its executable's name.
        name: String,
    },
    /// No running server was found to pick automatically.
    #[error("no running mariadbd or mysqld found")]
    NoServer,
    /// More than one server runs, so none is picked automatically; the message
    /// lists each (pid and name).
    #[error("several servers are running: {0}")]
    SeveralServers(String),
    /// Tracing the process (`PTRACE_SEIZE`) or reading its memory map was refused.
    #[error("not permitted to trace pid {pid} ({detail}); run pileup as the server's user or as root (CAP_SYS_PTRACE){scope}", scope = ptrace_scope_hint())]
    Permission {
        /// The process's id.
        pid: i32,
        /// What was refused, and the system's reason.
        detail: String,
    },
    /// Another process (a debugger, say) already traces one of its threads.
    #[error("pid {pid} is already being traced by pid {tracer} (a debugger?); detach it first")]
    AlreadyTraced {
        /// The traced process's id.
        pid: i32,
        /// The tracer's pid.
        tracer: i32,
    },
    /// The process exited while it was being sampled.
    #[error("process {0} exited during the capture")]
    ProcessExited(i32),
    /// This build is for an architecture other than x86_64, whose stacks are
    /// the only ones captured.
    #[error("this build of pileup captures x86_64 stacks only")]
    UnsupportedArch,
}

/// What the user can do about a [`EngineError`] whose fix is a choice of
/// process (the front end names it with its own flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fix {
    /// Check the pid given, or let the server be found.
    CheckPid,
    /// Give the server's pid, or ask to take any process.
    ServerOrAnyProcess,
    /// Start the server, or give a pid.
    StartOrGivePid,
    /// Choose one server (by pid, or by the socket or port it serves).
    ChooseServer,
}

impl EngineError {
    /// The fix to add to the message, where it is a choice of process.
    pub fn fix(&self) -> Option<Fix> {
        match self {
            EngineError::NoSuchProcess(_) => Some(Fix::CheckPid),
            EngineError::NotAServer { .. } => Some(Fix::ServerOrAnyProcess),
            EngineError::NoServer => Some(Fix::StartOrGivePid),
            EngineError::SeveralServers(_) => Some(Fix::ChooseServer),
            _ => None,
        }
    }
}

/// Why a module's debug file could not be had or used.
#[derive(Debug, Error)]
pub enum DebugFileError {
    #[error("debuginfod: {0}")]
    Lookup(String),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: not a readable ELF file: {why}")]
    NotElf { path: String, why: String },
    #[error("{path} is the debug file of build-id {got}, not {module}'s")]
    OtherBuild { path: String, got: String, module: String },
}

fn ptrace_scope_hint() -> String {
    match std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope") {
        Ok(s) => match s.trim() {
            "0" => String::new(),
            "1" => ", or set kernel.yama.ptrace_scope=0 (it is 1: only ancestors may trace)".into(),
            "2" => "; kernel.yama.ptrace_scope is 2: only CAP_SYS_PTRACE may trace".into(),
            "3" => "; kernel.yama.ptrace_scope is 3: tracing is disabled until reboot".into(),
            o => format!("; kernel.yama.ptrace_scope is {o}"),
        },
        Err(_) => String::new(),
    }
}

/// Who traces `tid`, from `/proc/PID/task/TID/status` (`TracerPid:`).
pub fn tracer_of(pid: i32, tid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("TracerPid:")).and_then(|v| v.trim().parse().ok()).filter(|&t| t != 0)
}
