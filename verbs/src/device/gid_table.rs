//! [`GidTable`]: a port's GID table, read from sysfs when first looked at.

use super::{sysfs, GidEntry};
use std::fmt;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The populated slots of a port's GID table, in index order.
///
/// Discovery leaves the table unread: sysfs has one file per slot (rxe's table has 1,024,
/// nearly all empty, so reading it costs over a thousand opens), and most programs need no
/// GID or just one ([`DeviceInfo::query_gid`](super::DeviceInfo::query_gid) reads a single
/// slot). The first look (through `Deref` to a slice, [`entries`](Self::entries) or
/// iteration) reads the whole table once; later looks see that same snapshot. A table that
/// can no longer be read then (the device was removed) is empty.
#[derive(Clone, Default)]
pub struct GidTable {
    /// The sysfs port directory to read from; `None` for a table given whole.
    port_dir: Option<PathBuf>,
    entries: OnceLock<Vec<GidEntry>>,
}

impl GidTable {
    /// A table read from the sysfs port directory `port_dir` on first use.
    pub(crate) fn lazy(port_dir: PathBuf) -> GidTable {
        GidTable {
            port_dir: Some(port_dir),
            entries: OnceLock::new(),
        }
    }

    /// The populated slots (read now if this is the first look).
    pub fn entries(&self) -> &[GidEntry] {
        self.entries.get_or_init(|| {
            self.port_dir
                .as_deref()
                .map(sysfs::read_gids)
                .unwrap_or_default()
        })
    }

    /// Whether the table has been read (or was given whole).
    pub fn is_loaded(&self) -> bool {
        self.entries.get().is_some()
    }
}

impl From<Vec<GidEntry>> for GidTable {
    /// A table of exactly `entries` (a userspace device's, or a test's).
    fn from(entries: Vec<GidEntry>) -> GidTable {
        GidTable {
            port_dir: None,
            entries: OnceLock::from(entries),
        }
    }
}

impl Deref for GidTable {
    type Target = [GidEntry];
    fn deref(&self) -> &[GidEntry] {
        self.entries()
    }
}

impl<'a> IntoIterator for &'a GidTable {
    type Item = &'a GidEntry;
    type IntoIter = std::slice::Iter<'a, GidEntry>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries().iter()
    }
}

impl PartialEq for GidTable {
    fn eq(&self, other: &GidTable) -> bool {
        self.entries() == other.entries()
    }
}

impl Eq for GidTable {}

impl fmt::Debug for GidTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.entries()).finish()
    }
}
