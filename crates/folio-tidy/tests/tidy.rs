//! The tidy test: Folio's house rules over its own sources (the checks are in
//! `folio_tidy`). Every budget is named here. An allowlist may only shrink: a test fails
//! when an entry is no longer needed, so the list stays true.

use std::collections::BTreeMap;

use folio_tidy::*;

/// No source file is longer (rust-analyzer's and TigerBeetle's rule of small files).
const FILE_LINES_MAX: usize = 900;
/// Comments are as wide as rustfmt makes code.
const COMMENT_WIDTH_MAX: usize = 100;
/// A function longer than this is split, or listed in `LONG_FUNCTIONS` with its length.
const FUNCTION_LINES_MAX: usize = 100;

/// Functions over `FUNCTION_LINES_MAX` when the rule came in, with their lengths then:
/// none may grow, none may be added, and a split one is removed from here.
const LONG_FUNCTIONS: &[(&str, &str, usize)] = &[
    ("crates/folio-bookie/src/bookie.rs", "check_cookies", 115),
    ("crates/folio-bookie/src/bookie.rs", "start_on", 139),
    ("crates/folio-bookie/src/server.rs", "connection", 117),
    ("crates/folio-broker/src/api/admin.rs", "handle", 112),
    ("crates/folio-broker/src/api/configs.rs", "handle", 108),
    ("crates/folio-broker/src/metrics.rs", "render", 140),
    ("crates/folio-client/src/ledger/recovery.rs", "recover", 140),
    ("crates/folio/src/bench/delete.rs", "run_async", 218),
    ("crates/folio/src/bench/kafka.rs", "produce_phases", 123),
    ("crates/folio/src/topics_cmd.rs", "run", 149),
];

/// Public items of library crates without a doc comment, per crate. Every item is documented
/// now; a crate listed here would get a budget that may only go down.
const UNDOCUMENTED_PUB_ITEMS: &[(&str, usize)] = &[];

/// The crate graph ARCHITECTURE.md draws: each crate and the workspace crates it may link
/// (`[dependencies]`). A dependency not listed fails, and so does a listed one no longer
/// used, so the table stays the picture. No arrow runs back up: a crate only ever names
/// crates listed before it here.
const ALLOWED_DEPENDENCIES: &[(&str, &[&str])] = &[
    ("folio-proto", &[]),
    ("folio-fjall", &[]),
    ("folio-rt", &[]),
    ("folio-tidy", &[]),
    ("folio-meta", &["folio-fjall", "folio-proto", "folio-rt"]),
    ("folio-storage", &["folio-fjall", "folio-proto"]),
    ("folio-bookie", &["folio-meta", "folio-proto", "folio-rt", "folio-storage"]),
    ("folio-client", &["folio-meta", "folio-proto", "folio-rt"]),
    ("folio-log", &["folio-client", "folio-meta", "folio-proto", "folio-rt"]),
    ("folio-repair", &["folio-bookie", "folio-client", "folio-meta", "folio-proto", "folio-rt"]),
    ("folio-registry", &["folio-meta"]),
    (
        "folio-broker",
        &["folio-client", "folio-log", "folio-meta", "folio-proto", "folio-registry", "folio-rt"],
    ),
    ("folio-kafka-client", &["folio-broker", "folio-rt"]),
    (
        "folio-testkit",
        &["folio-bookie", "folio-broker", "folio-kafka-client", "folio-meta", "folio-rt"],
    ),
    (
        "folio-sim",
        &[
            "folio-bookie",
            "folio-broker",
            "folio-client",
            "folio-log",
            "folio-meta",
            "folio-proto",
            "folio-repair",
            "folio-rt",
            "folio-storage",
            "folio-testkit",
        ],
    ),
    (
        "folio",
        &[
            "folio-bookie",
            "folio-broker",
            "folio-client",
            "folio-kafka-client",
            "folio-log",
            "folio-meta",
            "folio-proto",
            "folio-registry",
            "folio-repair",
        ],
    ),
];

/// Crates that link folio-testkit into what they ship: none (the benchmarks' raw Kafka
/// client and certificates live in folio-kafka-client). May only shrink.
const TESTKIT_SHIPPED_IN: &[&str] = &[];

