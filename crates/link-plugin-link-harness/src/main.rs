//! link-plugin-link-harness: not built yet.
fn main() {
    eprintln!("link-plugin-link-harness is not implemented yet");
    std::process::exit(1);
}
