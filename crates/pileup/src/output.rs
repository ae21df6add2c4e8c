//! Writing results: to stdout, or to a file created 0600 (results hold query
//! text) through a temporary file renamed into place, so a full disk or a
//! crash never leaves a truncated file under the requested name. Paths that
//! are not regular files (`/dev/null`, FIFOs, symlinks) are written through.

use std::io::{IsTerminal, Write};
use std::path::Path;

use anyhow::{bail, Result};

pub fn write_output(path: Option<&Path>, binary: bool, f: impl FnOnce(&mut dyn Write) -> Result<()>) -> Result<()> {
    match path {
        None => {
            let stdout = std::io::stdout();
            if binary && stdout.is_terminal() {
                bail!("this format is binary; write it to a file with -o FILE");
            }
            // Buffered: stdout alone flushes at every newline, a system call
            // per line of a long report.
            let mut w = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
            f(&mut w)?;
            w.flush()?;
            Ok(())
        }
        Some(p) => pileup_files::write_private(p, f),
    }
}
