//! How a run ends, as types: a command line that cannot be used
//! ([`Usage`], exit status 2) and input found damaged ([`Damaged`], 3);
//! any other error is a failure (1). Every check of a flag's value makes a
//! [`Usage`] error, so the status follows from the type.

/// A command line that cannot be used: a flag's value out of range, flags
/// that contradict each other, an unknown name. Exit status 2, the message
/// followed by where the command's help is.
#[derive(Debug)]
pub struct Usage(pub String);

impl Usage {
    pub fn new(s: impl Into<String>) -> Usage {
        Usage(s.into())
    }
}

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Usage {}

/// Refuse the command line: return a [`Usage`] error (exit status 2).
macro_rules! usage {
    ($($t:tt)*) => {
        return Err($crate::exit::Usage(format!($($t)*)).into())
    };
}
pub(crate) use usage;

/// The work was done but part of the input was damaged (a corrupt log
/// entry or binlog event, named with its offset): exit status 3.
#[derive(Debug)]
pub struct Damaged(pub String);

impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Damaged {}
