//! The `route` label: path templates and capped raw paths, interned to small fixed slots.
//!
//! The api layer names the matched route by its template (`/v1/chats/{chat_id}/messages`), so an
//! id in a URL never becomes a series. Requests rejected before routing and genuine 404s fall back
//! to the raw path (`docs/metrics.md`, "Label cardinality"), but a path scanner must not grow the
//! series without bound: the first [`MAX_RAW_ROUTES`] distinct raw paths get their own label
//! value, every later one is counted under [`OTHER_ROUTE`]. Interning happens once per distinct
//! value; the hot path for a template is a [`RouteId`] the router resolved at start-up (no lock,
//! no hash).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{OnceLock, RwLock};

use ahash::AHashMap;

/// Distinct raw (unrouted) path values kept as their own label before falling back to `other`.
pub const MAX_RAW_ROUTES: usize = 64;
/// Distinct route templates; a router has a handful, this only guards against misuse.
pub const MAX_TEMPLATE_ROUTES: usize = 256;
/// Every route slot: `other`, the templates and the raw paths.
pub const ROUTE_SLOTS: usize = 1 + MAX_TEMPLATE_ROUTES + MAX_RAW_ROUTES;
/// The label value that raw paths beyond the cap (and templates beyond theirs) share.
pub const OTHER_ROUTE: &str = "other";
/// A raw path longer than this is not worth a label of its own (scanners send long junk).
pub const MAX_ROUTE_LABEL_BYTES: usize = 256;

/// An interned route label: an index into every per-route array of the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteId(pub(crate) u16);

impl RouteId {
    /// The shared overflow label `other`.
    pub const OTHER: RouteId = RouteId(0);

    pub fn index(self) -> usize {
        self.0 as usize
    }
}

struct Slot {
    name: Box<str>,
    /// The name escaped as a label value, so that rendering is a copy.
    escaped: Box<str>,
    template: bool,
}

/// Fixed-size table of route labels. Reads of a slot's name are lock-free (`OnceLock`); the
/// name -> id map is behind a read-mostly lock taken only when a string must be resolved.
pub struct RouteTable {
    slots: Box<[OnceLock<Slot>]>,
    by_name: RwLock<AHashMap<Box<str>, RouteId>>,
    len: AtomicUsize,
    raw: AtomicUsize,
    templates: AtomicUsize,
}

impl Default for RouteTable {
    fn default() -> Self {
        Self::new()
    }
}

impl RouteTable {
    pub fn new() -> RouteTable {
        let slots: Box<[OnceLock<Slot>]> = (0..ROUTE_SLOTS).map(|_| OnceLock::new()).collect();
        let t = RouteTable {
            slots,
            by_name: RwLock::new(AHashMap::with_capacity(ROUTE_SLOTS)),
            len: AtomicUsize::new(0),
            raw: AtomicUsize::new(0),
            templates: AtomicUsize::new(0),
        };
        let mut map = t.by_name.write().unwrap_or_else(|e| e.into_inner());
        t.insert_locked(&mut map, OTHER_ROUTE, false);
        drop(map);
        t
    }

    /// The id of a route template (from the router). Templates are not counted against the raw
    /// cap; past [`MAX_TEMPLATE_ROUTES`] they share `other`.
    pub fn template(&self, template: &str) -> RouteId {
        self.intern(template, true)
    }

    /// The id for a raw request path (404s, requests rejected before routing): its own label for
    /// the first [`MAX_RAW_ROUTES`] distinct values, `other` afterwards.
    pub fn raw(&self, path: &str) -> RouteId {
        if path.len() > MAX_ROUTE_LABEL_BYTES {
            return RouteId::OTHER;
        }
        self.intern(path, false)
    }

    fn intern(&self, name: &str, template: bool) -> RouteId {
        if let Some(&id) = self.by_name.read().unwrap_or_else(|e| e.into_inner()).get(name) {
            return id;
        }
        let mut map = self.by_name.write().unwrap_or_else(|e| e.into_inner());
        if let Some(&id) = map.get(name) {
            return id;
        }
        let (counter, cap) =
            if template { (&self.templates, MAX_TEMPLATE_ROUTES) } else { (&self.raw, MAX_RAW_ROUTES) };
        if counter.load(Ordering::Relaxed) >= cap {
            return RouteId::OTHER;
        }
        counter.fetch_add(1, Ordering::Relaxed);
        self.insert_locked(&mut map, name, template)
    }

    fn insert_locked(&self, map: &mut AHashMap<Box<str>, RouteId>, name: &str, template: bool) -> RouteId {
        let idx = self.len.load(Ordering::Relaxed);
        let id = RouteId(idx as u16);
        let mut escaped = String::with_capacity(name.len());
        crate::metrics::prometheus::escape_label_value(name, &mut escaped);
        let _ = self.slots[idx].set(Slot { name: name.into(), escaped: escaped.into(), template });
        map.insert(name.into(), id);
        // Release: a reader that sees the new length also sees the slot.
        self.len.store(idx + 1, Ordering::Release);
        id
    }

    /// Number of interned routes (ids `0..len()` are valid).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn name(&self, id: RouteId) -> &str {
        self.slots.get(id.index()).and_then(|s| s.get()).map(|s| &*s.name).unwrap_or(OTHER_ROUTE)
    }

    pub(crate) fn escaped(&self, id: RouteId) -> &str {
        self.slots.get(id.index()).and_then(|s| s.get()).map(|s| &*s.escaped).unwrap_or(OTHER_ROUTE)
    }

    /// Whether the route came from the router (templates are rendered even at zero).
    pub fn is_template(&self, id: RouteId) -> bool {
        self.slots.get(id.index()).and_then(|s| s.get()).map(|s| s.template).unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_paths_are_capped_then_share_other() {
        let t = RouteTable::new();
        let tpl = t.template("/v1/chats/{chat_id}/messages");
        let mut ids = Vec::new();
        for i in 0..MAX_RAW_ROUTES {
            let id = t.raw(&format!("/scan/{i}"));
            assert_ne!(id, RouteId::OTHER, "raw path {i} is within the cap");
            ids.push(id);
        }
        assert_eq!(t.raw("/scan/one-too-many"), RouteId::OTHER);
        assert_eq!(t.raw("/scan/another"), RouteId::OTHER);
        // Known raw paths keep their label after the cap is reached.
        assert_eq!(t.raw("/scan/3"), ids[3]);
        // Templates are not counted against the raw cap.
        assert_ne!(t.template("/v1/models"), RouteId::OTHER);
        assert_eq!(t.template("/v1/chats/{chat_id}/messages"), tpl);
        assert_eq!(t.name(RouteId::OTHER), "other");
        assert_eq!(t.name(ids[5]), "/scan/5");
        assert!(t.is_template(tpl));
        assert!(!t.is_template(ids[0]));
    }

    #[test]
    fn a_raw_path_spelled_other_is_the_other_slot_and_long_paths_fold() {
        let t = RouteTable::new();
        assert_eq!(t.raw("other"), RouteId::OTHER);
        assert_eq!(t.raw(&"a".repeat(MAX_ROUTE_LABEL_BYTES + 1)), RouteId::OTHER);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn template_raw_same_string_is_one_label() {
        let t = RouteTable::new();
        let a = t.template("/health");
        assert_eq!(t.raw("/health"), a);
        assert_eq!(t.escaped(t.raw("/a\"b\\c\nd")), "/a\\\"b\\\\c\\nd");
    }
}
