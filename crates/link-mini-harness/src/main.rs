//! link-mini-harness: not built yet.
fn main() {
    eprintln!("link-mini-harness is not implemented yet");
    std::process::exit(1);
}
