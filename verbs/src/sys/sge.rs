//! Reading the bytes a scatter/gather list describes (inline sends).

use crate::wr::ScatterGather;

/// Copies the bytes of every entry of `sg_list`, back to back, into `out` (which must hold
/// their total length); returns how many bytes were copied.
///
/// # Panics
/// When `out` is shorter than the total length: callers check it against the inline limit
/// first.
pub fn gather(sg_list: &[ScatterGather<'_>], out: &mut [u8]) -> usize {
    let mut at = 0;
    for sge in sg_list {
        let len = sge.length() as usize;
        let dst = &mut out[at..at + len];
        // SAFETY: a ScatterGather is made either by MemoryRegion::slice, which checked that
        // addr..addr+length lies inside a live registered region it borrows, or by the unsafe
        // ScatterGather::from_raw, whose contract requires that range to be valid for reads
        // while the request is posted. `dst` is a distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(sge.addr() as *const u8, dst.as_mut_ptr(), len) };
        at += len;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::LocalKey;

    #[test]
    fn gathers_entries_back_to_back() {
        let a = *b"hello ";
        let b = *b"world";
        // SAFETY: both arrays outlive the entries and are only read.
        let list = unsafe {
            [
                ScatterGather::from_raw(a.as_ptr() as u64, 6, LocalKey(1)),
                ScatterGather::from_raw(b.as_ptr() as u64, 5, LocalKey(2)),
            ]
        };
        let mut out = [0u8; 11];
        assert_eq!(gather(&list, &mut out), 11);
        assert_eq!(&out, b"hello world");
    }
}
