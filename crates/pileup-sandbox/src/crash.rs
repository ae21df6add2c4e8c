//! A crash and a start that is timed from outside: SIGKILL, a new server
//! on the same datadir whose process id is known at once, and whether it
//! answers yet (`pileup bench recovery`).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;

use crate::error::{bail, setup, Ctx, Result};
use crate::{gone, spawn, write_endpoint, Sandbox};

impl Sandbox {
    /// Kill the server with SIGKILL, as a crash would (nothing flushed,
    /// nothing shut down), and wait until it is gone. The directory stays;
    /// [`Sandbox::spawn_again`] starts a server on it.
    pub fn crash(&mut self) -> Result<()> {
        use nix::sys::signal::{kill, Signal};
        let _ = kill(nix::unistd::Pid::from_raw(self.endpoint.pid as i32), Signal::SIGKILL);
        match self.child.take() {
            Some(mut c) => {
                c.wait().ctx("waiting for the killed mariadbd")?;
            }
            None => {
                let t0 = Instant::now();
                while !gone(self.endpoint.pid) {
                    if t0.elapsed() > Duration::from_secs(30) {
                        bail!("mariadbd (pid {}) still there 30 s after SIGKILL", self.endpoint.pid);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        Ok(())
    }

    /// Start the server again on the same datadir, socket and port, and
    /// return its process id at once, without waiting for it to answer
    /// (a crash-recovery measurement times that itself with
    /// [`Sandbox::answers`]).
    pub fn spawn_again(&mut self) -> Result<u32> {
        let (bin, args, die_with_parent, _) =
            self.launch.clone().ok_or_else(|| setup!("this sandbox was not started here"))?;
        if self.child.is_some() {
            bail!("sandbox {}: its server is still running", self.endpoint.name);
        }
        let mut cmd = Command::new(bin);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let child = spawn(cmd, die_with_parent)?;
        self.endpoint.pid = child.id();
        self.child = Some(child);
        write_endpoint(&self.endpoint)?;
        Ok(self.endpoint.pid)
    }

    /// Start the server again on its datadir (after [`Sandbox::crash`], or
    /// once it has stopped) and wait until it answers, within the
    /// sandbox's start-up bound.
    pub fn start_again(&mut self) -> Result<()> {
        let timeout = self.launch.as_ref().map(|l| l.3).ok_or_else(|| setup!("this sandbox was not started here"))?;
        self.spawn_again()?;
        self.wait_ready(timeout)
    }

    /// Whether the server answers a query now (one attempt, over the
    /// socket).
    pub fn answers(&self) -> bool {
        self.endpoint.socket.exists() && self.conn_spec().connect().is_ok_and(|mut c| c.query_drop("DO 1").is_ok())
    }

    /// Whether the server this sandbox started has exited (reaped here).
    pub fn exited(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => !matches!(c.try_wait(), Ok(None)),
            None => true,
        }
    }

    /// The server's error log.
    pub fn error_log(&self) -> PathBuf {
        self.endpoint.dir.join("error.log")
    }
}
