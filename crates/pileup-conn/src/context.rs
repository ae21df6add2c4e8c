//! `ctx`/`with_ctx` on results: what a failed step was doing, said before
//! its error, in a crate's own error type.

/// Define `Ctx`, the crate's trait that puts what a step was doing before
/// an I/O error, a server's error, or one of the crate's own errors, each
/// turned into the crate's error type `$err` by the function given
/// (`fn(String, E) -> $err`). A macro, so the trait is the crate's own and
/// `?` infers its error type as it did.
#[macro_export]
macro_rules! context_trait {
    ($err:ty, io: $io:expr, sql: $sql:expr, within: $within:expr) => {
        /// What a failed step was doing, said before its error.
        pub(crate) trait Ctx<T> {
            fn with_ctx(self, what: impl FnOnce() -> String) -> std::result::Result<T, $err>;
            fn ctx(self, what: &str) -> std::result::Result<T, $err>
            where
                Self: Sized,
            {
                self.with_ctx(|| what.to_string())
            }
        }

        impl<T> Ctx<T> for std::result::Result<T, std::io::Error> {
            fn with_ctx(self, what: impl FnOnce() -> String) -> std::result::Result<T, $err> {
                self.map_err(|e| ($io)(what(), e))
            }
        }

        impl<T> Ctx<T> for std::result::Result<T, mysql::Error> {
            fn with_ctx(self, what: impl FnOnce() -> String) -> std::result::Result<T, $err> {
                self.map_err(|e| ($sql)(what(), e))
            }
        }

        impl<T> Ctx<T> for std::result::Result<T, $err> {
            fn with_ctx(self, what: impl FnOnce() -> String) -> std::result::Result<T, $err> {
                self.map_err(|e| ($within)(what(), e))
            }
        }
    };
}
