//! The resource-conflict scheduler: which earlier calls each call of a turn must wait for.
//!
//! Calls declare the keys they read and write (paths, or any `/`-separated
//! names). A key covers every key below it, so a write to `src` conflicts with
//! a read of `src/app.py`. Two calls conflict when one writes a key that the
//! other reads or writes, with either key covering the other; a call whose
//! resources are unknown conflicts with every call.
//!
//! The plan is a dependency graph: a call waits only for earlier calls it
//! conflicts with, and every conflicting pair is ordered (directly or through
//! a chain of waits), so running the graph gives the same result as running
//! the calls one by one in model order.
//!
//! Planning keeps per-key state in a trie of key components instead of
//! comparing calls pairwise: the last writer of each key, the readers since
//! that write, and for each node which children still hold live state below
//! them. A write clears everything below its key, because every later access
//! there reaches the write through the path it walks; so each recorded access
//! is collected at most once by a write, and the cost stays near-linear in the
//! number of keys.

use ahash::AHashMap;

use crate::error::EngineError;

/// What one call reads and writes. Keys are normalised lexically before use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    pub reads: Vec<String>,
    pub writes: Vec<String>,
}

/// Normalises a key lexically: drops `.` components and doubled or trailing
/// slashes, resolves `name/..`, and keeps a leading `/`. The empty relative
/// key is `.`; `..` above `/` stays at `/`, while a relative key keeps its
/// leading `..` components (nothing is known above its root).
pub fn normalize_key(key: &str) -> String {
    let (absolute, components) = components(key);
    let joined = components.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

fn components(key: &str) -> (bool, Vec<&str>) {
    let absolute = key.starts_with('/');
    let mut stack: Vec<&str> = Vec::new();
    for part in key.split('/') {
        match part {
            "" | "." => {}
            ".." => match stack.last() {
                Some(&last) if last != ".." => {
                    stack.pop();
                }
                _ if absolute => {}
                _ => stack.push(".."),
            },
            name => stack.push(name),
        }
    }
    (absolute, stack)
}

/// The plan of a turn: for each call (in model order), the earlier calls it
/// waits for, and the reverse, the later calls that wait for it. Both in
/// compressed rows: call `i`'s entries are `items[offsets[i]..offsets[i + 1]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependencies {
    pub wait_offsets: Vec<u32>,
    pub waits: Vec<u32>,
    pub dependent_offsets: Vec<u32>,
    pub dependents: Vec<u32>,
}

impl Dependencies {
    /// Number of calls planned.
    pub fn len(&self) -> usize {
        self.wait_offsets.len() - 1
    }

    /// Whether the turn had no calls.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The earlier calls that `call` waits for, in increasing order.
    pub fn waits_of(&self, call: usize) -> &[u32] {
        &self.waits[self.wait_offsets[call] as usize..self.wait_offsets[call + 1] as usize]
    }

    /// The later calls that wait for `call`, in increasing order.
    pub fn dependents_of(&self, call: usize) -> &[u32] {
        &self.dependents[self.dependent_offsets[call] as usize..self.dependent_offsets[call + 1] as usize]
    }
}

const NONE: u32 = u32::MAX;
// Node 0 is above every key: an unknown call writes it. Relative and absolute
// keys hang under separate roots, so `.` and `/` do not cover each other. A
// call that declares no key reads a node of its own that no key reaches, so
// that it is ordered against unknown calls only.
const EVERYTHING: u32 = 0;
const RELATIVE_ROOT: u32 = 1;
const ABSOLUTE_ROOT: u32 = 2;
const NO_KEY: u32 = 3;

#[derive(Debug, Clone, Copy)]
struct Reader {
    call: u32,
    /// The latest write strictly below the key when this call read it.
    writes_below: u32,
}

#[derive(Debug)]
struct Node {
    parent: u32,
    /// The latest call that wrote this key, unless a write above it came later.
    writer: u32,
    /// Calls that read this key since the last write at or above it, in order.
    readers: Vec<Reader>,
    /// The latest write strictly below this key (for `Reader::writes_below`).
    writes_below: u32,
    /// Writes strictly below this key since the last write at or above it:
    /// `(call, node)`, oldest first; an entry is live while `node`'s writer is `call`.
    write_log: Vec<(u32, u32)>,
    /// Children with a live writer or reader somewhere at or below them.
    live_children: Vec<u32>,
    in_parent_live: bool,
}

