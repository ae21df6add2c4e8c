//! Connection options shared by every pileup command, following MySQL client
//! conventions so DBAs can reuse what they already have:
//!
//! * option files: `--defaults-file` (only that file), or `/etc/my.cnf`,
//!   `/etc/mysql/my.cnf`, `~/.my.cnf` plus `--defaults-extra-file`; groups
//!   `[client]`, `[client-server]`, `[client-mariadb]` and `[pileup]`, as
//!   MariaDB's clients read them; a default file that cannot be read is
//!   skipped, as the clients skip it; `--no-defaults` reads none;
//! * environment: `MYSQL_PWD`, `MYSQL_HOST`, `MYSQL_TCP_PORT`, `MYSQL_UNIX_PORT`;
//! * flags: `-S/--socket`, `-h/--host`, `-P/--port`, `-u/--user`, `-D/--database`.
//!
//! Later sources override earlier ones in that order. A password is never
//! required on the command line: use `MYSQL_PWD`, an option file, or `-p` with
//! no value to be asked on the terminal.

mod context;
mod error;
pub mod mycnf;
pub mod watchdog;

use std::path::PathBuf;
use std::time::Duration;

use mysql::prelude::Queryable;

pub use error::{error_text, is_closed, plain, readable, ConnError, SqlError};
pub use mycnf::OptionFile;

type Result<T, E = ConnError> = std::result::Result<T, E>;

/// The option groups pileup reads from option files: the MariaDB clients'
/// (Debian puts the server's socket in `[client-server]`) and its own.
pub const GROUPS: &[&str] = &["client", "client-server", "client-mariadb", "pileup"];

/// Where the server's socket is when nothing says (Debian's, then others').
const DEFAULT_SOCKETS: [&str; 3] = ["/run/mysqld/mysqld.sock", "/var/run/mysqld/mysqld.sock", "/tmp/mysql.sock"];

/// Connection options as a user gives them (the CLI fills them from its
/// flags); [`ConnOptions::resolve`] merges them with option files and the
/// environment.
#[derive(Debug, Clone, Default)]
pub struct ConnOptions {
    /// Read options only from this file (groups [client] and [pileup]).
    pub defaults_file: Option<PathBuf>,
    /// Read this file after the usual option files.
    pub defaults_extra_file: Option<PathBuf>,
    /// Read no option files.
    pub no_defaults: bool,
    /// Unix socket of the server.
    pub socket: Option<PathBuf>,
    /// Server host ("localhost" means the Unix socket).
    pub host: Option<String>,
    /// Server TCP port.
    pub port: Option<u16>,
    /// SQL user (default: the login name, as the mysql client does).
    pub user: Option<String>,
    /// `Some("")`: ask for the password (through `ask_password`). A value
    /// is refused (see [`ConnOptions::validate`]).
    pub password: Option<String>,
    /// How to ask for the password when `password` says to (the CLI asks
    /// on the terminal); called only when a connection is resolved.
    pub ask_password: Option<fn() -> std::io::Result<String>>,
    /// Default database.
    pub database: Option<String>,
    /// Seconds allowed for connecting and for each query pileup runs.
    pub connect_timeout: f64,
}

/// Where and how to connect, after every source was merged.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnSpec {
    pub socket: Option<PathBuf>,
    pub host: Option<String>,
    pub port: u16,
    pub user: Option<String>,
    pub password: Option<String>,
    pub database: Option<String>,
    pub timeout: Duration,
    /// Each query's bound when it differs from `timeout` (a dump's or a
    /// load's statements copy data for minutes; connecting stays bounded
    /// by `timeout`).
    pub query_timeout: Option<Duration>,
    pub files_read: Vec<PathBuf>,
    /// Default option files that could not be read (skipped), and why.
    pub files_skipped: Vec<(PathBuf, String)>,
}

impl std::fmt::Debug for ConnSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnSpec")
            .field("socket", &self.socket)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("database", &self.database)
            .finish()
    }
}

impl ConnSpec {
    /// A human description of the endpoint, never including the password.
    pub fn describe(&self) -> String {
        match (&self.socket, &self.host) {
            (Some(s), _) => format!("socket {}", s.display()),
            (None, Some(h)) => format!("{h}:{}", self.port),
            (None, None) => "localhost".into(),
        }
    }

