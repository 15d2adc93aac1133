//! link-plugin-auth: not built yet.
fn main() {
    eprintln!("link-plugin-auth is not implemented yet");
    std::process::exit(1);
}
