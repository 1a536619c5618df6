//! The engine is built in floors (ARCHITECTURE.md, "`sutra-engine` — the runtime"): every module
//! of `src/` is placed on a floor in [`FLOORS`], and may name only modules on floors strictly
//! below its own. So the modules form no circle, and none leans on what is built on top of it.
//! ARCHITECTURE.md's floor table is this one.
//!
//! A module's edges are read off its file: every `crate::name` path, wherever it stands — `use`
//! lines, paths in code (`crate::admin::Admin`), and comments and doc comments too, since a doc
//! link is a path rustdoc resolves (a lower floor's docs may name a higher floor in words, not by
//! path). A group `crate::{a, b::c}` is an edge to each of its top names, and a name the crate
//! root re-exports (`crate::Engine`) stands for the module it comes from (`pub use engine::Engine`
//! in lib.rs). The whole file is read, its `#[cfg(test)] mod tests` included (inline, or in
//! `src/{module}/tests.rs` with the module's other files there): a unit test stands on its
//! module's floor like the module. Modules name each other only as `crate::…` (the
//! project's style; a top-level module's `super::` would be the crate root and is not read).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each floor, from the ground up, with its modules.
const FLOORS: &[&[&str]] = &[
    // 0. The ground: the pieces everything stands on, each naming no other module.
    &[
        "arms",
        "config",
        "error",
        "fault",
        "history_log",
        "metrics",
        "pulse",
        "quota",
        "registry",
        "settle",
        "test_switches",
        "waiting",
    ],
    // 1. What every part shares, and who leads each singleton role.
    &["shared", "leadership"],
    // 2. The hand-off of armed tasks to their takers, and the loops that need only the shared
    //    state and the roles.
    &[
        "handoff",
        "answers",
        "history",
        "retirement",
        "outbox",
        "sampler",
    ],
    // 3. What a lane is asked to run, and what its caller learns.
    &["request"],
    // 4. A step written in its group, and its landing once the group committed.
    &["written", "step_rows"],
    // 5. The claim-guarded step.
    &["runner"],
    // 6. Group commit.
    &["group"],
    // 7. The lanes, and the administrative executor.
    &["lane", "admin"],
    // 8. The parts on top of the lanes and the executor.
    &[
        "intake",
        "tasks",
        "deploy",
        "deliveries",
        "sweep",
        "bulk",
        "scheduler",
    ],
    // 9. Deployments made through other replicas.
    &["converge"],
    // 10. The facade.
    &["engine"],
];

#[test]
fn every_module_names_only_modules_on_lower_floors() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let root = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs reads");
    let reexported = reexports(&root);
    let floor_of = floors();
    let mut wrong = Vec::new();
    let modules = source_modules(&src);
    for placed in floor_of.keys() {
        if !modules.contains_key(*placed) {
            wrong.push(format!(
                "FLOORS places `{placed}`, and there is no src/{placed}.rs: take it out of \
                 FLOORS and of ARCHITECTURE.md's floor table"
            ));
        }
    }
    for (module, text) in &modules {
        let Some(&floor) = floor_of.get(module.as_str()) else {
            wrong.push(format!(
                "`{module}` (src/{module}.rs) is on no floor: add it to FLOORS in this test, one \
                 floor above the highest module it names, and to ARCHITECTURE.md's floor table"
            ));
            continue;
        };
        for name in crate_paths(text) {
            let named = reexported.get(name.as_str()).unwrap_or(&name);
            if named == module {
                continue;
            }
            match floor_of.get(named.as_str()) {
                Some(&to) if to < floor => {}
                Some(&to) => wrong.push(format!(
                    "`{module}` (floor {floor}) names `crate::{name}`, on floor {to}: a module \
                     names only modules on floors below its own. Move what `{module}` uses of \
                     `{named}` down (a type many floors share), or the code of `{module}` that \
                     needs `{named}` up (a function that needs a higher floor); a doc names a \
                     higher floor in words, not by path"
                )),
                None if modules.contains_key(named) => {} // on no floor: reported above
                None => wrong.push(format!(
                    "`{module}` names `crate::{name}`, which is neither a module of src/ nor \
                     re-exported by lib.rs"
                )),
            }
        }
    }
    assert!(wrong.is_empty(), "the engine's floors: {wrong:#?}");
}

/// Module name → floor number.
fn floors() -> BTreeMap<&'static str, usize> {
    let mut floor_of = BTreeMap::new();
    for (floor, modules) in FLOORS.iter().enumerate() {
        for module in *modules {
            let before = floor_of.insert(*module, floor);
            assert!(before.is_none(), "FLOORS places `{module}` twice");
        }
    }
    floor_of
}

/// Every module of the crate, one file each under `src/`, with its text; lib.rs, the root that
/// declares them, is none.
fn source_modules(src: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(src)
        .expect("src/ lists")
        .map(|entry| entry.expect("src/ lists").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .filter_map(|path| {
            let module = path.file_stem()?.to_str()?.to_owned();
            let mut text = std::fs::read_to_string(&path).expect("a module reads");
            text.push_str(&submodules(&src.join(&module)));
            (module != "lib").then_some((module, text))
        })
        .collect()
}

/// The text of a module's own submodules (`src/{module}/*.rs`, such as its unit tests split off
/// into `tests.rs`), which stand on the module's floor.
fn submodules(dir: &Path) -> String {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return String::new();
    };
    let files = entries.map(|entry| entry.expect("a module's folder lists").path());
    let rust = files.filter(|path| path.extension().is_some_and(|ext| ext == "rs"));
    rust.map(|path| std::fs::read_to_string(path).expect("a submodule reads"))
        .collect()
}

/// What lib.rs re-exports at the root, by the module it comes from: `pub use a::{B, C};`.
fn reexports(root: &str) -> BTreeMap<String, String> {
    let mut by_name = BTreeMap::new();
    for line in root.lines() {
        let Some(path) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, items)) = path.split_once("::") else {
            continue;
        };
        for item in items.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if !item.is_empty() {
                by_name.insert(item.to_owned(), module.to_owned());
            }
        }
    }
    by_name
}

/// The first name after each `crate::` of `text`, and of a group `crate::{…}` each top name.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => names.extend(group_names(group)),
            None => names.extend(identifier(rest)),
        }
    }
    names
}

/// The top names of a `use` group, `group` the text after its `{`: the first name of each item
/// at the group's own depth.
fn group_names(group: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut depth = 0;
    let mut item_starts = true;
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => item_starts = true,
            c if c.is_whitespace() => {}
            _ if depth == 0 && item_starts => {
                names.extend(identifier(&group[at..]));
                item_starts = false;
            }
            _ => {}
        }
    }
    names
}

/// The identifier `text` begins with, if any.
fn identifier(text: &str) -> Option<String> {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    (end > 0).then(|| text[..end].to_owned())
}
