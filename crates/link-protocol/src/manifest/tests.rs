use super::*;
use std::collections::BTreeSet;

fn plugin_named(program: &str) -> &'static Plugin {
    find(program).unwrap_or_else(|| panic!("{program} is not declared"))
}

#[test]
fn each_program_is_declared_once_and_runs_in_a_profile() {
    for (i, p) in ALL.iter().enumerate() {
        assert!(
            ALL[i + 1..].iter().all(|o| o.program != p.program),
            "{} declared twice",
            p.program
        );
        assert!(!p.profiles.is_empty(), "{} runs in no profile", p.program);
        assert_ne!(p.program, HOST.program, "the host is no plugin");
    }
}

/// Mini runs the monitor, the model, its harness and its connection service, in that order;
/// every other plugin of Mini is one full Link does not run (no tool, no sandbox, no store).
#[test]
fn mini_runs_no_tool_and_no_full_link_domain() {
    assert_eq!(
        programs_of(Profile::Mini),
        [
            programs::MEASURE,
            programs::MODEL,
            programs::MINI_HARNESS,
            programs::MINI_CONNECTION
        ]
    );
    for p in of(Profile::Mini) {
        let shared = [MEASURE, MODEL].contains(p);
        assert!(shared || !p.runs_in(Profile::Link), "{}", p.program);
    }
    assert_eq!(of(Profile::Link).count(), 12);
    assert_eq!(programs_of(Profile::Link)[0], programs::MEASURE);
}

/// Every route of the table is served by exactly one program (its owner): the host, or a
/// declared plugin of full Link that serves frames; every such plugin owns a route, and a
/// plugin that serves HTTP owns none.
#[test]
fn every_route_is_served_by_exactly_one_declared_program() {
    for route in r::ALL {
        let owners: Vec<&str> = ALL
            .iter()
            .filter(|p| p.routes().any(|o| o == route))
            .map(|p| p.program)
            .chain((route.owner == HOST.program).then_some(HOST.program))
            .collect();
        assert_eq!(owners.len(), 1, "{} served by {owners:?}", route.name);
        if route.owner != HOST.program {
            let owner = plugin_named(route.owner);
            assert!(owner.runs_in(Profile::Link), "{}", route.name);
            assert_eq!(owner.serves, Serves::Frames, "{}", route.name);
        }
    }
    for p in of(Profile::Link) {
        let owns = p.routes().count();
        match p.serves {
            Serves::Frames => assert!(owns > 0, "{} serves frames but no route", p.program),
            Serves::Http => assert_eq!(owns, 0, "{} serves HTTP but owns routes", p.program),
        }
    }
}

/// Every grant names a route of the table that its holder does not own itself, that is not
/// the host's own (those are on the host's socket, never routed) and not unrouted; every
/// routed route has a holder of its grant or is unrouted with a reason.
#[test]
fn grants_match_the_route_table() {
    let holders = ALL
        .iter()
        .map(|p| (p.program, p.grants))
        .chain([(HOST.caller, HOST.grants)]);
    for (holder, grants) in holders.clone() {
        for grant in grants {
            assert!(
                r::ALL.contains(grant),
                "{holder} granted {}, missing from routes::ALL",
                grant.name
            );
            assert_ne!(
                grant.owner, holder,
                "{holder} granted its own {}",
                grant.name
            );
            assert_ne!(
                grant.owner, HOST.program,
                "host route {} granted",
                grant.name
            );
            assert!(
                !UNROUTED.iter().any(|(u, _)| u == grant),
                "{} both granted and unrouted",
                grant.name
            );
        }
        if !grants.is_empty() && holder != HOST.caller {
            assert!(
                plugin_named(holder).runs_in(Profile::Link),
                "{holder} holds grants but full Link, the one with a router, does not run it"
            );
        }
    }
    for route in r::ALL {
        let granted = holders.clone().any(|(_, g)| g.contains(route));
        let unrouted = UNROUTED.iter().any(|(u, _)| u == route);
        assert!(
            granted || unrouted || route.owner == HOST.program,
            "{} is served by {} but nobody holds its grant: grant it or list it in UNROUTED",
            route.name,
            route.owner
        );
    }
}

/// A secret is named only by a holder of a `secret.*` grant; a lease holder is a plugin the
/// router forwards calls to (it owns a route) and that calls on (it holds a grant).
#[test]
fn secrets_and_leases_go_with_grants() {
    let holds_secret_grant =
        |grants: &[RouteInfo]| grants.iter().any(|g| g.name.starts_with("secret."));
    for p in ALL.iter().filter(|p| !p.secrets.is_empty()) {
        assert!(holds_secret_grant(p.grants), "{}", p.program);
    }
    assert!(holds_secret_grant(HOST.grants));
    for p in ALL.iter().filter(|p| p.leased) {
        assert!(
            p.routes().count() > 0 && !p.grants.is_empty(),
            "{}",
            p.program
        );
    }
}

