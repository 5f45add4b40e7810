//! Folio's house rules, checked over the workspace's own sources (`crates/*/src` and
//! `crates/*/tests`; vendored crates are not ours). The checks live here; the budgets and
//! allowlists they are held to live in `tests/tidy.rs`, which `.ci/run` runs with every
//! other test.
//!
//! The checks read text, not syntax trees: a function is the lines from its `fn` line to
//! the first line that closes at the same indentation (rustfmt's layout), a comment is a
//! line that starts with `//`. That is exact for rustfmt-formatted code, which CI enforces.
//!
//! Architecture invariant: this crate depends on nothing but `std`, so it builds in
//! seconds and never on the code it checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One source file: its path relative to the workspace root, and its text.
#[derive(Debug, Clone)]
pub struct Source {
    pub path: String,
    pub text: String,
}

impl Source {
    /// The crate directory the file belongs to (`folio-bookie` for
    /// `crates/folio-bookie/src/lib.rs`).
    pub fn krate(&self) -> &str {
        self.path.split('/').nth(1).unwrap_or("")
    }

    /// Whether the file is library or binary code (under `src/`), not a test binary.
    pub fn is_src(&self) -> bool {
        self.path.split('/').nth(2) == Some("src")
    }

    /// The lines before the first `#[cfg(test)]` at the start of a line: the code that
    /// ships, without its unit tests.
    pub fn shipped(&self) -> &str {
        self.text.split("\n#[cfg(test)]").next().unwrap_or("")
    }
}

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `crates/*/src` and `crates/*/tests`, sorted by path.
pub fn workspace_sources(root: &Path) -> std::io::Result<Vec<Source>> {
    let mut out = Vec::new();
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    crates.sort();
    for c in crates {
        for sub in ["src", "tests"] {
            collect(&c.join(sub), root, &mut out)?;
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Which workspace crates a crate depends on, by kind of dependency.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrateDeps {
    /// `[dependencies]`: linked into what the crate ships.
    pub normal: BTreeSet<String>,
    /// `[dev-dependencies]` and `[build-dependencies]`.
    pub dev: BTreeSet<String>,
}

/// Every crate under `crates/` → the `folio-*` crates its `Cargo.toml` names.
pub fn workspace_dependencies(root: &Path) -> std::io::Result<BTreeMap<String, CrateDeps>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(root.join("crates"))? {
        let dir = e?.path();
        let manifest = dir.join("Cargo.toml");
        if !manifest.is_file() {
            continue;
        }
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        out.insert(name, manifest_deps(&std::fs::read_to_string(manifest)?));
    }
    Ok(out)
}

/// The `folio-*` dependencies a manifest's text names, by section.
pub fn manifest_deps(toml: &str) -> CrateDeps {
    let mut deps = CrateDeps::default();
    let mut section = "";
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
            continue;
        }
        let name: String =
            line.chars().take_while(|c| c.is_alphanumeric() || *c == '-' || *c == '_').collect();
        if !name.starts_with("folio-") {
            continue;
        }
        match section {
            "[dependencies]" => deps.normal.insert(name),
            "[dev-dependencies]" | "[build-dependencies]" => deps.dev.insert(name),
            _ => false,
        };
    }
    deps
}

fn collect(dir: &Path, root: &Path, out: &mut Vec<Source>) -> std::io::Result<()> {
    if !dir.is_dir() {
        return Ok(());
    }
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            collect(&p, root, out)?;
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p.strip_prefix(root).unwrap_or(&p);
            let path = rel.to_string_lossy().replace("/./", "/").trim_start_matches("./").into();
            out.push(Source { path, text: std::fs::read_to_string(&p)? });
        }
    }
    Ok(())
}

