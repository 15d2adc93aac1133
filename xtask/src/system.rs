//! The system packages the main job needs — bubblewrap (confinement), libseccomp's
//! development package (the build compiles the seccomp filter with it; its header is what
//! shows it is there) and, for `--trace`, strace — and the command that installs them on this
//! distribution.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A system package: what shows it is installed, and its package name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Package {
    pub provides: Provides,
    /// Its name where the distributions agree.
    pub name: &'static str,
    /// Its name for the managers that call it otherwise.
    pub elsewhere: &'static [(Manager, &'static str)],
}

/// What a package puts on the machine that the xtask looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provides {
    /// A program on PATH.
    Program(&'static str),
    /// A C header under `/usr/include`, which a build needs.
    Header(&'static str),
}

pub const BUBBLEWRAP: Package = Package {
    provides: Provides::Program("bwrap"),
    name: "bubblewrap",
    elsewhere: &[],
};
pub const STRACE: Package = Package {
    provides: Provides::Program("strace"),
    name: "strace",
    elsewhere: &[],
};
/// `link-confine`'s build script compiles the seccomp filter with libseccomp.
pub const LIBSECCOMP: Package = Package {
    provides: Provides::Header("seccomp.h"),
    name: "libseccomp-dev",
    elsewhere: &[
        (Manager::Dnf, "libseccomp-devel"),
        (Manager::Zypper, "libseccomp-devel"),
        (Manager::Pacman, "libseccomp"),
    ],
};

impl Package {
    /// Where what it provides was found, if it was.
    pub fn found(self) -> Option<PathBuf> {
        match self.provides {
            Provides::Program(p) => which::which(p).ok(),
            Provides::Header(h) => Some(Path::new("/usr/include").join(h)).filter(|p| p.is_file()),
        }
    }

    /// Why it counts as missing, for messages.
    pub fn absence(self) -> String {
        match self.provides {
            Provides::Program(p) => format!("`{p}` is not on PATH"),
            Provides::Header(h) => format!("/usr/include/{h} is not there (the build needs it)"),
        }
    }

    /// Its name for `manager`.
    pub fn name_for(self, manager: Manager) -> &'static str {
        self.elsewhere
            .iter()
            .find(|(m, _)| *m == manager)
            .map_or(self.name, |(_, name)| name)
    }
}

/// The packages not installed: bubblewrap and libseccomp's development package always,
/// strace when `trace`.
pub fn missing(trace: bool) -> Vec<Package> {
    let wanted: &[Package] = if trace {
        &[BUBBLEWRAP, LIBSECCOMP, STRACE]
    } else {
        &[BUBBLEWRAP, LIBSECCOMP]
    };
    wanted
        .iter()
        .copied()
        .filter(|p| p.found().is_none())
        .collect()
}

/// A package manager, from `/etc/os-release`'s `ID` and `ID_LIKE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manager {
    Apt,
    Dnf,
    Pacman,
    Zypper,
    Apk,
}

impl Manager {
    /// The manager of the distribution `os_release` (the file's text) describes.
    pub fn from_os_release(os_release: &str) -> Option<Manager> {
        let field = |key: &str| {
            os_release
                .lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                .map(|v| v.trim_matches('"').to_lowercase())
                .unwrap_or_default()
        };
        let ids = format!("{} {}", field("ID"), field("ID_LIKE"));
        ids.split_whitespace().find_map(|id| match id {
            "debian" | "ubuntu" => Some(Manager::Apt),
            "fedora" | "rhel" | "centos" => Some(Manager::Dnf),
            "arch" => Some(Manager::Pacman),
            "suse" | "opensuse" | "sles" => Some(Manager::Zypper),
            "alpine" => Some(Manager::Apk),
            _ => None,
        })
    }

    /// This machine's manager, if `/etc/os-release` names a known distribution.
    pub fn here() -> Option<Manager> {
        let text = std::fs::read_to_string("/etc/os-release").ok()?;
        Manager::from_os_release(&text)
    }

    /// The install command line for `packages` (without `sudo`).
    pub fn install_line(self, packages: &[Package]) -> String {
        let names: Vec<&str> = packages.iter().map(|p| p.name_for(self)).collect();
        let names = names.join(" ");
        match self {
            Manager::Apt => format!("apt-get install -y {names}"),
            Manager::Dnf => format!("dnf install -y {names}"),
            Manager::Pacman => format!("pacman -S --noconfirm {names}"),
            Manager::Zypper => format!("zypper install -y {names}"),
            Manager::Apk => format!("apk add {names}"),
        }
    }
}

