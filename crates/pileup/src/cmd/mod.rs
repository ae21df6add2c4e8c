pub mod sandbox;
pub mod stacks;
pub mod watch;

/// An error that asks for a specific exit code.
#[derive(Debug)]
pub struct ExitCode(pub i32);

impl std::fmt::Display for ExitCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit code {}", self.0)
    }
}
impl std::error::Error for ExitCode {}

/// Parse `500ms`, `10s`, `2m`, `1h` (a bare number is seconds), with the
/// same rules as durations inside trigger expressions.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    let secs = match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Some(v),
        Ok(_) => None,
        Err(_) => pileup_watch::trigger::parse_duration(s),
    };
    secs.map(std::time::Duration::from_secs_f64).ok_or_else(|| format!("{s:?} is not a duration (use e.g. 500ms, 10s, 2m)"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations() {
        use std::time::Duration;
        assert_eq!(super::parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(super::parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(super::parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(super::parse_duration("fast").is_err());
        assert!(super::parse_duration("-1s").is_err());
    }
}