/// The one plugin confined as the sandbox is leads its own session and is off the network.
#[test]
fn only_the_sandbox_plugin_mounts_and_leads_a_session() {
    let mounting: Vec<&str> = ALL
        .iter()
        .filter(|p| p.confinement == Confinement::Mounting)
        .map(|p| p.program)
        .collect();
    assert_eq!(mounting, [programs::SANDBOX]);
    let own_session: Vec<&str> = ALL
        .iter()
        .filter(|p| p.session == Session::Own)
        .map(|p| p.program)
        .collect();
    assert_eq!(own_session, [programs::SANDBOX]);
    let online: Vec<&str> = ALL
        .iter()
        .filter(|p| p.network != NetworkRule::Off)
        .map(|p| p.program)
        .collect();
    assert_eq!(online, [programs::MODEL]);
}

/// The workspace's binary targets, from `cargo metadata`: (package, binary).
fn workspace_binaries() -> BTreeSet<(String, String)> {
    let meta = workspace_metadata();
    let mut bins = BTreeSet::new();
    for package in meta["packages"].as_array().unwrap() {
        for target in package["targets"].as_array().unwrap() {
            if target["kind"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k == "bin")
            {
                let package = package["name"].as_str().unwrap().to_owned();
                bins.insert((package, target["name"].as_str().unwrap().to_owned()));
            }
        }
    }
    bins
}

/// The plugin packages `package` (a `cargo metadata` package) depends on to build or run
/// (not only in its tests).
fn plugin_dependencies(package: &serde_json::Value) -> Vec<String> {
    package["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"].is_null() || d["kind"] == "build")
        .filter_map(|d| d["name"].as_str())
        .filter(|name| find(name).is_some())
        .map(str::to_owned)
        .collect()
}

/// No crate links a plugin crate: a plugin is a program, and what others share with it lives
/// in a library (the host's confinement in `link-confine`, the connection API in
/// `link-connection-api`, `/proc` sampling in `link-os`). The twin: a package listing one is
/// caught.
#[test]
fn no_crate_links_a_plugin_crate() {
    let meta = workspace_metadata();
    for package in meta["packages"].as_array().unwrap() {
        let linked = plugin_dependencies(package);
        assert!(linked.is_empty(), "{} links {linked:?}", package["name"]);
    }
    let twin = serde_json::json!({"dependencies": [
        {"name": programs::SANDBOX, "kind": null},
        {"name": "serde", "kind": null},
        {"name": programs::MODEL, "kind": "dev"},
    ]});
    assert_eq!(plugin_dependencies(&twin), [programs::SANDBOX]);
}

/// `cargo metadata` of the workspace, its own packages only.
fn workspace_metadata() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--offline",
            "--format-version",
            "1",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running cargo metadata");
    assert!(out.status.success(), "cargo metadata: {out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every `link-plugin-*` and `link-mini-*` binary of the workspace is a declared plugin,
/// every declared plugin is the binary of the package of its name, and the host is
/// `link-cli`'s `link`: a plugin crate cannot be added without its entry, nor an entry
/// without its crate.
#[test]
fn every_plugin_crate_of_the_workspace_is_declared_and_every_entry_built() {
    let bins = workspace_binaries();
    let plugin_bins: BTreeSet<&str> = bins
        .iter()
        .map(|(_, bin)| bin.as_str())
        .filter(|b| b.starts_with("link-plugin-") || b.starts_with("link-mini-"))
        .collect();
    let declared: BTreeSet<&str> = ALL.iter().map(|p| p.program).collect();
    assert_eq!(
        plugin_bins, declared,
        "the workspace's plugin binaries and the manifest differ: declare each plugin crate \
         in link_protocol::manifest::ALL, and remove the entry of a crate that is gone"
    );
    // The twin: a manifest without the code tool would miss a binary of the workspace.
    let without_code: BTreeSet<&str> = ALL
        .iter()
        .filter(|p| **p != CODE)
        .map(|p| p.program)
        .collect();
    let missed: Vec<&&str> = plugin_bins.difference(&without_code).collect();
    assert_eq!(missed, [&programs::CODE]);
    for p in ALL {
        let own = (p.program.to_owned(), p.program.to_owned());
        assert!(
            bins.contains(&own),
            "{} is no binary of its own package",
            p.program
        );
    }
    let host = (HOST.package.to_owned(), HOST.program.to_owned());
    assert!(bins.contains(&host), "{bins:?}");
}

/// The model is each profile's turn engine's alone (full Link's: the owner of `turn.run`);
/// the model list, besides, the agent registry's, which checks an agent's model when it is
/// made.
#[test]
fn the_model_is_granted_to_the_turn_engine_of_each_profile() {
    use crate::routes::Route;
    for profile in [Profile::Mini, Profile::Link] {
        let full: Vec<&str> = of(profile)
            .filter(|p| p.model == ModelAccess::Full)
            .map(|p| p.program)
            .collect();
        assert_eq!(full.len(), 1, "{profile:?}: {full:?}");
    }
    let link_engine = of(Profile::Link).find(|p| p.model == ModelAccess::Full);
    assert_eq!(link_engine.map(|p| p.program), Some(r::agent::Turn::OWNER));
    let list_only: Vec<&str> = ALL
        .iter()
        .filter(|p| p.model == ModelAccess::ListOnly)
        .map(|p| p.program)
        .collect();
    assert_eq!(list_only, [programs::AGENT]);
}