/// Crates only tests run, never shipped: they may link folio-testkit like a dev-dependency.
const TEST_HARNESSES: &[&str] = &["folio-sim"];

/// The files that may hold `unsafe` code, each use with a `// SAFETY:` comment and a test
/// (named in the comment). May only shrink.
const UNSAFE_FILES: &[&str] = &[
    // `FrameBuf`'s `BufMut` (a Fetch answer's records reach the socket without a copy).
    "crates/folio-broker/src/api/framing.rs",
    // glibc's `mallopt` (malloc arenas capped before any thread starts).
    "crates/folio/src/main.rs",
];

/// Named limits (`*_MAX`, `*_MIN` consts) outside the `limits.rs` files (46 when #52 was
/// filed): none left; the rule keeps it so. A module that names one imports it from there.
const LIMITS_OUTSIDE_LIMITS_FILES: usize = 0;

/// What only some places may name: the seams the simulator drives (sockets, threads,
/// randomness reach production code only through folio-rt) and the broker's layers (only
/// its `api/` knows Kafka's messages). Each entry: what it is, the paths that name it, and
/// the path prefixes allowed to, with why.
struct Banned {
    what: &'static str,
    needles: &'static [&'static str],
    allowed: &'static [(&'static str, &'static str)],
}

const BANNED: &[Banned] = &[
    Banned {
        what: "sockets (use folio_rt::net)",
        needles: &["tokio::net", "std::net::TcpStream", "std::net::TcpListener", "UdpSocket"],
        allowed: &[
            ("crates/folio-rt/", "the seam itself"),
            ("crates/folio/src/", "the binary: HTTP endpoints and hostile-client benchmarks"),
            ("crates/folio-testkit/", "test support: raw clients and servers for tests"),
        ],
    },
    Banned {
        what: "threads (use folio_rt::blocking / spawn_blocking)",
        needles: &["std::thread", "thread::spawn", "tokio::task::spawn_blocking"],
        allowed: &[
            ("crates/folio-rt/", "the seam itself"),
            ("crates/folio-storage/", "the engine has no runtime; its threads step in the sim"),
            ("crates/folio-meta/src/embedded/", "the embedded store's lease clock thread"),
            ("crates/folio-sim/", "the simulator's own harness"),
            ("crates/folio/src/", "the binary: its entry points and benchmarks"),
        ],
    },
    Banned {
        what: "randomness from the OS (use folio_rt::random / rng / with_rng)",
        needles: &["rand::random", "rand::rng()", "thread_rng", "OsRng", "from_os_rng"],
        allowed: &[
            ("crates/folio-rt/", "the seam itself"),
            ("crates/folio/src/bench/", "benchmark workloads, outside any simulation"),
        ],
    },
    Banned {
        what: "the bookie protocol (only the client and the bookie speak it)",
        needles: &["BookieConnection", "wire::Request", "Request::Add", "Request::Read"],
        allowed: &[
            ("crates/folio-proto/", "defines it"),
            ("crates/folio-client/", "the client side"),
            ("crates/folio-bookie/", "the server side"),
            ("crates/folio/src/bench/", "raw-protocol benchmarks of one bookie"),
        ],
    },
    Banned {
        what: "Kafka's messages (kafka_protocol) outside the broker's api layer",
        needles: &["kafka_protocol"],
        allowed: &[
            ("crates/folio-broker/src/api/", "the api layer: the only place that knows them"),
            ("crates/folio-kafka-client/", "a raw Kafka client for tests and benchmarks"),
            ("crates/folio-sim/src/kafka/", "the simulator's model Kafka clients"),
            ("crates/folio/src/bench/", "Kafka clients of the benchmarks"),
            ("crates/folio/src/http/console/", "the console: a client of its broker, as its user"),
        ],
    },
];

/// ARCHITECTURE.md's size budget: a third of the 98 000 characters it had grown to, so it
/// stays a map (rust-analyzer's is 27 000).
const ARCHITECTURE_BYTES_MAX: usize = 32_000;