impl Node {
    fn new(parent: u32) -> Self {
        Self {
            parent,
            writer: NONE,
            readers: Vec::new(),
            writes_below: NONE,
            write_log: Vec::new(),
            live_children: Vec::new(),
            in_parent_live: false,
        }
    }
}

/// Keys as trie nodes, with the live accesses recorded on them.
struct KeyTrie {
    nodes: Vec<Node>,
    /// Interned component names.
    names: AHashMap<Box<str>, u32>,
    /// (parent node, component name) -> child node.
    children: AHashMap<(u32, u32), u32>,
    /// Keys as declared -> node, so that a repeated key costs one lookup.
    declared: AHashMap<Box<str>, u32>,
}

impl KeyTrie {
    fn new() -> Self {
        Self {
            nodes: vec![
                Node::new(NONE),
                Node::new(EVERYTHING),
                Node::new(EVERYTHING),
                Node::new(EVERYTHING),
            ],
            names: AHashMap::new(),
            children: AHashMap::new(),
            declared: AHashMap::new(),
        }
    }

    fn node(&mut self, key: &str) -> u32 {
        if let Some(&node) = self.declared.get(key) {
            return node;
        }
        let (absolute, parts) = components(key);
        let mut node = if absolute { ABSOLUTE_ROOT } else { RELATIVE_ROOT };
        for part in parts {
            let name = if let Some(&name) = self.names.get(part) {
                name
            } else {
                let name = self.names.len() as u32;
                self.names.insert(part.into(), name);
                name
            };
            let fresh_node = self.nodes.len() as u32;
            let child = *self.children.entry((node, name)).or_insert(fresh_node);
            if child == fresh_node {
                self.nodes.push(Node::new(node));
            }
            node = child;
        }
        self.declared.insert(key.into(), node);
        node
    }
}

/// Planning state for one turn.
struct Planner {
    trie: KeyTrie,
    /// `stamp[j] == i + 1` when call `j` is already among call `i`'s waits.
    stamp: Vec<u32>,
    /// Scratch buffers, reused across calls.
    path: Vec<u32>,
    stack: Vec<u32>,
    resolved: Vec<u32>,
}

impl Planner {
    fn wait(&mut self, call: u32, on: u32, waits: &mut Vec<u32>) {
        if on != NONE && on != call && self.stamp[on as usize] != call + 1 {
            self.stamp[on as usize] = call + 1;
            waits.push(on);
        }
    }

    /// Fills `path` with `node` and its ancestors; returns the latest live
    /// writer among them (the deepest one: a write clears the writers below it).
    fn walk_up(&mut self, node: u32) -> u32 {
        self.path.clear();
        let mut latest = NONE;
        let mut current = node;
        while current != NONE {
            self.path.push(current);
            let entry = &self.trie.nodes[current as usize];
            if latest == NONE && entry.writer != NONE {
                latest = entry.writer;
            }
            current = entry.parent;
        }
        latest
    }

    fn read(&mut self, call: u32, node: u32, waits: &mut Vec<u32>) {
        let latest = self.walk_up(node);
        self.wait(call, latest, waits);
        // The latest earlier reader of this key or of one above it. It waited
        // for every write below the key made before it, and every later write
        // below waited for it: once this call waits for one of those later
        // writes, the older ones are ordered already.
        let horizon = self
            .path
            .iter()
            .filter_map(|&at| self.trie.nodes[at as usize].readers.last().map(|r| r.call))
            .max();
        let mut log = std::mem::take(&mut self.trie.nodes[node as usize].write_log);
        let mut waited_past_horizon = false;
        let mut complete = true;
        for &(writer, at) in log.iter().rev() {
            if horizon.is_some_and(|h| writer < h) && waited_past_horizon {
                complete = false;
                break;
            }
            if self.trie.nodes[at as usize].writer == writer {
                self.wait(call, writer, waits);
                waited_past_horizon |= horizon.is_none_or(|h| writer > h);
            }
        }
        if complete {
            // Every entry was looked at: drop the ones overwritten since.
            log.retain(|&(writer, at)| self.trie.nodes[at as usize].writer == writer);
        }
        let entry = &mut self.trie.nodes[node as usize];
        entry.write_log = log;
        if entry.readers.last().is_none_or(|r| r.call != call) {
            let writes_below = entry.writes_below;
            entry.readers.push(Reader { call, writes_below });
        }
        self.mark_live(node);
    }