/// Every `unsafe` block and `unsafe impl` in shipped code: (path, line, whether a
/// `// SAFETY:` comment stands in the six lines before it). `unsafe fn` declarations are
/// not counted: the blocks in their bodies are.
pub fn unsafe_uses(sources: &[Source]) -> Vec<(String, usize, bool)> {
    let mut out = Vec::new();
    for s in sources.iter().filter(|s| s.is_src()) {
        let lines: Vec<&str> = s.shipped().lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            // The keyword in code, not inside a string literal (an even count of quotes
            // before it).
            let in_code = ["unsafe {", "unsafe impl"].iter().any(|k| {
                code.match_indices(k).any(|(at, _)| code[..at].matches('"').count() % 2 == 0)
            });
            if !in_code {
                continue;
            }
            let safety = lines[i.saturating_sub(6)..i].iter().any(|l| l.contains("// SAFETY:"));
            out.push((s.path.clone(), i + 1, safety));
        }
    }
    out
}

/// Where shipped code names any of `needles` (in code, not in a comment): (path, line,
/// the needle). For the banned imports: a needle is a path prefix such as `tokio::net`.
pub fn uses_of(sources: &[Source], needles: &[&str]) -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    for s in sources.iter().filter(|s| s.is_src()) {
        for (i, line) in s.shipped().lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for n in needles.iter().filter(|n| code.contains(**n)) {
                out.push((s.path.clone(), i + 1, n.to_string()));
            }
        }
    }
    out
}

/// Polling loops in test code with no bound: a `loop`/`while` whose body sleeps and names
/// no deadline (`deadline`, `Instant`, `elapsed`, `within`, `timeout`, a give-up count),
/// does not wait through `until`/`eventually`, and is not a workload the test stops (it
/// reads a `stop` signal). Such a loop hangs until the runner kills it. (path, line).
pub fn unbounded_polling_loops(sources: &[Source]) -> Vec<(String, usize)> {
    const BOUNDS: &[&str] = &[
        "deadline",
        "Instant",
        "elapsed",
        "within",
        "timeout",
        "give_up",
        "until",
        "eventually",
        "stop",
    ];
    let mut out = Vec::new();
    for s in sources {
        let (first, text) = if s.is_src() {
            match s.text.split_once("\n#[cfg(test)]") {
                Some((shipped, tests)) => (shipped.lines().count() + 1, tests),
                None => continue,
            }
        } else {
            (0, s.text.as_str())
        };
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim_start();
            let opens = t.starts_with("loop {")
                || t.contains("= loop {")
                || (t.starts_with("while ") && t.ends_with('{'));
            if !opens {
                continue;
            }
            let indent = &line[..line.len() - t.len()];
            let end = lines[i + 1..]
                .iter()
                .position(|l| l.starts_with(indent) && l[indent.len()..].starts_with('}'))
                .map_or(lines.len(), |n| i + 1 + n);
            let body = &lines[i..end.min(lines.len())];
            let sleeps = body.iter().any(|l| l.contains("sleep("));
            let bounded = body.iter().any(|l| BOUNDS.iter().any(|b| l.contains(b)));
            if sleeps && !bounded {
                out.push((s.path.clone(), first + i + 1));
            }
        }
    }
    out
}

/// What ARCHITECTURE.md cites that does not exist: source paths (a backticked token that
/// starts with a crate's directory name, `crates/` or `scripts/`), test names (a
/// backticked snake_case token of five words or more, a prefix when it ends in `…`: some
/// `fn` must have it), and crates without their `### \`crates/<name>\`` section.
pub fn stale_architecture_references(root: &Path, doc: &str, sources: &[Source]) -> Vec<String> {
    let mut out = Vec::new();
    let fns: BTreeSet<&str> = sources
        .iter()
        .flat_map(|s| s.text.lines())
        .filter_map(|l| {
            let t = l.trim_start();
            let t = t.strip_prefix("pub ").unwrap_or(t);
            let t = t.strip_prefix("async ").unwrap_or(t);
            t.strip_prefix("fn ").map(ident)
        })
        .collect();
    for token in doc.split('`').skip(1).step_by(2) {
        let is_path = token.ends_with(".rs") || token.ends_with('/');
        if is_path && !token.contains('*') {
            let path = if token.starts_with("folio") {
                root.join("crates").join(token)
            } else if token.starts_with("crates/") || token.starts_with("scripts/") {
                root.join(token)
            } else {
                continue;
            };
            if !path.exists() {
                out.push(format!("cites `{token}`, which does not exist"));
            }
            continue;
        }
        let name = token.trim_end_matches('…');
        let snake = name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !snake || name.matches('_').count() < 4 {
            continue;
        }
        let found = if token.ends_with('…') {
            fns.iter().any(|f| f.starts_with(name))
        } else {
            fns.contains(name)
        };
        if !found {
            out.push(format!("cites `{token}`, which names no function"));
        }
    }
    if let Ok(dirs) = std::fs::read_dir(root.join("crates")) {
        for d in dirs.flatten() {
            let name = d.file_name().to_string_lossy().to_string();
            if !doc.contains(&format!("### `crates/{name}`")) {
                out.push(format!("has no code-map section for crates/{name}"));
            }
        }
    }
    out
}