    /// Connect with bounded connect, read and write times.
    pub fn connect(&self) -> Result<mysql::Conn> {
        // The client waits for the server's greeting as long as for a
        // statement: with statements allowed to run long (a dump's), a hung
        // server would hold the connect for as long. A first connection
        // bounded by the connect timeout finds a server that does not
        // answer.
        if self.query_timeout.is_some_and(|q| q > self.timeout) {
            let probe = self.opts().read_timeout(Some(self.timeout)).write_timeout(Some(self.timeout));
            drop(mysql::Conn::new(probe).map_err(|e| ConnError::connect(self.describe(), e))?);
        }
        let mut conn = mysql::Conn::new(self.opts()).map_err(|e| ConnError::connect(self.describe(), e))?;
        // Bound every statement we run server-side too, not only our socket wait.
        let ms = self.query_timeout.unwrap_or(self.timeout).as_millis().max(1);
        let _ = conn.query_drop(format!("SET SESSION max_statement_time = {}", ms as f64 / 1000.0));
        let _ = conn.query_drop(format!("SET SESSION max_execution_time = {ms}"));
        let _ = conn.query_drop("SET SESSION lock_wait_timeout = 1");
        Ok(conn)
    }

    /// The client options [`ConnSpec::connect`] connects with, before it
    /// bounds the session: for a load generator's connections, which run
    /// the workload's own statements. The client asks the server nothing
    /// when it connects: its packet limit is given, the protocol's largest
    /// (the server enforces its own).
    pub fn opts(&self) -> mysql::OptsBuilder {
        let mut b = mysql::OptsBuilder::new()
            .user(self.user.clone())
            .pass(self.password.clone())
            .db_name(self.database.clone())
            .read_timeout(Some(self.query_timeout.unwrap_or(self.timeout)))
            .write_timeout(Some(self.query_timeout.unwrap_or(self.timeout)))
            .tcp_connect_timeout(Some(self.timeout))
            // Prepared statements are looked up by text in this cache; a
            // statement evicted from it is closed on the server.
            .stmt_cache_size(Some(256))
            .prefer_socket(false)
            .max_allowed_packet(Some(1 << 30));
        if let Some(s) = &self.socket {
            b = b.socket(Some(s.to_string_lossy().into_owned()));
        } else {
            b = b.ip_or_hostname(self.host.clone()).tcp_port(self.port);
        }
        b
    }
}

impl ConnOptions {
    /// Checks that need no server and no files: run before anything else so
    /// a password in argv is refused whatever the subcommand does next.
    pub fn validate(&self) -> Result<()> {
        if self.password.as_deref().is_some_and(|p| !p.is_empty()) {
            return Err(ConnError::PasswordInArgs);
        }
        self.check_timeout()
    }

    fn check_timeout(&self) -> Result<()> {
        if self.connect_timeout.is_nan() || self.connect_timeout <= 0.0 {
            return Err(ConnError::Timeout(self.connect_timeout));
        }
        Ok(())
    }

