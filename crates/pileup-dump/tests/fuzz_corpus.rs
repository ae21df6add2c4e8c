//! Every input kept in the dump-files fuzz corpus (a real manifest, real
//! mydumper files, and what `cargo fuzz` found) is read as each dump file
//! it could be without a panic. Runs on stable, in CI, without libFuzzer.

use std::path::Path;

#[test]
fn every_kept_dump_file_input_is_read_without_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/dumpfiles");
    let scratch = tempfile::tempdir().unwrap();
    let (mut inputs, mut statements) = (0, 0);
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let data = std::fs::read(e.unwrap().path()).unwrap();
        statements += pileup_dump::check::garbled_dump(scratch.path(), &data);
        inputs += 1;
    }
    assert!(inputs >= 3, "the corpus holds {inputs} inputs");
    assert!(statements > 0, "no input held a statement: the corpus holds no mydumper files");
}