    fn write(&mut self, call: u32, node: u32, waits: &mut Vec<u32>) {
        let latest = self.walk_up(node);
        // Readers of this key and of the keys above it since `latest` (older
        // ones are ordered before it). Going back in time, a reader that came
        // after a write below its key is the last one needed: that write
        // waited for the readers before it.
        let mut waited_for_newer = false;
        for index in 0..self.path.len() {
            let at = self.path[index] as usize;
            let count = self.trie.nodes[at].readers.len();
            for position in (0..count).rev() {
                let reader = self.trie.nodes[at].readers[position];
                if latest != NONE && reader.call < latest {
                    break;
                }
                self.wait(call, reader.call, waits);
                waited_for_newer = true;
                let previous = position.checked_sub(1).map(|p| self.trie.nodes[at].readers[p].call);
                if previous.is_some_and(|p| reader.writes_below != NONE && reader.writes_below > p) {
                    break;
                }
            }
        }
        // Everything live below the key: collected once, then cleared, since
        // later accesses there reach this write on their way up.
        let target = &mut self.trie.nodes[node as usize];
        target.readers.clear();
        target.write_log.clear();
        self.stack.clear();
        self.stack.append(&mut target.live_children);
        while let Some(below) = self.stack.pop() {
            let entry = &mut self.trie.nodes[below as usize];
            let writer = std::mem::replace(&mut entry.writer, NONE);
            let readers = std::mem::take(&mut entry.readers);
            entry.in_parent_live = false;
            entry.write_log.clear();
            self.stack.append(&mut entry.live_children);
            waited_for_newer |= writer != NONE || !readers.is_empty();
            self.wait(call, writer, waits);
            for reader in readers {
                self.wait(call, reader.call, waits);
            }
        }
        // Any access waited for above came after `latest` and conflicts with
        // it, so it is ordered after it already.
        if !waited_for_newer {
            self.wait(call, latest, waits);
        }
        self.trie.nodes[node as usize].writer = call;
        for index in 0..self.path.len() {
            let at = self.path[index];
            let entry = &mut self.trie.nodes[at as usize];
            entry.writes_below = call;
            // Nothing reads the node above every key, so it keeps no log.
            if at != node && at != EVERYTHING {
                entry.write_log.push((call, node));
            }
        }
        self.mark_live(node);
    }

    /// Records that `node` holds live state in the child lists of its
    /// ancestors. Stops at the first node already recorded: its ancestors are.
    fn mark_live(&mut self, node: u32) {
        let mut current = node;
        loop {
            let entry = &mut self.trie.nodes[current as usize];
            let parent = entry.parent;
            if parent == NONE || entry.in_parent_live {
                break;
            }
            entry.in_parent_live = true;
            self.trie.nodes[parent as usize].live_children.push(current);
            current = parent;
        }
    }
}

/// Plans a turn's calls one at a time, as they arrive: each insertion returns
/// the earlier calls the new call waits for. Inserting a turn's calls in model
/// order gives the waits `plan_dependencies` gives for the whole turn.
pub struct ConflictPlanner {
    planner: Planner,
    waits: Vec<u32>,
}

impl Default for ConflictPlanner {
    fn default() -> Self {
        Self::new()
    }
}

impl ConflictPlanner {
    pub fn new() -> Self {
        Self {
            planner: Planner {
                trie: KeyTrie::new(),
                stamp: Vec::new(),
                path: Vec::new(),
                stack: Vec::new(),
                resolved: Vec::new(),
            },
            waits: Vec::new(),
        }
    }

    /// Number of calls inserted so far.
    pub fn len(&self) -> usize {
        self.planner.stamp.len()
    }

    /// Whether no call was inserted yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds the next call (`None`: its resources are unknown, it conflicts
    /// with every call); returns the earlier calls it waits for, in
    /// increasing order.
    pub fn insert(&mut self, access: Option<&Access>) -> Result<&[u32], EngineError> {
        let mut waits = std::mem::take(&mut self.waits);
        waits.clear();
        let result = self.insert_into(access, &mut waits);
        self.waits = waits;
        result?;
        Ok(&self.waits)
    }

