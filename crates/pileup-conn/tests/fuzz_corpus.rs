//! Every input kept in the option-file fuzz corpus is read without a
//! panic. Runs on stable, in CI, without libFuzzer.

use std::path::Path;

use pileup_conn::mycnf::OptionFile;

#[test]
fn every_kept_option_file_input_is_read_without_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/mycnf");
    let (mut inputs, mut values) = (0, 0);
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let mut o = OptionFile::default();
        let _ = o.merge_file(&e.unwrap().path(), &["client", "mysql", "pileup"]);
        values += o.values.len();
        inputs += 1;
    }
    assert!(inputs >= 3, "the corpus holds {inputs} inputs");
    assert!(values > 0, "no input gave a value: the corpus holds no option files");
}
