//! link-mini-connection: not built yet.
fn main() {
    eprintln!("link-mini-connection is not implemented yet");
    std::process::exit(1);
}
