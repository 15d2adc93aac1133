//! link-plugin-secret: not built yet.
fn main() {
    eprintln!("link-plugin-secret is not implemented yet");
    std::process::exit(1);
}