/// Public functions of library crates returning `Result<_, String>` (80 when #52 was filed):
/// none left; the rule keeps it so.
const STRING_ERRORS_IN_LIBRARY_APIS: usize = 0;

/// A count that may only go down: more than `budget` fails with `fix`; fewer fails until
/// the budget is lowered to it, so the budget always states where things are.
fn hold_to_budget<T: std::fmt::Debug>(
    found: &[T],
    budget: usize,
    name: &str,
    what: &str,
    fix: &str,
) {
    let n = found.len();
    assert!(n <= budget, "{n} {what} (budget {budget}): {fix}: {found:?}");
    assert!(n >= budget, "{n} {what}: lower {name} to {n}");
}

fn sources() -> Vec<Source> {
    let s = workspace_sources(&workspace_root()).expect("reading the workspace's sources");
    assert!(s.len() > 100, "found only {} source files: wrong root?", s.len());
    s
}

#[test]
fn no_source_file_is_over_the_line_budget() {
    let long = long_files(&sources(), FILE_LINES_MAX);
    assert!(long.is_empty(), "files over {FILE_LINES_MAX} lines (split them by job): {long:?}");
}

#[test]
fn comments_fit_the_line_width() {
    let wide = wide_comments(&sources(), COMMENT_WIDTH_MAX);
    assert!(wide.is_empty(), "comment lines over {COMMENT_WIDTH_MAX} characters: {wide:?}");
}

#[test]
fn no_comment_promises_later_work() {
    let stale = stale_comments(&sources());
    assert!(stale.is_empty(), "comments that are out of date: {stale:?}");
}

/// Doc comments show formats and diagrams, never runnable examples: every code fence opens
/// as ```text, so rustdoc has no doc test to run and `.ci/run` runs none (tests live in
/// `tests/` and `#[cfg(test)]` modules, where nextest runs them).
#[test]
fn doc_comments_hold_no_doc_tests() {
    let mut runnable = Vec::new();
    for s in sources().iter().filter(|s| s.is_src()) {
        let mut open = false;
        for (i, line) in s.text.lines().enumerate() {
            let t = line.trim_start();
            let Some(doc) = t.strip_prefix("///").or_else(|| t.strip_prefix("//!")) else {
                continue;
            };
            if let Some(lang) = doc.trim().strip_prefix("```") {
                if !open && lang != "text" {
                    runnable.push(format!("{}:{}", s.path, i + 1));
                }
                open = !open;
            }
        }
    }
    assert!(runnable.is_empty(), "doc code blocks that are not ```text: {runnable:?}");
}

#[test]
fn no_import_circle_inside_any_crate() {
    let cycles = module_cycles(&sources());
    assert!(
        cycles.is_empty(),
        "modules that import each other (move the shared part below both): {cycles:?}"
    );
}