/// The crates that are not libraries others build on: the binary and the test crates.
const NOT_LIBRARIES: &[&str] = &["folio", "folio-sim", "folio-testkit", "folio-tidy"];

/// Public functions of library crates (every crate but [`NOT_LIBRARIES`]) whose error type
/// is a `String`:
/// (path, function). An error a caller can only print, not inspect.
pub fn string_errors_in_library_apis(sources: &[Source]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for s in sources.iter().filter(|s| s.is_src() && !NOT_LIBRARIES.contains(&s.krate())) {
        let text = s.shipped();
        let mut rest = text;
        while let Some(at) = rest.find("pub ") {
            let sig_start = &rest[at..];
            rest = &rest[at + 4..];
            let head = sig_start.trim_start_matches("pub ").trim_start_matches("async ");
            let Some(after_fn) = head.strip_prefix("fn ") else { continue };
            let end = after_fn.find(['{', ';']).unwrap_or(after_fn.len());
            let sig = &after_fn[..end];
            let Some((_, ret)) = sig.rsplit_once("->") else { continue };
            let ret: String = ret.split(" where").next().unwrap_or("").split_whitespace().collect();
            if last_generic_argument(&ret, "Result<").as_deref() == Some("String") {
                out.push((s.path.clone(), ident(after_fn).to_string()));
            }
        }
    }
    out
}

/// The last top-level type argument of `ty` if it starts with `prefix` (`Result<`) and has
/// two or more (`Result<T>`, a crate's alias, names its own error).
fn last_generic_argument(ty: &str, prefix: &str) -> Option<String> {
    let inner = ty.strip_prefix(prefix)?.strip_suffix('>')?;
    let mut depth = 0i32;
    let mut last = 0;
    for (i, c) in inner.char_indices() {
        match c {
            '<' | '(' | '[' => depth += 1,
            '>' | ')' | ']' => depth -= 1,
            ',' if depth == 0 => last = i + 1,
            _ => {}
        }
    }
    (last > 0).then(|| inner[last..].to_string())
}

/// Library crates (every crate but the binary and the test crates) without an `error.rs`
/// (or the broker's `errors.rs`) at the root of their sources.
pub fn library_crates_without_error_module(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(dirs) = std::fs::read_dir(root.join("crates")) {
        for d in dirs.flatten() {
            let name = d.file_name().to_string_lossy().to_string();
            let src = d.path().join("src");
            let has = src.join("error.rs").exists() || src.join("errors.rs").exists();
            if !NOT_LIBRARIES.contains(&name.as_str()) && !has {
                out.push(name);
            }
        }
    }
    out.sort();
    out
}

/// What is wrong with a crate's integration-test binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SuiteProblem {
    /// More than `files_max` test files, each still its own binary (`autotests` on): each
    /// compiles the shared helpers and the dependencies' generic code again.
    OneBinaryPerFile(usize),
    /// `autotests = false` without a `[[test]]` at `tests/suite.rs`: nothing would run.
    NoSuiteTarget,
    /// Files in `tests/` that `tests/suite.rs` does not declare: they never run.
    Undeclared(Vec<String>),
}

