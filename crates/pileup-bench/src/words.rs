//! Counts said right in the bench's text.

/// `n` client threads: "1 thread", "8 threads".
pub fn threads(n: u32) -> String {
    pileup_output::plural(n, "thread", "threads")
}
