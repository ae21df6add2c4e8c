//! Every input kept in the fuzz corpus (windows cut from real relay logs, and
//! what `cargo fuzz` found that covers new code) decodes without a panic,
//! with checksums verified and not. Runs on stable, in CI, without libFuzzer.

use std::path::Path;

use pileup_binlog::check::decode_everything;

#[test]
fn every_kept_fuzz_input_decodes_without_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/decode");
    let mut inputs = 0;
    let mut events = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        events += decode_everything(&p, true, 10_000);
        decode_everything(&p, false, 10_000);
        inputs += 1;
    }
    assert!(inputs >= 20, "the corpus holds {inputs} inputs");
    assert!(events > 0, "no input framed a single event: the corpus holds no binlogs");
}
