//! link-plugin-link-scheduler: not built yet.
fn main() {
    eprintln!("link-plugin-link-scheduler is not implemented yet");
    std::process::exit(1);
}