    fn insert_into(&mut self, access: Option<&Access>, waits: &mut Vec<u32>) -> Result<(), EngineError> {
        let planner = &mut self.planner;
        if planner.stamp.len() >= (NONE - 1) as usize {
            return Err(EngineError::InvalidOption {
                option: "calls",
                message: format!("at most {} calls per turn", NONE - 1),
            });
        }
        let call = planner.stamp.len() as u32;
        planner.stamp.push(0);
        let start = waits.len();
        match access {
            None => planner.write(call, EVERYTHING, waits),
            Some(access) if access.reads.is_empty() && access.writes.is_empty() => {
                planner.read(call, NO_KEY, waits);
            }
            Some(access) => {
                // Resolve every key first: the trie grows, the state does not.
                planner.resolved.clear();
                for key in access.writes.iter().chain(&access.reads) {
                    let node = planner.trie.node(key);
                    planner.resolved.push(node);
                }
                let resolved = std::mem::take(&mut planner.resolved);
                let (written, read) = resolved.split_at(access.writes.len());
                for &node in written {
                    planner.write(call, node, waits);
                }
                for &node in read {
                    planner.read(call, node, waits);
                }
                planner.resolved = resolved;
            }
        }
        waits[start..].sort_unstable();
        Ok(())
    }
}

/// Builds the dependency plan of a turn. `calls[i]` is call `i`'s declared
/// access, or `None` when unknown (it then conflicts with every call).
///
/// Each call waits for the latest earlier write covering or covered by the
/// keys it touches, and a writing call also for the reads since; every
/// conflicting pair ends up ordered, and a call never waits for a call it
/// does not conflict with.
pub fn plan_dependencies(calls: &[Option<Access>]) -> Result<Dependencies, EngineError> {
    if calls.len() >= NONE as usize {
        return Err(EngineError::InvalidOption {
            option: "calls",
            message: format!("at most {} calls per turn, got {}", NONE - 1, calls.len()),
        });
    }
    let mut planner = ConflictPlanner::new();
    planner.planner.stamp.reserve(calls.len());
    let mut wait_offsets = Vec::with_capacity(calls.len() + 1);
    let mut waits = Vec::new();
    wait_offsets.push(0u32);
    for access in calls {
        planner.insert_into(access.as_ref(), &mut waits)?;
        wait_offsets.push(waits.len() as u32);
    }
    let (dependent_offsets, dependents) = reverse(calls.len(), &wait_offsets, &waits);
    Ok(Dependencies {
        wait_offsets,
        waits,
        dependent_offsets,
        dependents,
    })
}