    /// Merge option files, environment and flags into one [`ConnSpec`].
    pub fn resolve(&self) -> Result<ConnSpec> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        self.resolve_with(home, &env)
    }

    /// [`resolve`](Self::resolve) with the environment passed in (for tests).
    pub fn resolve_with(&self, home: Option<PathBuf>, env: &dyn Fn(&str) -> Option<String>) -> Result<ConnSpec> {
        let of = self.option_files(home.as_deref())?;
        let mut host = of.get("host").map(String::from);
        let mut port = match of.get("port") {
            Some(p) => {
                Some(p.parse::<u16>().map_err(|_| ConnError::Port { from: "an option file", value: p.to_string() })?)
            }
            None => None,
        };
        let mut socket = of.get("socket").map(PathBuf::from);
        let mut user = of.get("user").map(String::from);
        let mut password = of.get("password").map(String::from);
        let mut database = of.get("database").map(String::from);

        if let Some(v) = env("MYSQL_HOST") {
            host = Some(v);
        }
        if let Some(v) = env("MYSQL_TCP_PORT") {
            port = Some(v.parse().map_err(|_| ConnError::Port { from: "MYSQL_TCP_PORT", value: v.clone() })?);
        }
        if let Some(v) = env("MYSQL_UNIX_PORT") {
            socket = Some(v.into());
        }
        if let Some(v) = env("MYSQL_PWD") {
            password = Some(v);
        }

        if let Some(v) = &self.host {
            host = Some(v.clone());
            if self.socket.is_none() && v != "localhost" {
                socket = None; // an explicit TCP host beats a socket from files
            }
        }
        if let Some(v) = self.port {
            port = Some(v);
        }
        if let Some(v) = &self.socket {
            socket = Some(v.clone());
        }
        if let Some(v) = &self.user {
            user = Some(v.clone());
        }
        if let Some(v) = &self.database {
            database = Some(v.clone());
        }
        match self.password.as_deref() {
            None => {}
            Some("") => {
                let ask = self.ask_password.ok_or(ConnError::NoWayToAsk)?;
                password = Some(ask().map_err(ConnError::Asking)?);
            }
            Some(_) => return Err(ConnError::PasswordInArgs),
        }
        if user.is_none() {
            user = env("USER")
                .or_else(|| env("LOGNAME"))
                .or_else(|| nix::unistd::User::from_uid(nix::unistd::geteuid()).ok().flatten().map(|u| u.name));
        }

        // MySQL convention: no host or "localhost" means the Unix socket.
        let local = matches!(host.as_deref(), None | Some("localhost"));
        if local && socket.is_none() {
            socket = DEFAULT_SOCKETS.iter().map(PathBuf::from).find(|p| p.exists());
        }
        if !local {
            socket = socket.filter(|_| self.socket.is_some());
        }
        if local && socket.is_none() {
            if host.is_some() {
                // "localhost" asked for the socket: the default one, as the
                // client tries it (its absence is the error to report).
                socket = Some(PathBuf::from(DEFAULT_SOCKETS[0]));
            } else {
                host = Some("127.0.0.1".into());
            }
        }
        self.check_timeout()?;
        Ok(ConnSpec {
            socket,
            host,
            port: port.unwrap_or(3306),
            user,
            password,
            database,
            timeout: Duration::from_secs_f64(self.connect_timeout),
            query_timeout: None,
            files_read: of.files_read,
            files_skipped: of.files_skipped,
        })
    }

    /// The option files read, in the mysql client's order: `--defaults-file`
    /// alone, or the system's and the user's (those that cannot be read
    /// are skipped) then `--defaults-extra-file`; none with `--no-defaults`.
    fn option_files(&self, home: Option<&std::path::Path>) -> Result<OptionFile> {
        let mut of = OptionFile::default();
        if !self.no_defaults {
            if let Some(f) = &self.defaults_file {
                if !f.exists() {
                    return Err(ConnError::NoOptionFile(f.clone()));
                }
                of.merge_file(f, GROUPS).map_err(|e| ConnError::OptionFile(f.clone(), e))?;
            } else {
                // The default files are read where they can be; one that
                // cannot (another user's ~/.my.cnf) is skipped, as the
                // mysql client skips it, and listed in `files_skipped`.
                let mut read = |p: PathBuf| {
                    if let Err(e) = of.merge_file(&p, GROUPS) {
                        of.files_skipped.push((p, e.to_string()));
                    }
                };
                read("/etc/my.cnf".into());
                read("/etc/mysql/my.cnf".into());
                if let Some(h) = home {
                    read(h.join(".my.cnf"));
                }
                if let Some(f) = &self.defaults_extra_file {
                    if !f.exists() {
                        return Err(ConnError::NoOptionFile(f.clone()));
                    }
                    of.merge_file(f, GROUPS).map_err(|e| ConnError::OptionFile(f.clone(), e))?;
                }
            }
        }
        Ok(of)
    }

    /// True when the user gave any connection hint at all; subcommands that
    /// treat SQL as optional (stacks) connect only then or when a socket exists.
    pub fn any_given(&self) -> bool {
        self.defaults_file.is_some()
            || self.defaults_extra_file.is_some()
            || self.socket.is_some()
            || self.host.is_some()
            || self.port.is_some()
            || self.user.is_some()
            || self.password.is_some()
    }
}

/// Which server family we talk to; they expose thread ids differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    MariaDb,
    MySql,
}

impl std::fmt::Display for Flavor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Flavor::MariaDb => "MariaDB",
            Flavor::MySql => "MySQL",
        })
    }
}

/// Statements this connection has sent so far, this one included (its
/// session's `Questions`): what a tool's own connection added to the
/// server's counters.
pub fn session_questions(conn: &mut mysql::Conn) -> Result<u64, SqlError> {
    Ok(conn.query_first::<(String, u64), _>("SHOW SESSION STATUS LIKE 'Questions'")?.map(|r| r.1).unwrap_or(0))
}