#[test]
fn long_functions_are_listed_and_do_not_grow() {
    let found = long_functions(&sources(), FUNCTION_LINES_MAX);
    let allowed: BTreeMap<(String, String), usize> =
        LONG_FUNCTIONS.iter().map(|(p, n, l)| ((p.to_string(), n.to_string()), *l)).collect();
    let mut problems = Vec::new();
    for ((path, name), lines) in &found {
        match allowed.get(&(path.clone(), name.clone())) {
            None => problems.push(format!(
                "{path}: fn {name} has {lines} lines (at most {FUNCTION_LINES_MAX})"
            )),
            Some(max) if lines > max => {
                problems.push(format!("{path}: fn {name} grew to {lines} lines (listed at {max})"))
            }
            Some(_) => {}
        }
    }
    for (key, max) in &allowed {
        if !found.contains_key(key) {
            problems.push(format!(
                "{}: fn {} ({max}) is no longer over the budget: remove it from LONG_FUNCTIONS",
                key.0, key.1
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn undocumented_public_items_only_go_down() {
    let found = undocumented_pub_items(&sources());
    let mut problems = Vec::new();
    for (krate, budget) in UNDOCUMENTED_PUB_ITEMS {
        let items = found.get(*krate).map_or(&[][..], Vec::as_slice);
        if items.len() > *budget {
            problems.push(format!(
                "{krate}: {} undocumented public items (budget {budget}): {items:?}",
                items.len()
            ));
        } else if items.len() < *budget {
            problems.push(format!(
                "{krate}: {} undocumented public items: lower its budget from {budget}",
                items.len()
            ));
        }
    }
    for krate in found.keys() {
        if !UNDOCUMENTED_PUB_ITEMS.iter().any(|(k, _)| k == krate) {
            problems.push(format!(
                "{krate}: a new crate documents every public item: {:?}",
                found[krate]
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn crate_dependencies_follow_the_table_and_never_run_back_up() {
    let found = workspace_dependencies(&workspace_root()).expect("reading the manifests");
    let mut problems = Vec::new();
    for (i, (krate, allowed)) in ALLOWED_DEPENDENCIES.iter().enumerate() {
        let above: Vec<&str> = ALLOWED_DEPENDENCIES[..i].iter().map(|(k, _)| *k).collect();
        for d in allowed.iter().filter(|d| !above.contains(d)) {
            problems.push(format!("{krate} may depend on {d}, listed after it: an arrow up"));
        }
        let Some(deps) = found.get(*krate) else {
            problems.push(format!("{krate} is in the table but not under crates/"));
            continue;
        };
        for d in deps.normal.iter().filter(|d| !allowed.contains(&d.as_str())) {
            problems.push(format!("{krate} depends on {d}, which the table does not allow"));
        }
        for d in allowed.iter().filter(|d| !deps.normal.contains(**d)) {
            problems.push(format!("{krate} no longer depends on {d}: remove it from the table"));
        }
    }
    for krate in found.keys() {
        if !ALLOWED_DEPENDENCIES.iter().any(|(k, _)| k == krate) {
            problems.push(format!("{krate} is not in ALLOWED_DEPENDENCIES"));
        }
    }
    for (krate, deps) in &found {
        let shipped =
            deps.normal.contains("folio-testkit") && !TEST_HARNESSES.contains(&krate.as_str());
        match (shipped, TESTKIT_SHIPPED_IN.contains(&krate.as_str())) {
            (true, false) => {
                problems.push(format!("{krate} links folio-testkit outside its dev-dependencies"))
            }
            (false, true) => problems.push(format!(
                "{krate} no longer links folio-testkit: remove it from TESTKIT_SHIPPED_IN"
            )),
            _ => {}
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn unsafe_only_in_listed_files_and_each_with_its_safety_comment() {
    let uses = unsafe_uses(&sources());
    let mut problems: Vec<String> = uses
        .iter()
        .filter(|(path, _, safety)| !safety || !UNSAFE_FILES.contains(&path.as_str()))
        .map(|(path, line, safety)| {
            if *safety {
                format!("{path}:{line}: unsafe outside UNSAFE_FILES")
            } else {
                format!("{path}:{line}: unsafe without a `// SAFETY:` comment before it")
            }
        })
        .collect();
    for f in UNSAFE_FILES {
        if !uses.iter().any(|(path, _, _)| path == f) {
            problems.push(format!("{f} holds no unsafe any more: remove it from UNSAFE_FILES"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A crate with more integration-test files than this merges them into one binary,
/// `tests/suite.rs`: every file compiled on its own repeated the shared helpers and the
/// dependencies' generic code, which was most of CI's build (28 files of `folio` and
/// `folio-broker` took 634 s to compile, their two suites 71 s). `autotests = false` in its
/// Cargo.toml; nextest still runs each test in its own process; a file the suite does not
/// declare would never run, which the test below refuses.
const TEST_FILES_PER_BINARY_MAX: usize = 3;

#[test]
fn every_test_file_is_in_its_suite() {
    let found = test_files_outside_their_suite(&workspace_root(), TEST_FILES_PER_BINARY_MAX)
        .expect("reading the crates' tests");
    let problems: Vec<String> = found
        .iter()
        .map(|(krate, problem)| match problem {
            SuiteProblem::OneBinaryPerFile(n) => format!(
                "{krate}: {n} test files (over {TEST_FILES_PER_BINARY_MAX}), each its own \
                 binary: set `autotests = false` and list them in tests/suite.rs"
            ),
            SuiteProblem::NoSuiteTarget => {
                format!("{krate}: autotests = false needs a [[test]] at tests/suite.rs")
            }
            SuiteProblem::Undeclared(files) => {
                format!("{krate}: tests/suite.rs does not declare {files:?}: they never run")
            }
        })
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn named_limits_move_into_limits_files_and_never_come_back() {
    let found = limits_outside_limits_files(&sources());
    hold_to_budget(
        &found,
        LIMITS_OUTSIDE_LIMITS_FILES,
        "LIMITS_OUTSIDE_LIMITS_FILES",
        "named limits outside limits.rs",
        "put new ones in their crate's limits.rs",
    );
}

#[test]
fn sockets_threads_randomness_and_kafka_messages_only_where_allowed() {
    let sources = sources();
    let mut problems = Vec::new();
    for b in BANNED {
        let uses = uses_of(&sources, b.needles);
        for (path, line, needle) in &uses {
            if !b.allowed.iter().any(|(prefix, _)| path.starts_with(prefix)) {
                problems.push(format!("{path}:{line}: {needle}: {}", b.what));
            }
        }
        for (prefix, _) in b.allowed {
            if !uses.iter().any(|(path, _, _)| path.starts_with(prefix)) {
                problems.push(format!("{prefix} no longer names {}: remove it", b.what));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn test_polling_loops_are_bounded() {
    let found = unbounded_polling_loops(&sources());
    let found: Vec<String> = found.iter().map(|(path, line)| format!("{path}:{line}")).collect();
    assert!(
        found.is_empty(),
        "polling loops with no deadline (use folio_testkit::poll::until / eventually): {}",
        found.join(", ")
    );
}

#[test]
fn architecture_md_cites_only_what_exists() {
    let root = workspace_root();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let stale = stale_architecture_references(&root, &doc, &sources());
    assert!(stale.is_empty(), "ARCHITECTURE.md {}", stale.join("\nARCHITECTURE.md "));
    assert!(
        doc.len() <= ARCHITECTURE_BYTES_MAX,
        "ARCHITECTURE.md is {} bytes (budget {ARCHITECTURE_BYTES_MAX}): values belong next to \
         the code, the page says where things are and what they promise",
        doc.len()
    );
}

#[test]
fn library_errors_are_typed_and_string_errors_only_go_down() {
    let found = string_errors_in_library_apis(&sources());
    hold_to_budget(
        &found,
        STRING_ERRORS_IN_LIBRARY_APIS,
        "STRING_ERRORS_IN_LIBRARY_APIS",
        "public library functions returning Result<_, String>",
        "return the crate's error type",
    );
    let missing = library_crates_without_error_module(&workspace_root());
    assert!(missing.is_empty(), "library crates without an error.rs: {missing:?}");
}

/// The broker's layers (`folio-broker/src/lib.rs`): what each layer's files may import
/// from the rest of the crate, by the first module of a `crate::` path. The domain imports
/// only itself, the error codes and the limits (never `api`, the wire, or the state that
/// holds it); the wire takes from the domain only the principal it authenticated.
const BROKER_LAYERS: &[(&str, &[&str])] = &[
    ("crates/folio-broker/src/domain/", &["domain", "errors", "limits"]),
    (
        "crates/folio-broker/src/wire/",
        &["wire", "api", "budget", "errors", "limits", "security", "state", "domain::acl"],
    ),
];

#[test]
fn broker_layers_import_only_what_their_invariants_allow() {
    let mut problems = Vec::new();
    for s in sources().iter().filter(|s| s.is_src()) {
        let Some((_, allowed)) = BROKER_LAYERS.iter().find(|(p, _)| s.path.starts_with(p)) else {
            continue;
        };
        for (i, line) in s.shipped().lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for (at, _) in code.match_indices("crate::") {
                let path = &code[at + "crate::".len()..];
                if !allowed.iter().any(|a| {
                    path.starts_with(a)
                        && !path[a.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
                }) {
                    problems.push(format!("{}:{}: {}", s.path, i + 1, code.trim()));
                }
            }
        }
    }
    assert!(problems.is_empty(), "imports across the broker's layers: {problems:#?}");
}