/// Each crate whose integration tests are not one `tests/suite.rs` binary declaring every
/// file, once it has more than `files_max` of them, with what is wrong.
pub fn test_files_outside_their_suite(
    root: &Path,
    files_max: usize,
) -> std::io::Result<BTreeMap<String, SuiteProblem>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(root.join("crates"))? {
        let dir = e?.path();
        let name = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else { continue };
        let Ok(entries) = std::fs::read_dir(dir.join("tests")) else { continue };
        let mut files = Vec::new();
        for f in entries {
            let f = f?.file_name().to_string_lossy().to_string();
            if let Some(stem) = f.strip_suffix(".rs").filter(|s| *s != "suite") {
                files.push(stem.to_string());
            }
        }
        files.sort();
        if !manifest.lines().any(|l| l.replace(' ', "") == "autotests=false") {
            if files.len() > files_max {
                out.insert(name, SuiteProblem::OneBinaryPerFile(files.len()));
            }
            continue;
        }
        if !manifest.contains("path = \"tests/suite.rs\"") {
            out.insert(name, SuiteProblem::NoSuiteTarget);
            continue;
        }
        let suite = std::fs::read_to_string(dir.join("tests/suite.rs")).unwrap_or_default();
        let declared: BTreeSet<&str> = suite
            .lines()
            .filter_map(|l| l.trim().strip_prefix("mod ")?.strip_suffix(';'))
            .collect();
        let missing: Vec<String> =
            files.into_iter().filter(|f| !declared.contains(f.as_str())).collect();
        if !missing.is_empty() {
            out.insert(name, SuiteProblem::Undeclared(missing));
        }
    }
    Ok(out)
}

/// Named limits (`const *_MAX` / `*_MIN`) in shipped code outside a `limits.rs`: (path,
/// name).
pub fn limits_outside_limits_files(sources: &[Source]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for s in sources.iter().filter(|s| s.is_src() && !s.path.ends_with("/limits.rs")) {
        for line in s.shipped().lines() {
            let t = line.trim_start();
            let t = t.strip_prefix("pub(crate) ").or(t.strip_prefix("pub(super) ")).unwrap_or(t);
            let t = t.strip_prefix("pub ").unwrap_or(t);
            let Some(rest) = t.strip_prefix("const ") else { continue };
            let name = ident(rest);
            if name.ends_with("_MAX") || name.ends_with("_MIN") {
                out.push((s.path.clone(), name.to_string()));
            }
        }
    }
    out
}

/// Files longer than `max` lines: (path, lines).
pub fn long_files(sources: &[Source], max: usize) -> Vec<(String, usize)> {
    sources
        .iter()
        .map(|s| (s.path.clone(), s.text.lines().count()))
        .filter(|(_, n)| *n > max)
        .collect()
}

/// Comment lines wider than `max` characters: (path, line number). Table rows (`//! |`)
/// and preformatted lines (two or more spaces after the comment marker: diagrams, format
/// layouts) are exempt, as rustfmt leaves code lines to itself.
pub fn wide_comments(sources: &[Source], max: usize) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for s in sources {
        for (i, line) in s.text.lines().enumerate() {
            let t = line.trim_start();
            if !t.starts_with("//") || line.chars().count() <= max {
                continue;
            }
            let body = t.trim_start_matches('/').trim_start_matches('!');
            if body.starts_with(" |") || body.starts_with("  ") {
                continue;
            }
            out.push((s.path.clone(), i + 1));
        }
    }
    out
}

/// Functions longer than `max` lines in shipped code: (path, name) → lines.
pub fn long_functions(sources: &[Source], max: usize) -> BTreeMap<(String, String), usize> {
    let mut out = BTreeMap::new();
    for s in sources.iter().filter(|s| s.is_src()) {
        let lines: Vec<&str> = s.shipped().lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(name) = fn_name(line) else { continue };
            // A signature over several lines that ends in `;` has no body (a trait's).
            let end = lines[i..].iter().find(|l| {
                let t = l.trim_end();
                t.ends_with('{') || t.ends_with(';')
            });
            if end.is_some_and(|l| l.trim_end().ends_with(';')) {
                continue;
            }
            let indent = &line[..line.len() - line.trim_start().len()];
            let close = format!("{indent}}}");
            let Some(len) = lines[i..].iter().position(|l| *l == close) else { continue };
            if len + 1 > max {
                let longest = out.entry((s.path.clone(), name)).or_insert(0);
                *longest = (*longest).max(len + 1);
            }
        }
    }
    out
}

