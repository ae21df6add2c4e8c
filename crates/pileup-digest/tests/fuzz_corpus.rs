//! Every input kept in the slow-log fuzz corpus (slow logs a real MariaDB
//! wrote, plain, gzip and zstd, and what `cargo fuzz` found that covers
//! new code) is digested without a panic, on one thread and on two. Runs
//! on stable, in CI, without libFuzzer.

use std::path::Path;

use pileup_digest::{digest, input::Input, Options, Quiet};

#[test]
fn every_kept_slow_log_input_is_digested_without_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/slowlog");
    let (mut inputs, mut events) = (0, 0);
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        for jobs in [1, 2] {
            let o = Options { jobs, block_size: 4096, ..Default::default() };
            if let Ok(d) = digest(&[Input::File(p.clone())], &o, &mut Quiet) {
                events += d.events;
            }
        }
        inputs += 1;
    }
    assert!(inputs >= 5, "the corpus holds {inputs} inputs");
    assert!(events > 0, "no input held a statement: the corpus holds no slow logs");
}
