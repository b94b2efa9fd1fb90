//! The `ferrobase` binary: everything lives in the library; see `cli.rs`.

fn main() -> std::process::ExitCode {
    ferrobase::run()
}
