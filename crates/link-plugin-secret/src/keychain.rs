//! The `keychain` backend: the desktop Secret Service through `secret-tool`
//! (libsecret-tools), used only where one answers.
//!
//! Items carry the attributes `application=link`, `state=<state root>` and `name=<name>`,
//! so two state roots never share secrets. Values travel on stdin and stdout only, never in
//! arguments (which other users can read in /proc) and never in error messages.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// How long the start-up probe waits for the Secret Service to answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// A store or lookup may wait on a busy service, but not forever.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Older `secret-tool` versions truncate a secret read from stdin at 8 KiB.
pub const MAX_VALUE: usize = 8000;

pub struct Keychain {
    program: PathBuf,
    state: String,
}

/// What a `secret-tool` run reported.
struct Output {
    success: bool,
    stdout: Vec<u8>,
    /// Its first stderr line: `secret-tool` errors never contain the secret.
    error: String,
}

impl Keychain {
    /// Returns a keychain if one answers, or why not.
    pub async fn probe(state: &Path) -> Result<Keychain, String> {
        let program = find_on_path("secret-tool")
            .ok_or("secret-tool is not on PATH (install libsecret-tools)")?;
        if std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_none_or(|a| a.is_empty()) {
            return Err("DBUS_SESSION_BUS_ADDRESS is not set (no desktop session bus)".into());
        }
        let keychain = Keychain {
            program,
            state: state.display().to_string(),
        };
        // A lookup of a name that is never stored: "not found" (exit 1, silent) is an answer.
        let out = keychain
            .run(
                &["lookup", "application", "link", "probe", "1"],
                None,
                PROBE_TIMEOUT,
            )
            .await?;
        if out.success || out.error.is_empty() {
            Ok(keychain)
        } else {
            Err(format!("the Secret Service did not answer: {}", out.error))
        }
    }

    pub async fn get(&self, name: &str) -> Result<Option<String>, String> {
        let out = self.run_for(name, "lookup", None).await?;
        if out.success {
            return String::from_utf8(out.stdout)
                .map(Some)
                .map_err(|_| "the stored secret is not UTF-8 text".to_owned());
        }
        if out.error.is_empty() {
            Ok(None)
        } else {
            Err(out.error)
        }
    }

    pub async fn put(&self, name: &str, value: &str) -> Result<(), String> {
        let label = format!("--label=Link secret {name}");
        let attrs = self.attributes(name);
        let mut args = vec!["store", label.as_str()];
        args.extend(attrs.iter().map(String::as_str));
        let out = self.run(&args, Some(value), CALL_TIMEOUT).await?;
        if out.success {
            Ok(())
        } else {
            Err(out.error)
        }
    }

    /// True when the secret existed.
    pub async fn delete(&self, name: &str) -> Result<bool, String> {
        let existed = self.get(name).await?.is_some();
        if existed {
            let out = self.run_for(name, "clear", None).await?;
            if !out.success {
                return Err(out.error);
            }
        }
        Ok(existed)
    }

    async fn run_for(
        &self,
        name: &str,
        action: &str,
        stdin: Option<&str>,
    ) -> Result<Output, String> {
        let attrs = self.attributes(name);
        let mut args = vec![action];
        args.extend(attrs.iter().map(String::as_str));
        self.run(&args, stdin, CALL_TIMEOUT).await
    }

    fn attributes(&self, name: &str) -> [String; 6] {
        [
            "application".into(),
            "link".into(),
            "state".into(),
            self.state.clone(),
            "name".into(),
            name.into(),
        ]
    }

    async fn run(
        &self,
        args: &[&str],
        stdin: Option<&str>,
        timeout: Duration,
    ) -> Result<Output, String> {
        let mut child = Command::new(&self.program)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.program.display()))?;
        let run = async {
            if let (Some(value), Some(mut pipe)) = (stdin, child.stdin.take()) {
                pipe.write_all(value.as_bytes()).await?;
                // Dropping the pipe closes it: secret-tool reads the secret until end of file.
            }
            child.wait_with_output().await
        };
        let out = tokio::time::timeout(timeout, run)
            .await
            .map_err(|_| {
                format!(
                    "secret-tool {} did not finish within {}s",
                    args[0],
                    timeout.as_secs()
                )
            })?
            .map_err(|e| format!("secret-tool {}: {e}", args[0]))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        Ok(Output {
            success: out.status.success(),
            stdout: out.stdout,
            error: stderr.lines().next().unwrap_or_default().trim().to_owned(),
        })
    }
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}
