//! Fuzz the PocketBase filter/sort compiler: input is `collection\ncaller\nfilter\nsort` (see
//! `ferrobase::testkit::fuzz_one`). Any statement that compiles must also prepare and run on the
//! fixture tables; a panic anywhere or a failing statement is a finding.
#![no_main]

use ferrobase::testkit::{Fixture, fuzz_one};
use libfuzzer_sys::fuzz_target;

thread_local! {
    // One fixture (schema + in-memory SQLite tables) per fuzzing thread, built once.
    static FIXTURE: Fixture = Fixture::new();
}

fuzz_target!(|data: &[u8]| {
    FIXTURE.with(|fx| {
        if let Err(e) = fuzz_one(fx, data) {
            panic!("compiled statement failed: {e}");
        }
    });
});
