//! `pileup sandbox`: throwaway mariadbd servers for experiments.

use anyhow::Result;
use clap::Subcommand;
use pileup_sandbox::report::{Listed, Listing};
use pileup_sandbox::{list, stop_by_name, Options, Sandbox};

#[derive(Subcommand)]
pub enum SandboxCmd {
    /// Start a server in its own directory (datadir, socket, port) under
    /// $PILEUP_SANDBOX_DIR or $TMPDIR/pileup-sandboxes. Never touches a system server.
    Start {
        /// Name of the sandbox (its directory name).
        #[arg(default_value = "sandbox")]
        name: String,
        /// TCP port on 127.0.0.1 (default: a free one).
        #[arg(long)]
        port: Option<u16>,
        /// Write a binary log (to be a replication source).
        #[arg(long)]
        binlog: bool,
        /// Make it a replica of this running sandbox.
        #[arg(long, value_name = "NAME")]
        replica_of: Option<String>,
        /// Extra server option, repeatable: --set innodb_buffer_pool_size=1G
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        #[command(flatten)]
        out: crate::output::FormatArgs,
    },
    /// Stop a sandbox and delete its files.
    Stop {
        /// Names to stop.
        names: Vec<String>,
        /// Stop every sandbox.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        out: crate::output::FormatArgs,
    },
    /// List sandboxes.
    List {
        #[command(flatten)]
        out: crate::output::FormatArgs,
    },
}

pub fn run(c: SandboxCmd) -> Result<()> {
    match c {
        SandboxCmd::Start { name, port, binlog, replica_of, set, out } => {
            let format = out.format();
            let mut cnf = vec![];
            for s in set {
                let Some((k, v)) = s.split_once('=') else {
                    super::usage!("--set '{s}': expected KEY=VALUE");
                };
                cnf.push((k.trim().to_string(), v.trim().to_string()));
            }
            let replica_of = match replica_of {
                Some(n) => Some(
                    list(None)?
                        .into_iter()
                        .find(|(e, up)| e.name == n && *up)
                        .map(|(e, _)| e)
                        .ok_or_else(|| anyhow::anyhow!("no running sandbox named {n} (see pileup sandbox list)"))?,
                ),
                None => None,
            };
            let sb = Sandbox::start(Options {
                name: Some(name),
                port,
                binlog,
                replica_of,
                cnf,
                die_with_parent: false,
                ..Default::default()
            })?;
            let started = pileup_sandbox::report::Started(sb.keep());
            crate::output::emit(&started, &[(None, format)], &Default::default())
        }
        SandboxCmd::Stop { names, all, out } => {
            if !all && names.is_empty() {
                super::usage!("name the sandbox to stop, or --all (see pileup sandbox list)");
            }
            let names: Vec<String> = if all { list(None)?.into_iter().map(|(e, _)| e.name).collect() } else { names };
            for n in &names {
                stop_by_name(n, None)?;
            }
            let stopped = pileup_sandbox::report::Stopped { stopped: names };
            crate::output::emit(&stopped, &[(None, out.format())], &Default::default())
        }
        SandboxCmd::List { out } => {
            let sandboxes = list(None)?.into_iter().map(|(sandbox, running)| Listed { sandbox, running }).collect();
            crate::output::emit(&Listing { sandboxes }, &[(None, out.format())], &Default::default())
        }
    }
}
