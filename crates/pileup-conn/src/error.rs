//! What can go wrong connecting, in the terms of the MySQL client
//! conventions, and client library errors as a user reads them.

use std::path::PathBuf;

/// Why a connection could not be resolved or opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error(
        "refusing a password on the command line (it would show in `ps`); use MYSQL_PWD, an option file, or -p alone to be asked"
    )]
    PasswordInArgs,
    #[error("a password was to be asked for, but there is no terminal to ask on; use MYSQL_PWD or an option file")]
    NoWayToAsk,
    #[error("reading the password: {0}")]
    Asking(#[source] std::io::Error),
    #[error("the connect timeout must be a positive number of seconds, not {0}")]
    Timeout(f64),
    #[error("option file {0}: no such file")]
    NoOptionFile(PathBuf),
    #[error("option file {0}: {1}")]
    OptionFile(PathBuf, #[source] std::io::Error),
    #[error("{from}: port = '{value}' is not a port number")]
    Port { from: &'static str, value: String },
    #[error("cannot connect to MySQL at {at}: {message}; {hint}")]
    Connect { at: String, message: String, hint: &'static str },
}

impl ConnError {
    /// A failed connection to `at`, with what to check.
    pub(crate) fn connect(at: String, e: mysql::Error) -> ConnError {
        // A read that timed out waiting for the server's greeting.
        let message = plain(&e);
        let timed_out = message == NO_ANSWER || message.contains("timed out");
        let message = if timed_out { "the server did not answer (timed out)".to_string() } else { message };
        let hint = if message.contains("Access denied") {
            "check the user and password (MYSQL_PWD, ~/.my.cnf [client], or --defaults-file)"
        } else if message.contains("No such file") || message.contains("Connection refused") {
            "is the server running? point pileup at it with -S/--socket or -h/-P"
        } else if message.to_lowercase().contains("timed out") {
            "it may be hung or overloaded; raise --connect-timeout or check the server"
        } else {
            "check the connection options (see `pileup --help`)"
        };
        ConnError::Connect { at, message, hint }
    }
}

/// A client library error, displayed as its message alone.
#[derive(Debug, thiserror::Error)]
#[error("{}", plain(.0))]
pub struct SqlError(#[from] pub mysql::Error);

/// A client library error as a user reads it: the mysql crate's Display
/// wraps every message in its variant's name (`DriverError { ... }`); this
/// is the message alone, taken from the variant.
pub fn plain(e: &mysql::Error) -> String {
    use mysql::Error as E;
    let mut text = readable(&match e {
        E::IoError(e) => e.to_string(),
        E::CodecError(e) => e.to_string(),
        E::MySqlError(e) => e.to_string(),
        E::DriverError(e) => e.to_string(),
        E::UrlError(e) => e.to_string(),
        E::FromValueError(v) => format!("a value of an unexpected type: {}", v.as_sql(false)),
        E::FromRowError(r) => format!("a row of an unexpected shape ({} columns)", r.len()),
    });
    // An error the crate wrapped in an I/O error (a LOCAL INFILE handler's
    // write) is shown with the crate's own variant name around it.
    for wrapper in ["CodecError { ", "DriverError { ", "IoError { ", "MySqlError { "] {
        if let Some(inner) = text.strip_prefix(wrapper).and_then(|t| t.strip_suffix(" }")) {
            text = inner.to_string();
        }
    }
    // A read or write timeout on the socket (EAGAIN, as an I/O or a packet
    // codec error): the OS's words say nothing of what happened.
    if text == "Resource temporarily unavailable" || text.ends_with(": Resource temporarily unavailable") {
        return NO_ANSWER.into();
    }
    if says_closed(&text) {
        return "the server closed the connection (it stopped, restarted, or ended this session)".into();
    }
    text
}

/// Whether a client library error says the connection ended under it
/// (reset, end of file, broken pipe), whatever ended it: a caller that
/// can tell a live server from a dead one decides what it means.
pub fn is_closed(e: &mysql::Error) -> bool {
    let text = plain(e);
    text.starts_with("the server closed the connection")
}

/// The socket's and the packet reader's words for a connection that ended
/// under a statement: they name no cause a user can act on.
fn says_closed(text: &str) -> bool {
    const CLOSED: [&str; 5] = [
        "bytes remaining on stream",
        "unexpected end of file",
        "Broken pipe",
        "Connection reset by peer",
        "server disconnected",
    ];
    CLOSED.iter().any(|c| text == *c || text.ends_with(&format!(": {c}")))
}

/// What a socket's read or write timeout means.
const NO_ANSWER: &str = "the server did not answer within the time limit (a hung server or a stalled disk)";

/// A message as a person reads it: without the C library's error number
/// (`No such file or directory (os error 2)`), a library's `IO error: `
/// prefix, or the `quoted'` quoting some client libraries use (written
/// here: a rewrite of a message's few fixed forms, not a parsing job).
pub fn readable(msg: &str) -> String {
    let mut s = msg.replace("IO error: ", "");
    while let Some(at) = s.find(" (os error ") {
        match s[at..].find(')') {
            Some(end) => s.replace_range(at..at + end + 1, ""),
            None => break,
        }
    }
    // `X' → X (only a backquote closed by an apostrophe).
    while let Some(open) = s.find('`') {
        match s[open + 1..].find('\'') {
            Some(close) => {
                s.replace_range(open + 1 + close..open + 2 + close, "");
                s.replace_range(open..open + 1, "");
            }
            None => break,
        }
    }
    s
}

/// An error and its causes as one message, each cause after a colon, a
/// client library error as its message alone (where anyhow's `{:#}` would
/// print the library's wrappers).
pub fn error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = vec![];
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        let text = match c.downcast_ref::<mysql::Error>() {
            Some(m) => plain(m),
            None => readable(&c.to_string()),
        };
        // A cause whose text its parent already gave (a wrapper that
        // displays its source) is said once.
        if !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = c.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_error_numbers_and_odd_quoting_are_left_out() {
        assert_eq!(
            readable("Could not connect to address `/x.sock': No such file or directory (os error 2)"),
            "Could not connect to address /x.sock: No such file or directory"
        );
        assert_eq!(readable("IO error: `Broken pipe (os error 32)'"), "Broken pipe");
        assert_eq!(readable("it would show in `ps`; fine"), "it would show in `ps`; fine");
    }

    #[test]
    fn client_errors_read_as_their_message() {
        let e = mysql::Error::MySqlError(mysql::MySqlError {
            state: "42000".into(),
            code: 1227,
            message: "Access denied; you need (at least one of) the SUPER privilege(s)".into(),
        });
        assert_eq!(plain(&e), "ERROR 1227 (42000): Access denied; you need (at least one of) the SUPER privilege(s)");
        assert!(e.to_string().starts_with("MySqlError {"), "the crate's own Display wraps it: {e}");
        let io =
            mysql::Error::IoError(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "unexpected end of file"));
        assert_eq!(plain(&io), "the server closed the connection (it stopped, restarted, or ended this session)");
        assert!(is_closed(&io));
        let s = SqlError(io);
        assert!(s.to_string().starts_with("the server closed the connection"));
        let other = mysql::Error::IoError(std::io::Error::other("disk on fire"));
        assert_eq!(plain(&other), "disk on fire");
        assert!(!is_closed(&other));
        // The crate's error inside an I/O error (a LOCAL INFILE handler's).
        let codec = mysql::Error::CodecError(std::io::Error::from_raw_os_error(libc::ECONNRESET).into());
        let wrapped = mysql::Error::IoError(std::io::Error::other(codec));
        assert!(plain(&wrapped).starts_with("the server closed the connection"), "{}", plain(&wrapped));
        // A socket's read timeout (EAGAIN) says what it means.
        let eagain = mysql::Error::IoError(std::io::Error::from_raw_os_error(libc::EAGAIN));
        assert!(plain(&eagain).starts_with("the server did not answer within the time limit"), "{}", plain(&eagain));
    }

    #[test]
    fn an_error_chain_is_one_line_without_wrappers_or_repeats() {
        #[derive(Debug, thiserror::Error)]
        #[error("reading the processlist")]
        struct Outer(#[source] mysql::Error);
        let e = Outer(mysql::Error::MySqlError(mysql::MySqlError {
            state: "HY000".into(),
            code: 1969,
            message: "Query execution was interrupted (max_statement_time exceeded)".into(),
        }));
        assert_eq!(
            error_text(&e),
            "reading the processlist: ERROR 1969 (HY000): Query execution was interrupted (max_statement_time exceeded)"
        );
        #[derive(Debug, thiserror::Error)]
        #[error("cannot write x: {0}")]
        struct Says(#[source] std::io::Error);
        let e = Says(std::io::Error::other("disk full"));
        assert_eq!(error_text(&e), "cannot write x: disk full");
    }
}