/// What to run to install `packages` here: this distribution's command, or, when it is not
/// one the xtask knows, the command for each it does.
pub fn install_hint(packages: &[Package]) -> String {
    let sudo = sudo();
    match Manager::here() {
        Some(m) => format!("{sudo}{}", m.install_line(packages)),
        None => [
            ("Debian/Ubuntu", Manager::Apt),
            ("Fedora/RHEL", Manager::Dnf),
            ("Arch", Manager::Pacman),
            ("openSUSE", Manager::Zypper),
            ("Alpine", Manager::Apk),
        ]
        .iter()
        .map(|(distro, m)| format!("{distro}: {sudo}{}", m.install_line(packages)))
        .collect::<Vec<_>>()
        .join("; "),
    }
}

/// `--install`: installs what [`missing`] names with this distribution's package manager
/// (through `sudo` when not root), saying first what it runs.
pub fn install_missing(trace: bool) -> Result<()> {
    let packages = missing(trace);
    if packages.is_empty() {
        return Ok(());
    }
    let Some(manager) = Manager::here() else {
        bail!(
            "cannot install {}: /etc/os-release names no distribution the xtask knows; install \
             them yourself ({})",
            names(&packages),
            install_hint(&packages)
        );
    };
    let mut steps = Vec::new();
    if manager == Manager::Apt {
        steps.push("apt-get update -qq".to_owned());
    }
    steps.push(manager.install_line(&packages));
    for step in steps {
        let shown = format!("{}{step}", sudo());
        link_protocol::errln!("xtask: installing {}: $ {shown}", names(&packages));
        let mut words = shown.split_whitespace();
        let program = words.next().expect("a command line has a program");
        let status = Command::new(program)
            .args(words)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .with_context(|| format!("cannot start `{shown}`"))?;
        if !status.success() {
            bail!(
                "`{shown}` failed ({status}); install {} yourself",
                names(&packages)
            );
        }
    }
    let still = missing(trace);
    if !still.is_empty() {
        bail!("{} still missing after installing", names(&still));
    }
    Ok(())
}

/// `sudo ` before a command that needs root, when this process is not root.
fn sudo() -> &'static str {
    if rustix::process::geteuid().is_root() {
        ""
    } else {
        "sudo "
    }
}

fn names(packages: &[Package]) -> String {
    packages
        .iter()
        .map(|p| p.name)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manager_comes_from_id_or_id_like() {
        let debian = "PRETTY_NAME=\"Debian GNU/Linux 12\"\nID=debian\nVERSION_ID=\"12\"\n";
        assert_eq!(Manager::from_os_release(debian), Some(Manager::Apt));
        let mint = "ID=linuxmint\nID_LIKE=\"ubuntu debian\"\n";
        assert_eq!(Manager::from_os_release(mint), Some(Manager::Apt));
        let rocky = "ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n";
        assert_eq!(Manager::from_os_release(rocky), Some(Manager::Dnf));
        assert_eq!(Manager::from_os_release("ID=arch\n"), Some(Manager::Pacman));
        let tumbleweed = "ID=\"opensuse-tumbleweed\"\nID_LIKE=\"opensuse suse\"\n";
        assert_eq!(Manager::from_os_release(tumbleweed), Some(Manager::Zypper));
        assert_eq!(Manager::from_os_release("ID=alpine\n"), Some(Manager::Apk));
        // IDS=... is not ID=...
        assert_eq!(Manager::from_os_release("IDS=debian\nID=nixos\n"), None);
    }

    #[test]
    fn a_package_has_its_name_for_each_manager() {
        assert_eq!(
            Manager::Apt.install_line(&[BUBBLEWRAP, LIBSECCOMP]),
            "apt-get install -y bubblewrap libseccomp-dev"
        );
        assert_eq!(
            Manager::Dnf.install_line(&[LIBSECCOMP]),
            "dnf install -y libseccomp-devel"
        );
        assert_eq!(
            Manager::Pacman.install_line(&[LIBSECCOMP]),
            "pacman -S --noconfirm libseccomp"
        );
        assert_eq!(
            Manager::Apk.install_line(&[LIBSECCOMP]),
            "apk add libseccomp-dev"
        );
    }

    #[test]
    fn install_lines_name_every_package() {
        let both = [BUBBLEWRAP, STRACE];
        assert_eq!(
            Manager::Apt.install_line(&both),
            "apt-get install -y bubblewrap strace"
        );
        assert_eq!(
            Manager::Dnf.install_line(&[STRACE]),
            "dnf install -y strace"
        );
        assert_eq!(
            Manager::Pacman.install_line(&both),
            "pacman -S --noconfirm bubblewrap strace"
        );
    }
}
