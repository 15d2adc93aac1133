//! link-plugin-link-run: not built yet.
fn main() {
    eprintln!("link-plugin-link-run is not implemented yet");
    std::process::exit(1);
}
