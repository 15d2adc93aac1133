//! link-plugin-link-code: not built yet.
fn main() {
    eprintln!("link-plugin-link-code is not implemented yet");
    std::process::exit(1);
}