/// The name of the function a line starts, if it starts one with a body.
fn fn_name(line: &str) -> Option<String> {
    let mut t = line.trim_start();
    if t.ends_with(';') {
        return None;
    }
    for prefix in ["pub(crate) ", "pub(super) ", "pub ", "const ", "async ", "unsafe "] {
        t = t.strip_prefix(prefix).unwrap_or(t);
    }
    let rest = t.strip_prefix("fn ")?;
    let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    (!name.is_empty()).then_some(name)
}

/// Words that say a comment is out of date: a feature promised for a later step, or work
/// left undone.
pub const STALE_WORDS: &[&str] = &["(later)", "(next)", "not here yet", "TODO", "FIXME"];

/// Comment lines with a stale word: (path, line number, the word).
pub fn stale_comments(sources: &[Source]) -> Vec<(String, usize, &'static str)> {
    let mut out = Vec::new();
    for s in sources {
        for (i, line) in s.text.lines().enumerate() {
            if !line.trim_start().starts_with("//") {
                continue;
            }
            if let Some(w) = STALE_WORDS.iter().find(|w| line.contains(*w)) {
                out.push((s.path.clone(), i + 1, *w));
            }
        }
    }
    out
}

/// Public items (`pub fn`, `struct`, `enum`, `trait`, `type`, `const`, `static`; not
/// fields, variants or re-exports) in the shipped code of library crates without a doc
/// comment: per crate, the (path, line) of each. A binary-only crate (no `src/lib.rs`) has
/// no public API, and a doc comment on its clap structs would become `--help` text.
pub fn undocumented_pub_items(sources: &[Source]) -> BTreeMap<String, Vec<(String, usize)>> {
    const KINDS: &[&str] = &["fn ", "struct ", "enum ", "trait ", "type ", "const ", "static "];
    let libraries: BTreeSet<&str> =
        sources.iter().filter(|s| s.path.ends_with("/src/lib.rs")).map(|s| s.krate()).collect();
    let mut out: BTreeMap<String, Vec<(String, usize)>> = BTreeMap::new();
    for s in sources.iter().filter(|s| s.is_src() && libraries.contains(s.krate())) {
        let lines: Vec<&str> = s.shipped().lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(rest) = line.trim_start().strip_prefix("pub ") else { continue };
            let rest = rest.strip_prefix("async ").unwrap_or(rest);
            let rest = rest.strip_prefix("unsafe ").unwrap_or(rest);
            if !KINDS.iter().any(|k| rest.starts_with(k)) {
                continue;
            }
            let documented = lines[..i]
                .iter()
                .rev()
                .map(|l| l.trim_start())
                .find(|l| !l.starts_with("#["))
                // A macro's item is documented by the docs its caller passes (`$(#[$doc])*`).
                .is_some_and(|l| l.starts_with("///") || l.starts_with("$(#[$doc"));
            if !documented {
                out.entry(s.krate().to_string()).or_default().push((s.path.clone(), i + 1));
            }
        }
    }
    out
}

/// Circles of module imports inside each crate: modules (files) under one parent that reach
/// each other, through `crate::`, `super::` or `self::` paths. An import of one module by a
/// module inside another is lifted to the two children of their nearest common parent (so
/// `a::x` using `b::y` is `a` using `b`); a module using its own parent or child is no
/// circle (a parent declares its children). Each circle is named by its crate and its
/// modules' paths (`api::offsets`).
pub fn module_cycles(sources: &[Source]) -> Vec<(String, BTreeSet<String>)> {
    // Per crate: every module path (a file's path under `src/`, `mod.rs` its directory).
    let mut modules: BTreeMap<String, BTreeSet<Vec<String>>> = BTreeMap::new();
    let src = || sources.iter().filter(|s| s.is_src());
    for s in src() {
        modules.entry(s.krate().to_string()).or_default().insert(module_path(&s.path));
    }
    // Per crate and common parent: sibling → siblings it uses.
    type Graph = BTreeMap<String, BTreeSet<String>>;
    let mut graphs: BTreeMap<(String, Vec<String>), Graph> = BTreeMap::new();
    for s in src() {
        let (krate, here) = (s.krate().to_string(), module_path(&s.path));
        let known = &modules[&krate];
        for target in module_refs(s.shipped(), &here, known) {
            let common = here.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == here.len() || common == target.len() {
                continue; // itself, its parent or its child
            }
            let graph = graphs.entry((krate.clone(), here[..common].to_vec())).or_default();
            graph.entry(here[common].clone()).or_default().insert(target[common].clone());
        }
    }
    let mut out = Vec::new();
    for ((krate, parent), graph) in graphs {
        let name = |m: &String| parent.iter().chain([m]).cloned().collect::<Vec<_>>().join("::");
        let mut seen = BTreeSet::new();
        for start in graph.keys() {
            if seen.contains(start) {
                continue;
            }
            let reach = reachable(&graph, start);
            let group: BTreeSet<String> =
                reach.iter().filter(|m| reachable(&graph, m).contains(start)).cloned().collect();
            if group.len() > 1 {
                seen.extend(group.iter().cloned());
                out.push((krate.clone(), group.iter().map(name).collect()));
            }
        }
    }
    out
}

