//! Every input kept in the capture fuzz corpus (evidence a real watcher
//! wrote, and what `cargo fuzz` found) is read as a capture directory and
//! its report rendered without a panic. Runs on stable, in CI, without
//! libFuzzer.

use std::path::Path;

#[test]
fn every_kept_capture_input_is_read_and_rendered_without_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/capture");
    let scratch = tempfile::tempdir().unwrap();
    let (mut inputs, mut read) = (0, 0);
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let data = std::fs::read(e.unwrap().path()).unwrap();
        read += usize::from(pileup_watch::report::garbled_capture(scratch.path(), &data));
        inputs += 1;
    }
    assert!(inputs >= 2, "the corpus holds {inputs} inputs");
    assert!(read > 0, "no input was read as a capture: the corpus holds no evidence");
}
