//! link-plugin-file-store: not built yet.
fn main() {
    eprintln!("link-plugin-file-store is not implemented yet");
    std::process::exit(1);
}
