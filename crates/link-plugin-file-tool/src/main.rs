//! link-plugin-file-tool: not built yet.
fn main() {
    eprintln!("link-plugin-file-tool is not implemented yet");
    std::process::exit(1);
}
