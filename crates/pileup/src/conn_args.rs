//! The connection flags every command that talks SQL takes (MySQL client
//! conventions), turned into [`pileup_conn::ConnOptions`].

use std::path::PathBuf;

use pileup_conn::ConnOptions;

#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Connection (MySQL client conventions)")]
pub struct ConnArgs {
    /// Read options only from this file (groups [client], [client-server],
    /// [client-mariadb] and [pileup]).
    #[arg(long, value_name = "FILE", global = true)]
    pub defaults_file: Option<PathBuf>,
    /// Read this file after the usual option files.
    #[arg(long, value_name = "FILE", global = true)]
    pub defaults_extra_file: Option<PathBuf>,
    /// Read no option files.
    #[arg(long, global = true)]
    pub no_defaults: bool,
    /// Unix socket of the server.
    #[arg(short = 'S', long, value_name = "PATH", global = true)]
    pub socket: Option<PathBuf>,
    /// Server host ("localhost" means the Unix socket).
    #[arg(short = 'h', long, value_name = "HOST", global = true)]
    pub host: Option<String>,
    /// Server TCP port.
    #[arg(short = 'P', long, value_name = "PORT", global = true)]
    pub port: Option<u16>,
    /// SQL user (default: the login name, as the mysql client does).
    #[arg(short = 'u', long, value_name = "USER", global = true)]
    pub user: Option<String>,
    /// Ask for the password on the terminal. A value here is refused: use
    /// MYSQL_PWD or an option file so the password never shows up in `ps`.
    #[arg(short = 'p', long = "password", num_args = 0..=1, require_equals = true, default_missing_value = "", value_name = "ASK", hide_default_value = true, global = true)]
    pub password: Option<String>,
    /// Default database.
    #[arg(short = 'D', long, value_name = "DB", global = true)]
    pub database: Option<String>,
    /// Seconds allowed for connecting and for each query pileup runs.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0, global = true)]
    pub connect_timeout: f64,
}

impl ConnArgs {
    pub fn options(&self) -> ConnOptions {
        ConnOptions {
            defaults_file: self.defaults_file.clone(),
            defaults_extra_file: self.defaults_extra_file.clone(),
            no_defaults: self.no_defaults,
            socket: self.socket.clone(),
            host: self.host.clone(),
            port: self.port,
            user: self.user.clone(),
            password: self.password.clone(),
            database: self.database.clone(),
            connect_timeout: self.connect_timeout,
            ask_password: Some(prompt_password),
        }
    }
}

/// Ask for the password on the terminal, without echo (what `-p` alone
/// asks for, as the mysql client does).
fn prompt_password() -> std::io::Result<String> {
    use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, SetArg};
    use std::io::{BufRead, IsTerminal};
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(std::io::Error::other(
            "-p asks for the password on a terminal, but standard input is not one; use MYSQL_PWD or an option file",
        ));
    }
    crate::output::note_raw(format_args!("Enter password: "));
    let old = tcgetattr(&stdin).ok();
    if let Some(t) = &old {
        let mut quiet = t.clone();
        quiet.local_flags.remove(LocalFlags::ECHO);
        let _ = tcsetattr(&stdin, SetArg::TCSANOW, &quiet);
    }
    let mut line = String::new();
    let r = stdin.lock().read_line(&mut line);
    if let Some(t) = &old {
        let _ = tcsetattr(&stdin, SetArg::TCSANOW, t);
    }
    crate::output::note_raw(format_args!("\n"));
    r?;
    Ok(line.trim_end_matches(['\n', '\r']).to_string())
}
