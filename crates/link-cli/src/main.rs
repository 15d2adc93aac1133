//! link-cli: not built yet.
fn main() {
    eprintln!("link-cli is not implemented yet");
    std::process::exit(1);
}