/// Ask the server what it is.
/// Keep this session's statements out of the server's slow log: a session
/// `long_query_time` no statement reaches and a `min_examined_row_limit`
/// no statement reaches (which also keeps out statements logged for using
/// no index), and the session's slow log off where the server lets a
/// session turn it off (MariaDB). Each is the session's own; errors are
/// ignored (an older server lacks one).
pub fn keep_out_of_slow_log(conn: &mut mysql::Conn) {
    use mysql::prelude::Queryable;
    for s in [
        "SET SESSION long_query_time = 31536000",
        "SET SESSION min_examined_row_limit = 4294967295",
        "SET SESSION slow_query_log = OFF",
    ] {
        let _ = conn.query_drop(s);
    }
}

pub fn flavor(conn: &mut mysql::Conn) -> Result<(Flavor, String), SqlError> {
    let v: Option<String> = conn.query_first("SELECT VERSION()")?;
    let v = v.unwrap_or_default();
    let f = if v.to_lowercase().contains("mariadb") { Flavor::MariaDb } else { Flavor::MySql };
    Ok((f, v))
}

/// One global status variable as a number (None: the server has no such
/// variable).
pub fn global_status(conn: &mut mysql::Conn, name: &str) -> Result<Option<u64>, SqlError> {
    Ok(conn.query_first::<(String, u64), _>(format!("SHOW GLOBAL STATUS LIKE '{name}'"))?.map(|r| r.1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn args() -> ConnOptions {
        ConnOptions { connect_timeout: 5.0, ..Default::default() }
    }

    #[test]
    fn precedence_files_env_flags() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let f = dir.join("c.cnf");
        std::fs::File::create(&f)
            .unwrap()
            .write_all(b"[client]\nuser=fileuser\npassword=filepw\nhost=db.example\nport=3307\n")
            .unwrap();
        let mut a = args();
        a.defaults_file = Some(f.clone());
        let none = |_: &str| None;
        let s = a.resolve_with(None, &none).unwrap();
        assert_eq!(
            (s.user.as_deref(), s.password.as_deref(), s.host.as_deref(), s.port),
            (Some("fileuser"), Some("filepw"), Some("db.example"), 3307)
        );
        assert!(s.socket.is_none());

        let env = |k: &str| (k == "MYSQL_PWD").then(|| "envpw".to_string());
        a.user = Some("flaguser".into());
        a.port = Some(3308);
        let s = a.resolve_with(None, &env).unwrap();
        assert_eq!((s.user.as_deref(), s.password.as_deref(), s.port), (Some("flaguser"), Some("envpw"), 3308));
        assert!(!format!("{s:?}").contains("envpw"), "Debug must hide the password");

        a.socket = Some("/tmp/x.sock".into());
        let s = a.resolve_with(None, &env).unwrap();
        assert_eq!(s.socket.as_deref(), Some(std::path::Path::new("/tmp/x.sock")));
    }

    #[test]
    fn home_my_cnf_is_read_and_password_in_argv_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().to_path_buf();
        std::fs::write(home.join(".my.cnf"), "[client]\nsocket=/tmp/home.sock\n[pileup]\nuser=pu\n").unwrap();
        let none = |_: &str| None;
        let s = args().resolve_with(Some(home.clone()), &none).unwrap();
        assert_eq!(s.user.as_deref(), Some("pu"));
        assert_eq!(s.socket.as_deref(), Some(std::path::Path::new("/tmp/home.sock")));
        let mut a = args();
        a.password = Some("secret".into());
        let e = a.resolve_with(Some(home), &none).unwrap_err().to_string();
        assert!(e.contains("refusing a password"), "{e}");
    }

    #[test]
    fn debians_client_server_group_is_read_and_localhost_means_the_socket() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("my.cnf");
        std::fs::write(&f, "[client-server]\nsocket=/tmp/cs.sock\n[mysqld]\nsocket=/tmp/server-only.sock\n").unwrap();
        let mut a = args();
        a.defaults_file = Some(f);
        let s = a.resolve_with(None, &|_| None).unwrap();
        assert_eq!(s.socket.as_deref(), Some(std::path::Path::new("/tmp/cs.sock")));
        // `-h localhost` with no socket anywhere is the default socket, not TCP.
        let mut a = args();
        a.no_defaults = true;
        a.host = Some("localhost".into());
        let s = a.resolve_with(None, &|_| None).unwrap();
        assert!(s.socket.is_some(), "{s:?}");
    }

    #[test]
    fn missing_defaults_file_is_an_error() {
        let mut a = args();
        a.defaults_file = Some("/nonexistent/x.cnf".into());
        let e = a.resolve_with(None, &|_| None).unwrap_err().to_string();
        assert!(e.contains("no such file"), "{e}");
    }
}
