//! `pileup sandbox start` and `list` as the output layer writes them.

use std::io::Write;

use serde::Serialize;

use crate::Endpoint;

/// A sandbox just started: where it is and how to use it.
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct Started(pub Endpoint);

impl pileup_output::Report for Started {
    fn tool(&self) -> &'static str {
        "sandbox start"
    }
    fn text(&self, _o: &pileup_output::Options, w: &mut dyn Write) -> std::io::Result<()> {
        let e = &self.0;
        writeln!(w, "sandbox {} running: pid {}, port {}, socket {}", e.name, e.pid, e.port, e.socket.display())?;
        writeln!(w, "  connect: mariadb -S {} -u root", e.socket.display())?;
        writeln!(w, "  stacks:  pileup stacks --pid {}", e.pid)?;
        writeln!(w, "  stop:    pileup sandbox stop {}", e.name)
    }
}

/// One sandbox of a listing.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    /// Where it is.
    pub sandbox: Endpoint,
    /// Whether its server answers.
    pub running: bool,
}

/// The sandboxes under a base directory.
#[derive(Debug, Clone, Serialize)]
pub struct Listing {
    /// Each, by name.
    pub sandboxes: Vec<Listed>,
}

impl pileup_output::Report for Listing {
    fn tool(&self) -> &'static str {
        "sandbox list"
    }
    fn text(&self, _o: &pileup_output::Options, w: &mut dyn Write) -> std::io::Result<()> {
        if self.sandboxes.is_empty() {
            return writeln!(w, "no sandboxes");
        }
        writeln!(w, "{:<16} {:>8} {:>6} {:<8} SOCKET", "NAME", "PID", "PORT", "STATE")?;
        for l in &self.sandboxes {
            let e = &l.sandbox;
            let state = if l.running { "running" } else { "dead" };
            writeln!(w, "{:<16} {:>8} {:>6} {state:<8} {}", e.name, e.pid, e.port, e.socket.display())?;
        }
        Ok(())
    }
}

/// The sandboxes `pileup sandbox stop` stopped.
#[derive(Debug, Clone, Serialize)]
pub struct Stopped {
    /// Their names.
    pub stopped: Vec<String>,
}

impl pileup_output::Report for Stopped {
    fn tool(&self) -> &'static str {
        "sandbox stop"
    }
    fn text(&self, _o: &pileup_output::Options, w: &mut dyn Write) -> std::io::Result<()> {
        if self.stopped.is_empty() {
            return writeln!(w, "no sandboxes");
        }
        for n in &self.stopped {
            writeln!(w, "stopped {n}")?;
        }
        Ok(())
    }
}