/// A source file's module path in its crate: `src/a/b.rs` is `[a, b]`, `src/a/mod.rs` is
/// `[a]`, `lib.rs` and `main.rs` are the root.
fn module_path(path: &str) -> Vec<String> {
    let mut m: Vec<String> =
        path.split('/').skip(3).map(|p| p.trim_end_matches(".rs").to_string()).collect();
    match m.last().map(String::as_str) {
        Some("mod") => {
            m.pop();
        }
        Some("lib" | "main") if m.len() == 1 => {
            m.pop();
        }
        _ => {}
    }
    m
}

fn ident(t: &str) -> &str {
    let end = t.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(t.len());
    &t[..end]
}

/// The modules a file's `crate::`, `super::` and `self::` paths name: the deepest known
/// module of each path (a `{a, b}` group right after the prefix names each of its members).
fn module_refs(
    text: &str,
    here: &[String],
    known: &BTreeSet<Vec<String>>,
) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    for (at, _) in text.match_indices("::") {
        // The path's first segment: the identifier right before this `::`.
        let head_start =
            text[..at].rfind(|c: char| !(c.is_alphanumeric() || c == '_')).map_or(0, |i| i + 1);
        let continues = text[..head_start].ends_with("::");
        let head = &text[head_start..at];
        if continues || !matches!(head, "crate" | "super" | "self") {
            continue; // not the start of a path, or not one inside the crate
        }
        let mut base: Vec<String> = match head {
            "crate" => Vec::new(),
            "self" => here.to_vec(),
            _ => here[..here.len().saturating_sub(1)].to_vec(),
        };
        let mut rest = &text[at + 2..];
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for name in group.split(',').map(|g| ident(g.trim())).filter(|n| !n.is_empty()) {
                let path: Vec<String> = base.iter().cloned().chain([name.to_string()]).collect();
                if known.contains(&path) {
                    out.insert(path);
                }
            }
            continue;
        }
        // `a::b::c`: followed while its segments name known modules.
        let (mut path, mut target) = (base, None);
        loop {
            let seg = ident(rest);
            if seg.is_empty() {
                break;
            }
            path.push(seg.to_string());
            if !known.contains(&path) {
                break;
            }
            target = Some(path.clone());
            match rest[seg.len()..].strip_prefix("::") {
                Some(r) => rest = r,
                None => break,
            }
        }
        out.extend(target);
    }
    out
}

