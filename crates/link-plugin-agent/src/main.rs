//! link-plugin-agent: not built yet.
fn main() {
    eprintln!("link-plugin-agent is not implemented yet");
    std::process::exit(1);
}