/// The reverse of the wait rows: for each call, the calls that wait for it.
fn reverse(count: usize, offsets: &[u32], waits: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let mut dependent_offsets = vec![0u32; count + 1];
    for &on in waits {
        dependent_offsets[on as usize + 1] += 1;
    }
    for index in 0..count {
        dependent_offsets[index + 1] += dependent_offsets[index];
    }
    let mut fill: Vec<u32> = dependent_offsets[..count].to_vec();
    let mut dependents = vec![0u32; waits.len()];
    // Calls are visited in order, so every row comes out sorted.
    for call in 0..count {
        for &on in &waits[offsets[call] as usize..offsets[call + 1] as usize] {
            dependents[fill[on as usize] as usize] = call as u32;
            fill[on as usize] += 1;
        }
    }
    (dependent_offsets, dependents)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(reads: &[&str], writes: &[&str]) -> Access {
        Access {
            reads: reads.iter().map(|&k| k.to_owned()).collect(),
            writes: writes.iter().map(|&k| k.to_owned()).collect(),
        }
    }

    fn waits(calls: &[Option<Access>]) -> Vec<Vec<u32>> {
        let plan = plan_dependencies(calls).unwrap();
        (0..plan.len()).map(|i| plan.waits_of(i).to_vec()).collect()
    }

    #[test]
    fn keys_are_normalised_lexically() {
        for (key, expected) in [
            ("src/app.py", "src/app.py"),
            ("./src/app.py", "src/app.py"),
            ("src//app.py", "src/app.py"),
            ("src/lib/../app.py", "src/app.py"),
            ("src/", "src"),
            ("src/.", "src"),
            (".", "."),
            ("./", "."),
            ("", "."),
            ("a/..", "."),
            ("../a", "../a"),
            ("a/../../b", "../b"),
            ("/", "/"),
            ("//etc///hosts", "/etc/hosts"),
            ("/../etc", "/etc"),
            ("/tmp/./x/../y/", "/tmp/y"),
            ("db:users", "db:users"),
        ] {
            assert_eq!(normalize_key(key), expected, "normalising {key:?}");
        }
    }

    #[test]
    fn readers_overlap_and_a_writer_waits_for_them() {
        let calls = [
            Some(access(&["a"], &[])),
            Some(access(&["a"], &[])),
            Some(access(&[], &["a"])),
            Some(access(&["a"], &[])),
            Some(access(&["b"], &[])),
        ];
        assert_eq!(waits(&calls), vec![vec![], vec![], vec![0, 1], vec![2], vec![]]);
    }

    #[test]
    fn spellings_of_one_key_are_the_same_key() {
        let calls = [
            Some(access(&[], &["./src//app.py"])),
            Some(access(&["src/lib/../app.py/"], &[])),
        ];
        assert_eq!(waits(&calls), vec![vec![], vec![0]]);
    }

    #[test]
    fn a_directory_covers_what_is_below_it() {
        let calls = [
            Some(access(&[], &["src/a.py"])),
            Some(access(&[], &["src/b.py"])),
            Some(access(&["src"], &[])),
            Some(access(&[], &["docs/x.md"])),
            Some(access(&[], &["src"])),
            Some(access(&["src/a.py"], &[])),
        ];
        // The directory read waits for both file writes, not for docs; the
        // directory write waits for the read (which ordered the file writes);
        // the later file read waits for the directory write.
        assert_eq!(
            waits(&calls),
            vec![vec![], vec![], vec![0, 1], vec![], vec![0, 1, 2], vec![4]]
        );
    }

    #[test]
    fn a_read_of_a_directory_blocks_writes_below_it_but_not_beside_it() {
        let calls = [
            Some(access(&["src"], &[])),
            Some(access(&[], &["src/a.py"])),
            Some(access(&[], &["srcs/a.py"])),
        ];
        assert_eq!(waits(&calls), vec![vec![], vec![0], vec![]]);
    }

    #[test]
    fn unknown_resources_conflict_with_everything() {
        let calls = [
            Some(access(&["a"], &[])),
            Some(access(&[], &["/etc/b"])),
            None,
            Some(access(&["c"], &[])),
            Some(access(&[], &[])),
            None,
        ];
        assert_eq!(
            waits(&calls),
            vec![vec![], vec![], vec![0, 1], vec![2], vec![2], vec![3, 4]]
        );
    }

    #[test]
    fn relative_and_absolute_keys_are_separate() {
        let calls = [
            Some(access(&[], &["."])),
            Some(access(&[], &["/"])),
            Some(access(&["x"], &[])),
            Some(access(&["/x"], &[])),
        ];
        assert_eq!(waits(&calls), vec![vec![], vec![], vec![0], vec![1]]);
    }

    #[test]
    fn a_call_that_touches_nothing_is_ordered_only_against_unknown_calls() {
        let calls = [
            Some(access(&[], &["a"])),
            Some(access(&[], &[])),
            None,
            Some(access(&[], &[])),
            Some(access(&[], &["a"])),
        ];
        // The unknown call reaches the first write through nothing else, so
        // it waits for it directly.
        assert_eq!(waits(&calls), vec![vec![], vec![], vec![0, 1], vec![2], vec![2]]);
    }

    #[test]
    fn a_call_never_waits_for_itself() {
        let calls = [
            Some(access(&["a", "a/b"], &["a", "a/b/c"])),
            Some(access(&["a/b"], &["a/b"])),
        ];
        assert_eq!(waits(&calls), vec![vec![], vec![0]]);
    }

    #[test]
    fn dependents_are_the_reverse_of_waits() {
        let calls = [
            Some(access(&[], &["a"])),
            Some(access(&["a"], &[])),
            Some(access(&["a"], &[])),
            Some(access(&[], &["a"])),
        ];
        let plan = plan_dependencies(&calls).unwrap();
        assert_eq!(plan.dependents_of(0), &[1, 2]);
        assert_eq!(plan.dependents_of(1), &[3]);
        assert_eq!(plan.dependents_of(2), &[3]);
        assert!(plan.dependents_of(3).is_empty());
        assert!(plan_dependencies(&[]).unwrap().is_empty());
    }

    #[test]
    fn repeated_writes_to_one_key_form_a_chain() {
        let calls: Vec<_> = (0..1000).map(|_| Some(access(&["src"], &["src/app.py"]))).collect();
        let plan = plan_dependencies(&calls).unwrap();
        for call in 1..1000 {
            assert_eq!(plan.waits_of(call), &[call as u32 - 1]);
        }
    }

    #[test]
    fn alternating_edits_and_searches_keep_short_wait_lists() {
        // edit a file, search its directory, edit, search, ...: each search
        // waits for the last edit only, each edit for the last search only.
        let mut calls = Vec::new();
        for round in 0..500 {
            calls.push(Some(access(&[], &[&format!("src/file{}.py", round % 7)])));
            calls.push(Some(access(&["src"], &[])));
        }
        let plan = plan_dependencies(&calls).unwrap();
        assert!(plan.waits.len() < 3 * calls.len(), "{} waits", plan.waits.len());
    }

    /// A small deterministic generator, so that the property below needs no
    /// extra crate and every run checks the same turns.
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, bound: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((self.0 >> 33) % bound as u64) as usize
        }
    }

    fn covers(a: &str, b: &str) -> bool {
        let (a_abs, a_parts) = components(a);
        let (b_abs, b_parts) = components(b);
        a_abs == b_abs && a_parts.len() <= b_parts.len() && a_parts[..] == b_parts[..a_parts.len()]
    }

    fn conflict(first: Option<&Access>, second: Option<&Access>) -> bool {
        let (Some(first), Some(second)) = (first, second) else {
            return true;
        };
        let related = |a: &String, b: &String| covers(a, b) || covers(b, a);
        let touches =
            |access: &Access, key: &String| access.reads.iter().chain(&access.writes).any(|k| related(k, key));
        first.writes.iter().any(|w| touches(second, w)) || second.writes.iter().any(|w| touches(first, w))
    }

    #[test]
    fn calls_inserted_one_at_a_time_wait_as_in_the_whole_plan() {
        let calls = [
            Some(access(&[], &["src/a.py"])),
            None,
            Some(access(&["src"], &[])),
            Some(access(&[], &[])),
            Some(access(&[], &["src"])),
            Some(access(&["docs"], &[])),
        ];
        let whole = waits(&calls);
        let mut planner = ConflictPlanner::new();
        let online: Vec<Vec<u32>> = calls
            .iter()
            .map(|access| planner.insert(access.as_ref()).unwrap().to_vec())
            .collect();
        assert_eq!(online, whole);
        assert_eq!(planner.len(), calls.len());
    }

    #[test]
    fn every_conflict_is_ordered_and_every_wait_is_a_conflict() {
        let keys = [
            ".",
            "src",
            "src/",
            "./src/a.py",
            "src/a.py",
            "src/b.py",
            "src/lib",
            "src/lib/c.py",
            "src/lib/deep",
            "src/lib/deep/d.py",
            "src//lib/deep/e.py",
            "docs/x.md",
            "docs",
            "/",
            "/tmp",
            "/tmp/../tmp/f",
            "../up",
        ];
        let mut rng = Lcg(7);
        for _ in 0..1000 {
            let count = 1 + rng.below(60);
            let calls: Vec<Option<Access>> = (0..count)
                .map(|_| {
                    if rng.below(10) == 0 {
                        return None;
                    }
                    let mut pick = |limit: usize| -> Vec<String> {
                        let count = rng.below(limit);
                        (0..count).map(|_| keys[rng.below(keys.len())].to_owned()).collect()
                    };
                    let reads = pick(3);
                    let writes = pick(2);
                    Some(Access { reads, writes })
                })
                .collect();
            let plan = plan_dependencies(&calls).unwrap();
            // reach[i]: bitset of the calls that i waits for, directly or not.
            let mut reach = vec![0u64; count];
            for call in 0..count {
                for &on in plan.waits_of(call) {
                    assert!((on as usize) < call, "call {call} waits for a later call {on}");
                    assert!(
                        conflict(calls[on as usize].as_ref(), calls[call].as_ref()),
                        "call {call} waits for {on} without a conflict: {calls:?}"
                    );
                    reach[call] |= reach[on as usize] | (1 << on);
                }
            }
            for later in 0..count {
                for earlier in 0..later {
                    if conflict(calls[earlier].as_ref(), calls[later].as_ref()) {
                        assert!(
                            reach[later] & (1 << earlier) != 0,
                            "call {later} is not ordered after {earlier}: {calls:?}"
                        );
                    }
                }
            }
        }
    }
}