fn reachable(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::from([from.to_string()]);
    let mut stack = vec![from.to_string()];
    while let Some(m) = stack.pop() {
        for next in graph.get(&m).into_iter().flatten() {
            if seen.insert(next.clone()) {
                stack.push(next.clone());
            }
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(path: &str, text: &str) -> Source {
        Source { path: path.into(), text: text.into() }
    }

    #[test]
    fn functions_are_measured_to_their_closing_brace() {
        let s = src(
            "crates/x/src/a.rs",
            "fn a() {\n    1;\n    2;\n}\n    pub async fn b() {\n    }\n",
        );
        let long = long_functions(&[s], 3);
        assert_eq!(
            long.into_iter().collect::<Vec<_>>(),
            [(("crates/x/src/a.rs".into(), "a".into()), 4)]
        );
    }

    #[test]
    fn a_cycle_between_modules_is_found_and_a_chain_is_not() {
        let cyclic = [
            src("crates/x/src/a.rs", "use crate::b::B;"),
            src("crates/x/src/b/mod.rs", "use crate::a::A;"),
            src("crates/x/src/c.rs", "use crate::a::A;"),
        ];
        let found = module_cycles(&cyclic);
        assert_eq!(found, [("x".to_string(), BTreeSet::from(["a".to_string(), "b".to_string()]))]);
        let chain = [src("crates/x/src/a.rs", "use crate::b::B;"), src("crates/x/src/b.rs", "")];
        assert!(module_cycles(&chain).is_empty());
    }

    #[test]
    fn circles_between_siblings_are_found_through_super_and_self_but_not_with_a_parent() {
        let sources = [
            src("crates/x/src/api/mod.rs", "mod a; mod b; pub(crate) fn shared() {}"),
            src("crates/x/src/api/a.rs", "use super::b::B; use super::shared;"),
            src("crates/x/src/api/b.rs", "fn f() { super::super::api::a::g(); }"),
            src("crates/x/src/api/c.rs", "use super::{a, shared};"),
            src("crates/x/src/top.rs", "use crate::api::c::C; use self::inner::I;"),
            src("crates/x/src/top/inner.rs", "use super::super::top::T;"),
        ];
        let found = module_cycles(&sources);
        assert_eq!(
            found,
            [("x".to_string(), BTreeSet::from(["api::a".to_string(), "api::b".to_string()]))],
            "a and b use each other; c, the parent and a child are no circle"
        );
    }

    #[test]
    fn unsafe_is_found_with_or_without_its_safety_comment() {
        let s = src(
            "crates/x/src/a.rs",
            "// SAFETY: fine.\nunsafe impl Send for A {}\nfn f() {\n    unsafe { g() }\n}\n// unsafe { in a comment }\n",
        );
        assert_eq!(
            unsafe_uses(&[s]),
            [
                ("crates/x/src/a.rs".to_string(), 2, true),
                ("crates/x/src/a.rs".to_string(), 4, true)
            ]
        );
        let bare = src("crates/x/src/b.rs", "\n\n\n\n\n\n\n\nfn f() {\n    unsafe { g() }\n}\n");
        assert_eq!(unsafe_uses(&[bare]), [("crates/x/src/b.rs".to_string(), 10, false)]);
    }

    #[test]
    fn manifests_give_their_workspace_dependencies_by_kind() {
        let toml = "[package]\nname = \"folio-x\"\n\n[dependencies]\nfolio-proto.workspace = true\nfolio-rt = { workspace = true }\nbytes = \"1\"\n\n[dev-dependencies]\nfolio-testkit.workspace = true\n\n[features]\nfolio-y = []\n";
        let d = manifest_deps(toml);
        assert_eq!(d.normal, BTreeSet::from(["folio-proto".into(), "folio-rt".into()]));
        assert_eq!(d.dev, BTreeSet::from(["folio-testkit".into()]));
    }

    #[test]
    fn undocumented_items_skip_attributes_and_fields() {
        let s = src(
            "crates/x/src/a.rs",
            "/// Doc.\n#[derive(Debug)]\npub struct A {\n    pub field: u8,\n}\npub fn bare() {}\n",
        );
        let lib = src("crates/x/src/lib.rs", "pub mod a;\n");
        let found = undocumented_pub_items(&[s.clone(), lib]);
        assert_eq!(found["x"], [("crates/x/src/a.rs".to_string(), 6)]);
        // The same file in a binary-only crate (no lib.rs) is not checked.
        assert!(undocumented_pub_items(&[s]).is_empty());
    }

    #[test]
    fn tables_and_diagrams_may_be_wide_prose_may_not() {
        let wide = "x".repeat(120);
        let s = src(
            "crates/x/src/a.rs",
            &format!("//! | {wide} |\n//!     {wide}\n/// {wide}\nlet s = \"{wide}\";\n"),
        );
        assert_eq!(wide_comments(&[s], 100), [("crates/x/src/a.rs".to_string(), 3)]);
    }
}
