//! link-plugin-model: not built yet.
fn main() {
    eprintln!("link-plugin-model is not implemented yet");
    std::process::exit(1);
}
